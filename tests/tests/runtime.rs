//! Unmodified CUDA runtime-API programs (nvcc's default static cudart, and
//! `-cudart shared`) against the drop-in libcuda.so.1, over each transport:
//! NVIDIA's runtime starts on pvgpu's private driver tables, loads its
//! fatbins through the library API, launches with `<<<>>>`, and gets its
//! streams, events, pinned memory, host callbacks, stream-ordered
//! allocation, pitched copies, kernel printf, CUDA graphs and error paths
//! served.
//!
//! The program is built here with nvcc from NVIDIA's PyPI wheels
//! (`tests/cuda-toolkit.sh`, run by `tests/all.sh`); its kernels are those
//! the host test double implements, so it runs without a GPU.

use pvgpu_tests::dropin::{cuda_home, run_program, target_dir, trace_dir};
use pvgpu_tests::{Harness, HarnessOptions, TempDir, Transport};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// How the program is linked against NVIDIA's runtime.
#[derive(Clone, Copy, Debug)]
enum Cudart {
    Static,
    Shared,
}

/// `tests/runtime/<name>.cu`, built with nvcc against one cudart.
fn build(dir: &Path, name: &str, cudart: Cudart) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("runtime/{name}.cu"));
    let out = dir.join(format!("{name}_{cudart:?}"));
    let extra: &[&str] = match cudart {
        Cudart::Static => &[],
        Cudart::Shared => &["-cudart", "shared"],
    };
    // Device graph launch: relocatable device code and the device runtime.
    let device_runtime: &[&str] = if name == "graph_device_launch" { &["-rdc=true", "-lcudadevrt"] } else { &[] };
    let status = Command::new(cuda_home().join("bin/nvcc"))
        .args(extra)
        .args(device_runtime)
        .args(["-gencode", "arch=compute_90,code=[sm_90,compute_90]", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cannot run nvcc");
    assert!(status.success(), "nvcc failed on {}", src.display());
    out
}

/// `tests/runtime/runtime_api.cu`, built once per cudart.
fn program(cudart: Cudart) -> PathBuf {
    static BUILT: OnceLock<(TempDir, PathBuf, PathBuf)> = OnceLock::new();
    let (_, s, d) = BUILT.get_or_init(|| {
        let dir = TempDir::new("runtime-api");
        let (s, d) = (build(&dir.0, "runtime_api", Cudart::Static), build(&dir.0, "runtime_api", Cudart::Shared));
        (dir, s, d)
    });
    match cudart {
        Cudart::Static => s.clone(),
        Cudart::Shared => d.clone(),
    }
}

/// `tests/runtime/graphs.cu`, built once per cudart.
fn graphs_program(cudart: Cudart) -> PathBuf {
    static BUILT: OnceLock<(TempDir, PathBuf, PathBuf)> = OnceLock::new();
    let (_, s, d) = BUILT.get_or_init(|| {
        let dir = TempDir::new("runtime-graphs");
        let (s, d) = (build(&dir.0, "graphs", Cudart::Static), build(&dir.0, "graphs", Cudart::Shared));
        (dir, s, d)
    });
    match cudart {
        Cudart::Static => s.clone(),
        Cudart::Shared => d.clone(),
    }
}

fn shared() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(Harness::start)
}

fn runs(cudart: Cudart, t: Transport) {
    let out = run_program(&mut Command::new(program(cudart)), shared(), t);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        out.status.success() && lines.last() == Some(&"PASS"),
        "{cudart:?} cudart over {t:?} ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // What the kernel printed is on the program's standard output, between
    // what the program printed before and after the synchronising call.
    let before = lines.iter().position(|l| *l == "before printf").expect("before printf");
    let printed: Vec<&str> = lines[before + 1..].iter().take_while(|l| **l != "after printf").copied().collect();
    let want: Vec<String> = (0..2).flat_map(|b| (0..2).map(move |t| format!("pvgpu_printf tag 7 block {b} thread {t}"))).collect();
    assert_eq!(printed, want, "kernel output over {t:?}");
}

#[test]
fn static_cudart_over_local() {
    runs(Cudart::Static, Transport::Local);
}

#[test]
fn static_cudart_over_tcp() {
    runs(Cudart::Static, Transport::Tcp);
}

#[test]
fn shared_cudart_over_local() {
    runs(Cudart::Shared, Transport::Local);
}

#[test]
fn shared_cudart_over_tcp() {
    runs(Cudart::Shared, Transport::Tcp);
}

/// With every log line of the library asked for, the program still runs to
/// its end and exits cleanly: NVIDIA's runtime calls the driver from its
/// exit-time destructors, after the thread's own storage (the log
/// formatter's among it) is gone, and a log line there must not abort the
/// program.
#[test]
fn trace_logging_lasts_until_exit() {
    for cudart in [Cudart::Static, Cudart::Shared] {
        let h = shared();
        let mut path = pvgpu_tests::dropin::shim_dir().into_os_string();
        path.push(":");
        path.push(cuda_home().join("lib"));
        let out = Command::new(program(cudart))
            .env("LD_LIBRARY_PATH", path)
            .env("PVGPU_BACKEND", h.addr(Transport::Local).to_string())
            .env("PVGPU_LOG", "pvgpu_cuda=trace")
            .output()
            .expect("cannot start the program");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.lines().last() == Some("PASS"), "{cudart:?} cudart ({}):\n{stdout}\n{stderr}", out.status);
        assert!(stderr.contains("export table slot"), "no trace lines from the library:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `tests/runtime/mapped.cu`, built once (static cudart).
fn mapped_program() -> PathBuf {
    static BUILT: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, p) = BUILT.get_or_init(|| {
        let dir = TempDir::new("runtime-mapped");
        let p = build(&dir.0, "mapped", Cudart::Static);
        (dir, p)
    });
    p.clone()
}

/// Page-locked memory the device reaches through a pointer: computes the
/// same over every transport (over TCP the library mirrors it in the
/// backend). Fails without mirrors: over TCP the kernels would be handed
/// addresses the device cannot reach.
fn mapped_run(t: Transport) {
    // Worker processes, as deployed: each maps the program's data area at
    // the program's own address, which an embedded backend (this test's
    // process) cannot.
    static H: OnceLock<Harness> = OnceLock::new();
    let h = H.get_or_init(|| Harness::with(HarnessOptions { process: true, ..Default::default() }));
    mapped_against(h, t);
}

fn mapped_against(h: &Harness, t: Transport) {
    let out = run_program(&mut Command::new(mapped_program()), h, t);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("PASS"),
        "over {t:?} ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mapped_memory_over_local() {
    mapped_run(Transport::Local);
}

#[test]
fn mapped_memory_over_tcp() {
    mapped_run(Transport::Tcp);
}

/// The device reaches the data area at other addresses than the
/// program's (a backend serving sessions in its own process, as a worker
/// does when the program's addresses are taken there): the library gives
/// kernels the device's address of page-locked memory they are handed.
/// Fails when it hands them the program's pointer.
#[test]
fn mapped_memory_over_local_elsewhere() {
    mapped_against(shared(), Transport::Local);
}

/// CUDA graphs through NVIDIA's runtime: capture forked and joined across
/// streams, re-capture applied with `cudaGraphExecUpdate`, graphs built by
/// hand, a capture invalidated; the program checks against the CPU.
fn graphs_run(cudart: Cudart, t: Transport) {
    let out = run_program(&mut Command::new(graphs_program(cudart)), shared(), t);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("PASS"),
        "{cudart:?} cudart over {t:?} ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn graphs_static_cudart_over_local() {
    graphs_run(Cudart::Static, Transport::Local);
}

#[test]
fn graphs_static_cudart_over_tcp() {
    graphs_run(Cudart::Static, Transport::Tcp);
}

#[test]
fn graphs_shared_cudart_over_local() {
    graphs_run(Cudart::Shared, Transport::Local);
}

/// `tests/runtime/{name}.cu` (static cudart), built once.
fn worker_program(name: &'static str) -> PathBuf {
    static BUILT: OnceLock<TempDir> = OnceLock::new();
    static PROGRAMS: std::sync::Mutex<Vec<(&'static str, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let dir = BUILT.get_or_init(|| TempDir::new("runtime-workers"));
    let mut built = PROGRAMS.lock().unwrap();
    if let Some((_, p)) = built.iter().find(|(n, _)| *n == name) {
        return p.clone();
    }
    let p = build(&dir.0, name, Cudart::Static);
    built.push((name, p.clone()));
    p
}

/// A program that needs worker processes (where the backend measures each
/// session's memory, and maps the program's memory at its own address):
/// graph memory (captured and hand-built allocation and free nodes, an
/// allocation left to the program, the device's graph-memory attributes),
/// host memory in graphs (memcpy nodes of pageable and page-locked
/// memory, a host node reading a copied result, a captured copy to the
/// stack), conditional nodes (if, if/else, do-while with a captured
/// body, a while node added into a capture, switch), copy nodes of
/// pitched host and device memory and kernel node attributes, graphs
/// launched from the device (a worker hands out the driver's handle), and
/// user objects
/// (destructors run once the program, graphs, clones, child-graph nodes
/// and executable graphs, after their launches, let their references
/// go). Where
/// `tests/runtime/{name}.expected` exists, the whole output must be it
/// (the H100 prints the same natively).
/// The backend of [`worker_run`]: sessions in worker processes.
fn worker_harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| Harness::with(HarnessOptions { process: true, ..Default::default() }))
}

fn worker_run(name: &'static str, t: Transport) {
    let h = worker_harness();
    let out = run_program(&mut Command::new(worker_program(name)), h, t);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("PASS"),
        "over {t:?} ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("runtime/{name}.expected"));
    if let Ok(want) = std::fs::read_to_string(&expected) {
        assert_eq!(stdout, want, "over {t:?}: the output differs from {}", expected.display());
    }
}

/// A failed device assertion (`tests/runtime/device_assert.cu`): the
/// synchronisation after it fails with `cudaErrorAssert`, and the message
/// the driver writes to standard error reaches the program's standard
/// error (not its standard output).
fn device_assert(t: Transport) {
    worker_run("device_assert", t);
    let h = worker_harness();
    let out = run_program(&mut Command::new(worker_program("device_assert")), h, t);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = "block: [1,0,0], thread: [5,0,0] Assertion `p[i] != tag` failed.";
    assert_eq!(stderr.matches(line).count(), 1, "over {t:?}, standard error:\n{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Assertion"));
}

#[test]
fn device_assert_over_local() {
    device_assert(Transport::Local);
}

#[test]
fn device_assert_over_tcp() {
    device_assert(Transport::Tcp);
}

#[test]
fn graph_memory_over_local() {
    worker_run("graph_memory", Transport::Local);
}

#[test]
fn graph_memory_over_tcp() {
    worker_run("graph_memory", Transport::Tcp);
}

#[test]
fn graph_conditional_over_local() {
    worker_run("graph_conditional", Transport::Local);
}

#[test]
fn graph_conditional_over_tcp() {
    worker_run("graph_conditional", Transport::Tcp);
}

#[test]
fn graph_user_objects_over_local() {
    worker_run("graph_user_objects", Transport::Local);
}

#[test]
fn graph_user_objects_over_tcp() {
    worker_run("graph_user_objects", Transport::Tcp);
}

#[test]
fn graph_nodes_over_local() {
    worker_run("graph_nodes", Transport::Local);
}

#[test]
fn graph_nodes_over_tcp() {
    worker_run("graph_nodes", Transport::Tcp);
}

#[test]
fn graph_device_launch_over_local() {
    worker_run("graph_device_launch", Transport::Local);
}

#[test]
fn graph_device_launch_over_tcp() {
    worker_run("graph_device_launch", Transport::Tcp);
}

#[test]
fn graph_host_memory_over_local() {
    worker_run("graph_host_memory", Transport::Local);
}

#[test]
fn graph_host_memory_over_tcp() {
    worker_run("graph_host_memory", Transport::Tcp);
}

/// The tracing library in front of the drop-in library: the program still
/// passes (every call, whatever its arguments, reaches pvgpu unchanged) and
/// the trace names what NVIDIA's runtime used, private-table slots
/// included.
#[test]
fn traced_through_pvgpu_trace() {
    let dir = TempDir::new("trace");
    let log = dir.0.join("trace.log");
    let h = shared();
    let out = Command::new(program(Cudart::Static))
        .env("LD_LIBRARY_PATH", trace_dir())
        .env("PVGPU_TRACE_DRIVER", target_dir().join("libpvgpu_cuda.so"))
        .env("PVGPU_TRACE_OUT", &log)
        .env("PVGPU_BACKEND", h.addr(Transport::Local).to_string())
        .env("PVGPU_TCP_KEY", &h.tcp_key)
        .output()
        .expect("cannot start the program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.ends_with("PASS\n"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let trace = std::fs::read_to_string(&log).expect("the trace");
    for want in [
        "ET d4082055bde6704b8d34ba123c66e1f2 0",
        "CNT G:cuLibraryLoadData 1 [0:1]",
        "CNT E:6bd5fb6c[2] 1 [0:1]",
        "CNT E:263e8860[3] 1",
        "GPA cuLaunchKernel ",
    ] {
        assert!(trace.contains(want), "{want:?} not in the trace:\n{trace}");
    }
    let cls_get = trace.lines().find(|l| l.starts_with("CNT E:c693336e[2] ")).expect("context-local storage lookups");
    assert!(
        cls_get.contains("201:") && cls_get.contains("400:"),
        "the runtime retains the primary context and creates its state: {cls_get}"
    );
}

#[test]
fn textures_over_local() {
    worker_run("textures", Transport::Local);
}

#[test]
fn textures_over_tcp() {
    worker_run("textures", Transport::Tcp);
}

#[test]
fn managed_over_local() {
    worker_run("managed", Transport::Local);
}

#[test]
fn managed_over_tcp() {
    worker_run("managed", Transport::Tcp);
}

#[test]
fn ipc_over_local() {
    worker_run("ipc", Transport::Local);
}

#[test]
fn ipc_over_tcp() {
    worker_run("ipc", Transport::Tcp);
}

/// A memory pool of the program's own (`cudaMemPoolCreate`): allocations
/// from it and through `cudaMallocAsync` once current, its attributes,
/// trim, size limit and destroy (`tests/runtime/mem_pool.cu`).
/// A pool shared with a child process (`tests/runtime/pool_ipc.cu`, as
/// NVIDIA's streamOrderedAllocationIPC): the descriptor passed over a Unix
/// socket, the allocation imported by its export data, the child's
/// kernel's writes checked by the parent.
#[test]
fn pool_ipc_over_local() {
    worker_run("pool_ipc", Transport::Local);
}

#[test]
fn pool_ipc_over_tcp() {
    worker_run("pool_ipc", Transport::Tcp);
}

#[test]
fn mem_pool_over_local() {
    worker_run("mem_pool", Transport::Local);
}

#[test]
fn mem_pool_over_tcp() {
    worker_run("mem_pool", Transport::Tcp);
}

/// Registered host memory the device reaches through its pointer
/// (`cudaHostRegister`, `cudaHostGetDevicePointer`, a registered pointer
/// passed to a kernel), mirrored by the library
/// (`tests/runtime/registered.cu`).
#[test]
fn registered_memory_over_local() {
    worker_run("registered", Transport::Local);
}

#[test]
fn registered_memory_over_tcp() {
    worker_run("registered", Transport::Tcp);
}

#[path = "runtime/several_backends.rs"]
mod several_backends;
