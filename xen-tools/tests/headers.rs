//! Checks every ioctl number, struct layout and XenStore constant that
//! pvgpu-xen uses against the C headers of Debian's libxen-dev
//! (`/usr/include/xen/sys/{gntalloc,gntdev,evtchn}.h`,
//! `/usr/include/xen/io/{xs_wire,xenbus}.h`).
//!
//! It writes a C program that prints each value, compiles it with `cc`
//! against those headers, runs it, and compares line by line. Missing
//! headers or compiler are a failure, not a skip: CI installs libxen-dev.

use pvgpu_xen::abi::*;
use pvgpu_xen::xenbus::XenbusState;
use std::mem::{offset_of, size_of, size_of_val};
use std::path::{Path, PathBuf};
use std::process::Command;

const HEADERS: &[&str] = &[
    "/usr/include/xen/xen.h",
    "/usr/include/xen/sys/gntalloc.h",
    "/usr/include/xen/sys/gntdev.h",
    "/usr/include/xen/sys/evtchn.h",
    "/usr/include/xen/io/xs_wire.h",
    "/usr/include/xen/io/xenbus.h",
];

/// `(C expression, the value our Rust code uses)`.
fn checks() -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = Vec::new();
    macro_rules! num {
        ($c:expr, $rust:expr) => {
            v.push(($c.to_string(), $rust as u64))
        };
    }
    // sizeof the struct, then offset and size of each field.
    macro_rules! layout {
        ($cstruct:literal, $rs:ty, [$($cf:literal => $rf:ident),* $(,)?]) => {
            num!(format!("sizeof(struct {})", $cstruct), size_of::<$rs>());
            $(
                num!(format!("offsetof(struct {}, {})", $cstruct, $cf), offset_of!($rs, $rf));
                num!(format!("sizeof(((struct {} *)0)->{})", $cstruct, $cf), size_of_val(&<$rs>::default().$rf));
            )*
        };
    }

    // gntalloc
    num!("IOCTL_GNTALLOC_ALLOC_GREF", IOCTL_GNTALLOC_ALLOC_GREF);
    num!("IOCTL_GNTALLOC_DEALLOC_GREF", IOCTL_GNTALLOC_DEALLOC_GREF);
    num!("IOCTL_GNTALLOC_SET_UNMAP_NOTIFY", IOCTL_GNTALLOC_SET_UNMAP_NOTIFY);
    num!("GNTALLOC_FLAG_WRITABLE", GNTALLOC_FLAG_WRITABLE);
    num!("UNMAP_NOTIFY_CLEAR_BYTE", UNMAP_NOTIFY_CLEAR_BYTE);
    num!("UNMAP_NOTIFY_SEND_EVENT", UNMAP_NOTIFY_SEND_EVENT);
    layout!("ioctl_gntalloc_alloc_gref", GntallocAllocGref, ["domid" => domid, "flags" => flags, "count" => count, "index" => index, "gref_ids" => gref_ids]);
    num!("sizeof(((struct ioctl_gntalloc_alloc_gref *)0)->gref_ids[0])", 4);
    layout!("ioctl_gntalloc_dealloc_gref", GntallocDeallocGref, ["index" => index, "count" => count]);
    layout!("ioctl_gntalloc_unmap_notify", UnmapNotify, ["index" => index, "action" => action, "event_channel_port" => event_channel_port]);

    // gntdev
    num!("IOCTL_GNTDEV_MAP_GRANT_REF", IOCTL_GNTDEV_MAP_GRANT_REF);
    num!("IOCTL_GNTDEV_UNMAP_GRANT_REF", IOCTL_GNTDEV_UNMAP_GRANT_REF);
    num!("IOCTL_GNTDEV_SET_UNMAP_NOTIFY", IOCTL_GNTDEV_SET_UNMAP_NOTIFY);
    layout!("ioctl_gntdev_grant_ref", GntdevGrantRef, ["domid" => domid, "ref" => r#ref]);
    layout!("ioctl_gntdev_map_grant_ref", GntdevMapGrantRef, ["count" => count, "pad" => pad, "index" => index, "refs" => refs]);
    num!("sizeof(((struct ioctl_gntdev_map_grant_ref *)0)->refs[0])", size_of::<GntdevGrantRef>());
    layout!("ioctl_gntdev_unmap_grant_ref", GntdevUnmapGrantRef, ["index" => index, "count" => count, "pad" => pad]);
    layout!("ioctl_gntdev_unmap_notify", UnmapNotify, ["index" => index, "action" => action, "event_channel_port" => event_channel_port]);

    // evtchn
    num!("IOCTL_EVTCHN_BIND_INTERDOMAIN", IOCTL_EVTCHN_BIND_INTERDOMAIN);
    num!("IOCTL_EVTCHN_BIND_UNBOUND_PORT", IOCTL_EVTCHN_BIND_UNBOUND_PORT);
    num!("IOCTL_EVTCHN_UNBIND", IOCTL_EVTCHN_UNBIND);
    num!("IOCTL_EVTCHN_NOTIFY", IOCTL_EVTCHN_NOTIFY);
    num!("IOCTL_EVTCHN_RESET", IOCTL_EVTCHN_RESET);
    layout!("ioctl_evtchn_bind_interdomain", EvtchnBindInterdomain, ["remote_domain" => remote_domain, "remote_port" => remote_port]);
    layout!("ioctl_evtchn_bind_unbound_port", EvtchnBindUnboundPort, ["remote_domain" => remote_domain]);
    layout!("ioctl_evtchn_unbind", EvtchnPort, ["port" => port]);
    layout!("ioctl_evtchn_notify", EvtchnPort, ["port" => port]);

    // XenStore
    layout!("xsd_sockmsg", XsdSockmsg, ["type" => r#type, "req_id" => req_id, "tx_id" => tx_id, "len" => len]);
    num!("XENSTORE_PAYLOAD_MAX", XENSTORE_PAYLOAD_MAX);
    num!("XENSTORE_ABS_PATH_MAX", XENSTORE_ABS_PATH_MAX);
    num!("XENSTORE_REL_PATH_MAX", XENSTORE_REL_PATH_MAX);
    for t in XsType::ALL {
        num!(t.c_name(), *t as u32);
    }
    num!("XS_TYPE_COUNT", XsType::ALL.iter().map(|t| *t as u32).max().unwrap() + 1);

    // xenbus states
    for s in XenbusState::ALL {
        num!(format!("XenbusState{}", s.name()), s as u32);
    }
    v
}

fn c_program(checks: &[(String, u64)]) -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stdint.h>\n#include <stddef.h>\n#include <sys/ioctl.h>\n\
         #include <xen/xen.h>\n#include <xen/sys/gntalloc.h>\n#include <xen/sys/gntdev.h>\n\
         #include <xen/sys/evtchn.h>\n#include <xen/io/xs_wire.h>\n#include <xen/io/xenbus.h>\n\
         int main(void) {\n",
    );
    for (expr, _) in checks {
        c.push_str(&format!("    printf(\"%llu\\n\", (unsigned long long)({expr}));\n"));
    }
    c.push_str("    return 0;\n}\n");
    c
}

fn scratch_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("pvgpu-xen-headers-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn abi_matches_libxen_dev_headers() {
    let missing: Vec<&str> = HEADERS.iter().copied().filter(|h| !Path::new(h).exists()).collect();
    assert!(
        missing.is_empty(),
        "Xen headers missing ({}): install them with `apt-get install -y libxen-dev` (Debian/Ubuntu); this test checks pvgpu-xen's ioctl numbers and layouts against them and does not skip",
        missing.join(", ")
    );

    let checks = checks();
    let dir = scratch_dir();
    let src = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&src, c_program(&checks)).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-std=gnu11")
        .arg("-Wall")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}; install one (apt-get install -y gcc) or set CC"));
    assert!(out.status.success(), "compiling {} against the Xen headers failed:\n{}", src.display(), String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "running {} failed", exe.display());
    let stdout = String::from_utf8(run.stdout).unwrap();
    let c_values: Vec<u64> = stdout.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(c_values.len(), checks.len(), "the C program printed {} values for {} checks", c_values.len(), checks.len());

    let mismatches: Vec<String> = checks
        .iter()
        .zip(&c_values)
        .filter(|((_, rust), c)| rust != *c)
        .map(|((expr, rust), c)| format!("  {expr}: C says {c} ({c:#x}), Rust uses {rust} ({rust:#x})"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(mismatches.is_empty(), "pvgpu-xen disagrees with the Xen headers:\n{}", mismatches.join("\n"));
    assert!(checks.len() > 80, "only {} checks ran", checks.len());
}
