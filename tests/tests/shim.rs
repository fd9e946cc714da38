//! Unmodified programs against the drop-in libcuda.so.1, over each
//! transport: a C program written against NVIDIA's cuda.h and linked with
//! -lcuda, and a cudarc program that loads the driver with dlopen.
//!
//! Needs the drop-in library built (`cargo build -p pvgpu-libcuda`; `cargo
//! test --workspace` and `tests/all.sh` do) and cuda.h: `PVGPU_CUDA_INCLUDE`,
//! or `target/cuda-include/` (`tests/all.sh` fetches it from NVIDIA's
//! `nvidia-cuda-runtime` wheel on PyPI).

use pvgpu_tests::dropin::{cuda_include, shim_dir};
use pvgpu_tests::{Harness, HarnessOptions, TempDir, Transport};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `src` (under `tests/`) compiled with `compiler` against cuda.h and
/// linked with the drop-in library, into `dir`.
fn compile(dir: &TempDir, compiler: &str, src: &str, name: &str) -> PathBuf {
    let out = dir.0.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let status = Command::new(compiler)
        .args(["-O2", "-Wall", "-I"])
        .arg(cuda_include())
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(shim_dir())
        .arg("-lcuda")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(status.success(), "compiling {} failed", src.display());
    out
}

/// The C test program, compiled once against cuda.h and the drop-in library.
fn c_program() -> PathBuf {
    static BIN: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = TempDir::new("shim-c");
        let out = compile(&dir, "cc", "shim/driver_api.c", "driver_api");
        (dir, out)
    })
    .1
    .clone()
}

/// `tests/programs/graphs_driver.cpp` (stream capture and graphs through
/// the driver API), compiled once against cuda.h and the drop-in library.
fn graphs_program() -> PathBuf {
    static BIN: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = TempDir::new("shim-graphs");
        let out = compile(&dir, "c++", "programs/graphs_driver.cpp", "graphs_driver");
        (dir, out)
    })
    .1
    .clone()
}

fn fatbin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/kernels.fatbin")
}

fn ptx() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/kernels.ptx")
}

fn run(cmd: &mut Command, h: &Harness, t: Transport) -> String {
    let out = cmd
        .env("LD_LIBRARY_PATH", shim_dir())
        .env("PVGPU_BACKEND", h.addr(t).to_string())
        .env("PVGPU_TCP_KEY", &h.tcp_key)
        .env_remove("PVGPU_LOG")
        .output()
        .expect("cannot start the program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("PASS"),
        "program failed over {t:?} ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn shared() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(Harness::start)
}

#[test]
fn c_program_over_local() {
    run(Command::new(c_program()).arg(ptx()), shared(), Transport::Local);
}

#[test]
fn c_program_over_tcp() {
    run(Command::new(c_program()).arg(ptx()), shared(), Transport::Tcp);
}

/// Capture across streams replayed, graphs built by hand and updated, and
/// what capture refuses: the program checks its results against the CPU's
/// and prints each refusal's status (the GPU machine compares those with
/// the native run's, line by line).
#[test]
fn graphs_program_over_local() {
    run(Command::new(graphs_program()).arg(fatbin()), shared(), Transport::Local);
}

#[test]
fn graphs_program_over_tcp() {
    run(Command::new(graphs_program()).arg(fatbin()), shared(), Transport::Tcp);
}

/// `PVGPU_STATS=1`: at exit the library prints what the program's session
/// sent, command by command; the program's own output is unchanged.
#[test]
fn call_statistics_at_exit() {
    let h = shared();
    let out = Command::new(c_program())
        .arg(ptx())
        .env("LD_LIBRARY_PATH", shim_dir())
        .env("PVGPU_BACKEND", h.addr(Transport::Local).to_string())
        .env("PVGPU_STATS", "1")
        .env_remove("PVGPU_LOG")
        .output()
        .expect("cannot start the program");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("PASS"), "{stdout}\n{stderr}");
    assert!(stderr.contains("calls waited for a reply"), "no statistics:\n{stderr}");
    let launches = stderr.lines().find(|l| l.starts_with("LaunchKernel")).unwrap_or_else(|| panic!("no launches counted:\n{stderr}"));
    let posted: u64 = launches.split_whitespace().nth(2).and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(posted > 0, "launches are posted, not waited for: {launches}");
    assert!(!stdout.contains("calls waited"), "the table goes to stderr");
}

#[test]
fn cudarc_program_over_local() {
    run(&mut Command::new(env!("CARGO_BIN_EXE_shim-cudarc")), shared(), Transport::Local);
}

#[test]
fn cudarc_program_over_tcp() {
    run(&mut Command::new(env!("CARGO_BIN_EXE_shim-cudarc")), shared(), Transport::Tcp);
}

#[test]
fn lost_backend_is_an_error_not_a_hang() {
    for t in [Transport::Local, Transport::Tcp] {
        let mut h = Harness::with(HarnessOptions { process: true, ..Default::default() });
        let mut child = Command::new(c_program())
            .arg(ptx())
            .arg("--lost-backend")
            .env("LD_LIBRARY_PATH", shim_dir())
            .env("PVGPU_BACKEND", h.addr(t).to_string())
            .env("PVGPU_TCP_KEY", &h.tcp_key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(lines.any(|l| l.is_ok_and(|l| l.contains("READY"))), "program did not get going over {t:?}");
        assert!(h.kill());
        let t0 = Instant::now();
        writeln!(child.stdin.take().unwrap()).unwrap();
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        let status = child.wait().unwrap();
        assert!(status.success() && rest.iter().any(|l| l == "PASS"), "over {t:?}: {rest:?}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}

/// One program, two backends (`PVGPU_BACKEND=local:…,tcp:…`), the second
/// lost while the program holds memory on both: its device's calls fail
/// with `CUDA_ERROR_DEVICE_UNAVAILABLE`, and the first backend's device
/// goes on.
#[test]
fn a_lost_backend_leaves_the_others() {
    let a = Harness::with(HarnessOptions { process: true, ..Default::default() });
    let mut b = Harness::with(HarnessOptions { process: true, ..Default::default() });
    let mut child = Command::new(c_program())
        .arg(ptx())
        .arg("--lost-second-backend")
        .env("LD_LIBRARY_PATH", shim_dir())
        .env("PVGPU_BACKEND", format!("{},{}", a.addr(Transport::Local), b.addr(Transport::Tcp)))
        .env("PVGPU_TCP_KEY", &b.tcp_key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("READY"))), "the program did not get going");
    assert!(b.kill());
    writeln!(child.stdin.take().unwrap()).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success() && rest.iter().any(|l| l == "PASS"), "{rest:?}");
}

/// `CUDA_VISIBLE_DEVICES` as NVIDIA's driver reads it, through the library
/// from an unmodified program (Python calling the driver API by ctypes):
/// indices and UUIDs list devices; an entry naming no device ends the list;
/// none visible is `CUDA_ERROR_NO_DEVICE` at `cuInit`.
#[test]
fn cuda_visible_devices_is_honoured() {
    let h = shared();
    let probe = |visible: Option<&str>| probe_devices(h, visible);
    let all = probe(None);
    assert!(all.starts_with("init 0 count 1 uuid "), "{all}");
    let uuid = all.rsplit(' ').next().unwrap().to_string();
    assert_eq!(probe(Some("0")), all);
    assert_eq!(probe(Some(&format!("GPU-{}", &uuid[..8]))), all, "a UUID prefix names the device");
    assert_eq!(probe(Some("0,0")), all, "a device listed twice ends the list after it");
    for none in ["", "1", "7,0", "GPU-ffffffff"] {
        assert!(probe(Some(none)).starts_with("init 100 count -1"), "CUDA_VISIBLE_DEVICES={none:?}: {}", probe(Some(none)));
    }
}

/// A program whose session the backend gives no GPU (its tenant's only GPU
/// is drained) gets `CUDA_ERROR_NO_DEVICE` from `cuInit`, as natively with
/// no GPU; resumed, it runs.
#[test]
fn a_session_without_gpus_fails_cuinit_with_no_device() {
    use pvgpu_ctl::api::{Gpu, NewTenant, Quota, Tenant};
    let h = Harness::with(HarnessOptions { state_dir: true, ..Default::default() });
    let ctl = h.control().unwrap();
    let me = format!("uid:{}", nix::unistd::getuid());
    let req = NewTenant { name: "drained".into(), quota: Quota { gpus: Some(vec![0]), ..Quota::default() }, members: vec![me] };
    let _: Tenant = ctl.call_with("POST", "/v1/tenants", Some(&req)).unwrap();
    let _: Gpu = ctl.call("POST", "/v1/devices/0/drain").unwrap();
    let out = probe_devices(&h, None);
    assert!(out.starts_with("init 100 count -1"), "{out}");
    let _: Gpu = ctl.call("DELETE", "/v1/devices/0/drain").unwrap();
    assert!(probe_devices(&h, None).starts_with("init 0 count 1 uuid "));
}

/// Runs a Python program through the drop-in libcuda against `h`'s local
/// transport: what `cuInit` returned, the device count and device 0's UUID.
fn probe_devices(h: &Harness, visible: Option<&str>) -> String {
    const PROBE: &str = r#"
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
r = cuda.cuInit(0)
n = ctypes.c_int(-1)
if r == 0:
    cuda.cuDeviceGetCount(ctypes.byref(n))
u = (ctypes.c_ubyte * 16)()
dev = ctypes.c_int(-1)
if n.value > 0:
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDeviceGetUuid(u, dev)
print("init %d count %d uuid %s" % (r, n.value, bytes(u).hex()))
"#;
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(PROBE)
        .env("LD_LIBRARY_PATH", shim_dir())
        .env("PVGPU_BACKEND", h.addr(Transport::Local).to_string())
        .env_remove("PVGPU_LOG");
    match visible {
        Some(v) => cmd.env("CUDA_VISIBLE_DEVICES", v),
        None => cmd.env_remove("CUDA_VISIBLE_DEVICES"),
    };
    let out = cmd.output().expect("cannot run python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
