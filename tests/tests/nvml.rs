//! NVIDIA's own NVML bindings for Python (`pynvml`, PyPI's `nvidia-ml-py`)
//! against the drop-in libnvidia-ml.so.1 and libcuda.so.1, over each
//! transport: the script `nvml/pynvml_demo.py` asks what a monitor asks
//! (versions, devices, memory, gauges, PCI ids, processes) and the error
//! paths, allocates through libcuda.so.1 and sees NVML report it (one
//! session per process, shared), and checks that the answers agree; this
//! test checks them against the backend.
//!
//! Needs the libraries built (`cargo build -p pvgpu-nvml -p pvgpu-libcuda
//! -p pvgpu-trace`; `tests/all.sh` builds the workspace first), python3,
//! and pynvml in `target/pynvml/` (`tests/all.sh` installs it) or
//! `PVGPU_PYNVML`.

use pvgpu_tests::dropin::{nvml_dir, shim_dir, target_dir, trace_dir};
use pvgpu_tests::{ExecKind, Harness, HarnessOptions, Transport};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Where pynvml is installed: `PVGPU_PYNVML`, or `target/pynvml/`.
fn pynvml_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("PVGPU_PYNVML")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pynvml"));
        let probe = Command::new("python3").arg("-c").arg("import pynvml").env("PYTHONPATH", &dir).output();
        match probe {
            Err(e) => panic!("cannot run python3 ({e}): these tests run pynvml, and need python3 with pip"),
            Ok(o) if !o.status.success() => panic!(
                "pynvml is not installed in {}: run tests/all.sh, or `python3 -m pip install --target target/pynvml nvidia-ml-py`:\n{}",
                dir.display(),
                String::from_utf8_lossy(&o.stderr)
            ),
            Ok(_) => dir,
        }
    })
    .clone()
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("nvml/pynvml_demo.py")
}

/// The script against the drop-in NVML, the `libcuda.so.1` in `cuda_dir`
/// and `backend` (a `PVGPU_BACKEND` value), with the libraries' log filter
/// `log`.
fn command(cuda_dir: &Path, backend: &str, args: &[&str], log: Option<&str>) -> Command {
    command_with_key(cuda_dir, backend, None, args, log)
}

/// [`command`], proving `key` to a TCP backend.
fn command_with_key(cuda_dir: &Path, backend: &str, key: Option<&Path>, args: &[&str], log: Option<&str>) -> Command {
    let mut path = OsString::from(nvml_dir());
    path.push(":");
    path.push(cuda_dir);
    let mut cmd = Command::new("python3");
    cmd.arg(script()).args(args).env("LD_LIBRARY_PATH", path).env("PYTHONPATH", pynvml_dir()).env("PVGPU_BACKEND", backend);
    if let Some(k) = key {
        cmd.env("PVGPU_TCP_KEY", k);
    }
    match log {
        Some(filter) => cmd.env("PVGPU_LOG", filter),
        None => cmd.env_remove("PVGPU_LOG"),
    };
    cmd
}

/// Runs the script with pvgpu's libcuda.so.1 (see [`command`]).
fn run(backend: &str, args: &[&str], log: Option<&str>) -> Output {
    command(&shim_dir(), backend, args, log).output().expect("cannot start python3")
}

/// The script's `key: value` lines, once it passed.
fn answers(h: &Harness, t: Transport) -> HashMap<String, String> {
    let out = command_with_key(&shim_dir(), &h.addr(t).to_string(), Some(&h.tcp_key), &[], None).output().expect("cannot start python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.lines().last() == Some("PASS"),
        "pynvml_demo.py failed against {} ({}):\n{stdout}\n{}",
        h.addr(t),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn shared() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(Harness::start)
}

/// Checks what the script saw against what the backend offers.
fn check(h: &Harness, t: Transport) {
    let a = answers(h, t);
    let get = |k: &str| a.get(k).unwrap_or_else(|| panic!("no {k:?} in {a:#?}")).as_str();
    assert!(get("library_path").ends_with("libpvgpu_nvml.so"), "pynvml loaded {}", get("library_path"));
    // One libcuda in the process, pvgpu's: NVML's and the program's.
    assert!(get("cuda_library_path").ends_with("libpvgpu_cuda.so"), "libcuda.so.1 is {}", get("cuda_library_path"));
    let mib64 = 64 << 20;
    let shared = get("shared_memory");
    let before: u64 = shared.strip_prefix("before=").and_then(|r| r.split(' ').next()).and_then(|v| v.parse().ok()).expect(shared);
    assert_eq!(shared, format!("before={before} allocated={} freed={before}", before + mib64), "NVML reports the program's memory");
    assert_eq!(get("reinit_memory"), (before + mib64).to_string());
    assert_eq!(get("cuda_driver_version"), "13000");
    assert_eq!(get("bad_index"), "2", "NVML_ERROR_INVALID_ARGUMENT");
    assert_eq!(get("not_exported"), "13", "NVML_ERROR_FUNCTION_NOT_FOUND");
    assert_eq!(get("after_shutdown"), "1", "NVML_ERROR_UNINITIALIZED");
    let count: usize = get("device_count").parse().unwrap();
    let c = h.client(t);
    c.init().unwrap();
    assert_eq!(count, c.device_count().unwrap() as usize);
    assert_eq!(get("driver_version"), c.device_status(0).unwrap().driver_version);
    for dev in 0..count {
        let props = c.device_props(dev as i32).unwrap();
        assert_eq!(get(&format!("device {dev} name")), props.name);
        let memory = get(&format!("device {dev} memory"));
        assert!(memory.starts_with(&format!("total={} ", c.device_status(dev as i32).unwrap().mem_total)), "{memory}");
        assert!(get(&format!("device {dev} processes")).starts_with("pid="));
    }
    if h.exec == ExecKind::Host {
        // The test double: one idle device without sensors.
        assert_eq!(get("device 0 uuid"), "GPU-70766770-752d-686f-7374-2d64626c0001");
        assert!(get("device 0 memory").ends_with(" used=0"), "the program holds nothing yet");
        assert_eq!(get("device 0 utilization"), "gpu=0% memory=0%");
        assert_eq!(get("device 0 temperature"), "not supported");
        assert_eq!(get("device 0 power_mw"), "not supported");
        assert_eq!(get("device 0 pcie"), "gen not supported xnot supported, at most gen not supported xnot supported");
        assert_eq!(get("device 0 nvlink"), "link 0 not supported, fabric state 0, links 0");
        assert_eq!(get("device 0 mig"), "[0, 0]");
        assert_eq!(get("device 0 compute_capability"), "7.5");
        assert!(get("device 0 pci").starts_with("bus_id=00000000:00:00.0 legacy=0000:00:00.0 "));
        assert_eq!(get("nvml_version"), "12");
    }
}

#[test]
fn pynvml_over_local() {
    check(shared(), Transport::Local);
}

#[test]
fn pynvml_over_tcp() {
    check(shared(), Transport::Tcp);
}

#[test]
fn memory_total_is_the_session_quota() {
    let quota = 256u64 << 20;
    let h = Harness::with(HarnessOptions { mem_quota: Some(quota), ..Default::default() });
    let a = answers(&h, Transport::Local);
    assert_eq!(a["device 0 memory"], format!("total={quota} free={quota} used=0"));
}

/// Checks that the script's `--no-driver` run passed (nvmlInit answered
/// `NVML_ERROR_DRIVER_NOT_LOADED`), and returns the libraries' log.
fn no_driver(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && stdout.contains("init: 9") && stdout.contains("PASS"), "{stdout}\n{stderr}");
    stderr
}

#[test]
fn unreachable_backend_is_driver_not_loaded() {
    // A port nothing listens on: bound, then closed. libcuda's cuInit
    // answers CUDA_ERROR_NO_DEVICE.
    let port = pvgpu_tests::free_tcp_port();
    let log = no_driver(run(&format!("tcp:127.0.0.1:{port}"), &["--no-driver"], Some("error")));
    assert!(log.contains("libcuda: cannot reach the pvgpu backend"), "no log line from libcuda saying why:\n{log}");
    assert!(log.contains("libnvidia-ml: cuInit failed") && log.contains("CUDA_ERROR_NO_DEVICE"), "no log line from NVML:\n{log}");
}

#[test]
fn a_libcuda_not_pvgpus_is_driver_not_loaded() {
    // pvgpu-trace's libcuda.so.1 has every CUDA entry point (it forwards
    // them, here to pvgpu's) but not pvgpu_device_status, as NVIDIA's.
    let out = command(&trace_dir(), "tcp:127.0.0.1:1", &["--no-driver"], Some("error"))
        .env("PVGPU_TRACE_DRIVER", target_dir().join("libpvgpu_cuda.so"))
        .env("PVGPU_TRACE_OUT", "/dev/null")
        .output()
        .expect("cannot start python3");
    let log = no_driver(out);
    assert!(log.contains("is not pvgpu's (it has no pvgpu_device_status)"), "no log line saying why:\n{log}");
    assert!(log.contains("install pvgpu's libcuda.so.1 in the directory of this library"), "no log line saying what to do:\n{log}");
}

#[test]
fn no_libcuda_is_driver_not_loaded() {
    let empty = target_dir().join("pvgpu-nvml-no-libcuda");
    std::fs::create_dir_all(&empty).expect("cannot create the directory");
    let log = no_driver(command(&empty, "tcp:127.0.0.1:1", &["--no-driver"], Some("error")).output().expect("cannot start python3"));
    assert!(log.contains("install pvgpu's libcuda.so.1"), "no log line saying what to do:\n{log}");
}
