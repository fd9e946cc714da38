//! # pvgpu-tests
//!
//! Shared pieces of the end-to-end suite and of `pvgpu-bench`:
//!
//! - [`Harness`]: a backend to test against: embedded in this process
//!   (thread isolation, host executor: the CI default) or the
//!   `pvgpu-backend` binary in its own process (process isolation; the only
//!   safe way to run the cuda executor, where a kernel fault poisons the
//!   process). Chosen by `PVGPU_TEST_EXECUTOR=host|cuda`,
//!   `PVGPU_TEST_ISOLATION=thread|process` and
//!   `PVGPU_BACKEND_BIN=path/to/pvgpu-backend`.
//! - the kernel images built from `kernels/kernels.cu`;
//! - the two workloads of the GPUsockets thesis, MatSum and Jacobi, with CPU
//!   references, generic over a [`Device`] so that `pvgpu-bench` runs the
//!   same code natively;
//! - [`native`]: the CUDA driver called directly, the benchmark's baseline.

pub mod dropin;
pub mod native;
mod setup;
mod transport;
mod workloads;

pub use setup::{free_tcp_port, write_key_file, write_tls_files};
pub use transport::{Transport, rdma_missing, rdma_runs};
pub use workloads::*;

use pvgpu_backend::config::{AdmissionConfig, ControlSocket};
use pvgpu_backend::exec::host::HostExecutor;
use pvgpu_backend::{Backend, Config, Listen, SessionConfig};
use pvgpu_frontend::{BackendAddr, Client, Options};
use pvgpu_ring::tcp_auth::TcpKey;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// PTX of `kernels/kernels.cu` (compute_75; JIT-compiled by the backend's
/// driver).
pub const PTX: &[u8] = include_bytes!("../kernels/kernels.ptx");
/// sm_90 cubin of the same kernels.
pub const CUBIN: &[u8] = include_bytes!("../kernels/kernels.sm_90.cubin");
/// Fatbin (sm_90 code and compute_75 PTX) of the same kernels.
pub const FATBIN: &[u8] = include_bytes!("../kernels/kernels.fatbin");

/// Which executor the backend under test uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecKind {
    /// Host test double.
    Host,
    /// The GPU.
    Cuda,
}

impl ExecKind {
    /// From `PVGPU_TEST_EXECUTOR` (default host).
    pub fn from_env() -> Self {
        match std::env::var("PVGPU_TEST_EXECUTOR").as_deref() {
            Ok("cuda") => ExecKind::Cuda,
            _ => ExecKind::Host,
        }
    }
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Makes one.
    pub fn new(tag: &str) -> Self {
        let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("pvgpu-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("cannot create a temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

enum Running {
    Embedded { backend: Option<Box<Backend>>, exec: Arc<HostExecutor> },
    External,
    Process { child: Child, _keeper: Keeper },
}

/// A thread that started a backend process and lives as long as it should:
/// the process gets SIGTERM when this thread ends (PR_SET_PDEATHSIG follows
/// the spawning thread), including when the test binary exits.
struct Keeper(Option<std::sync::mpsc::Sender<()>>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.take();
    }
}

fn spawn_kept(mut cmd: Command) -> (Child, Keeper) {
    use std::os::unix::process::CommandExt;
    let (tx_child, rx_child) = std::sync::mpsc::channel();
    let (tx_stop, rx_stop) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        // SAFETY: prctl is async-signal-safe; runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let _ = tx_child.send(cmd.spawn());
        // Block until the harness is dropped (or forever, for a shared one).
        let _ = rx_stop.recv();
    });
    let child = rx_child.recv().expect("spawner thread died").expect("cannot start pvgpu-backend");
    (child, Keeper(Some(tx_stop)))
}

/// A backend under test with a local and a TCP listener.
pub struct Harness {
    running: Running,
    /// Executor in use.
    pub exec: ExecKind,
    /// Local socket path.
    pub socket: PathBuf,
    /// TCP address.
    pub tcp: String,
    /// TLS address (a second TCP listener, with a certificate).
    pub tls: String,
    /// RDMA address, where the suite has RDMA ([`rdma_missing`]).
    pub rdma: Option<String>,
    /// The key file TCP clients prove they hold (`PVGPU_TCP_KEY`).
    pub tcp_key: PathBuf,
    /// The certificate authority TLS clients trust (`PVGPU_TLS_CA`).
    pub tls_ca: PathBuf,
    /// How the backend is started (none: an external backend).
    launch: Option<Launch>,
    _dir: TempDir,
}

/// How a harness starts its backend, again after a restart.
struct Launch {
    process: bool,
    state_dir: Option<PathBuf>,
    mem_quota: Option<u64>,
    peer_mem_quota: Option<u64>,
    host_devices: usize,
    gpu_slice: Option<Duration>,
    tls_cert: PathBuf,
    tls_key: PathBuf,
    /// `--peer` options: other backends this one may send copies to.
    peers: Vec<String>,
}

/// Options of a harness backend.
#[derive(Debug, Clone, Default)]
pub struct HarnessOptions {
    /// Per-session device-memory quota.
    pub mem_quota: Option<u64>,
    /// Device memory one peer's sessions may hold together
    /// (`--peer-mem-quota`).
    pub peer_mem_quota: Option<u64>,
    /// Run the backend binary in its own process (sessions in worker
    /// processes) whatever the environment says.
    pub process: bool,
    /// Keep tenants and keys in a state directory of the harness's own
    /// (`--state-dir`), kept across [`Harness::restart`].
    pub state_dir: bool,
    /// Devices of the host executor (`--host-devices`; the GPU's own
    /// count on the cuda executor).
    pub host_devices: Option<usize>,
    /// Sessions take GPU turns of this long (`--gpu-share weighted`).
    pub gpu_slice: Option<Duration>,
    /// Accept TCP programs with this key file's key (another harness's
    /// `tcp_key`, so that a session can move between the two) instead of
    /// a fresh one.
    pub tcp_key_from: Option<PathBuf>,
}

/// Path of the `pvgpu-backend` binary: `PVGPU_BACKEND_BIN`, or the one
/// cargo built beside this test executable (`cargo test --workspace` builds
/// it, because the backend package has integration tests).
pub fn backend_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PVGPU_BACKEND_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("no current exe");
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let p = dir.join("pvgpu-backend");
    assert!(p.exists(), "{} not found: build it first (cargo build -p pvgpu-backend) or set PVGPU_BACKEND_BIN", p.display());
    p
}

/// Client options of the suite: a 16 MiB data area (4 MiB copy chunks) and
/// 4 MiB of page-locked memory, or a small area that makes every large copy
/// go in many chunks around the staging ring (`PVGPU_TEST_SMALL_AREA=1`,
/// as on Xen).
pub fn test_options() -> Options {
    let mut o = Options { data_area: 16 << 20, pinned: 4 << 20, spin: Duration::from_micros(50), ..Options::default() };
    if std::env::var("PVGPU_TEST_SMALL_AREA").is_ok_and(|v| v == "1") {
        o.data_area = 2 << 20;
        o.pinned = 1 << 20;
    }
    o
}

/// Whether sessions of the backend under test run in worker processes
/// (`PVGPU_TEST_ISOLATION=process|thread`; process by default for the cuda
/// executor, thread for the host test double).
pub fn process_isolation() -> bool {
    match std::env::var("PVGPU_TEST_ISOLATION").as_deref() {
        Ok("process") => true,
        Ok("thread") => false,
        _ => ExecKind::from_env() == ExecKind::Cuda,
    }
}

impl Harness {
    /// A backend as the environment asks (see the crate docs).
    pub fn start() -> Harness {
        Self::with(HarnessOptions::default())
    }

    /// A backend this process does not control, reached over Xen (the
    /// Xen lab runs the backend in Dom0 and the tests in a guest).
    pub fn external() -> Harness {
        let dir = TempDir::new("external");
        let tcp_key = std::env::var_os("PVGPU_TCP_KEY").map_or_else(|| dir.0.join("none"), PathBuf::from);
        Harness {
            running: Running::External,
            exec: ExecKind::from_env(),
            socket: dir.0.join("none"),
            tcp: String::new(),
            tls: String::new(),
            rdma: std::env::var("PVGPU_TEST_RDMA_ADDR").ok().filter(|_| rdma_missing().is_none()),
            tcp_key,
            tls_ca: dir.0.join("none"),
            launch: None,
            _dir: dir,
        }
    }

    /// A backend with options.
    pub fn with(opts: HarnessOptions) -> Harness {
        Harness::planned(opts).started()
    }

    /// Two backends, each listing the other as a peer (`--peer`) by its
    /// local and TCP addresses: copies between them go from backend to
    /// backend.
    pub fn peered(a: HarnessOptions, b: HarnessOptions) -> (Harness, Harness) {
        let (mut a, mut b) = (Harness::planned(a), Harness::planned(b));
        let (to_b, to_a) = (b.peer_options("b"), a.peer_options("a"));
        a.launch.as_mut().expect("planned").peers = to_b;
        b.launch.as_mut().expect("planned").peers = to_a;
        (a.started(), b.started())
    }

    /// `--peer` options naming this backend (`name-local`, `name-tcp`,
    /// `name-tls` with its authority).
    fn peer_options(&self, name: &str) -> Vec<String> {
        let control = format!("unix:{}", self._dir.0.join("control.sock").display());
        vec![
            format!("name={name}-local,control={control},address=local:{}", self.socket.display()),
            format!("name={name}-tcp,control={control},address=tcp:{}", self.tcp),
            format!("name={name}-tls,control={control},address=tls:{},ca={}", self.tls, self.tls_ca.display()),
        ]
    }

    fn started(mut self) -> Harness {
        self.running = self.launch();
        if self.is_process() {
            self.wait_ready();
        }
        self
    }

    /// A backend with options, not started.
    fn planned(opts: HarnessOptions) -> Harness {
        let exec = ExecKind::from_env();
        let dir = TempDir::new("harness");
        let socket = dir.0.join("pvgpu.sock");
        let tcp_key = dir.0.join("tcp.key");
        match &opts.tcp_key_from {
            Some(from) => {
                std::fs::copy(from, &tcp_key).expect("cannot copy the key file");
            }
            None => write_key_file(&tcp_key),
        }
        let (tls_ca, tls_cert, tls_key) = write_tls_files(&dir.0);
        let tcp = format!("127.0.0.1:{}", free_tcp_port());
        let tls = format!("127.0.0.1:{}", free_tcp_port());
        let rdma = match (rdma_missing(), std::env::var("PVGPU_TEST_RDMA_HOST")) {
            (None, Ok(host)) => Some(format!("{host}:{}", free_tcp_port())),
            _ => None,
        };
        let state_dir = opts.state_dir.then(|| dir.0.join("state"));
        let launch = Launch {
            process: opts.process || process_isolation(),
            state_dir,
            mem_quota: opts.mem_quota,
            peer_mem_quota: opts.peer_mem_quota,
            host_devices: opts.host_devices.unwrap_or(1),
            gpu_slice: opts.gpu_slice,
            tls_cert,
            tls_key,
            peers: Vec::new(),
        };
        Harness { running: Running::External, exec, socket, tcp, tls, rdma, tcp_key, tls_ca, launch: Some(launch), _dir: dir }
    }

    /// Stops the backend (as [`Harness::stop`]) and starts a new one at the
    /// same addresses, with the same keys, control socket and image cache.
    pub fn restart(&mut self) {
        self.stop();
        self.running = self.launch();
        if self.is_process() {
            self.wait_ready();
        }
    }

    /// Starts the backend this harness describes.
    fn launch(&self) -> Running {
        let l = self.launch.as_ref().expect("an external backend is not started here");
        let dir = &self._dir.0;
        if l.process {
            let mut cmd = Command::new(backend_bin());
            cmd.arg("--listen").arg(format!("local:{}", self.socket.display())).arg("--listen").arg(format!("tcp:{}", self.tcp));
            cmd.arg("--listen").arg(format!("tls:{}", self.tls)).arg("--tls-cert").arg(&l.tls_cert).arg("--tls-key").arg(&l.tls_key);
            if let Some(r) = &self.rdma {
                cmd.arg("--listen").arg(format!("rdma:{r}"));
            }
            cmd.arg("--executor").arg(if self.exec == ExecKind::Cuda { "cuda" } else { "host" }).arg("--spin-us").arg("20");
            if std::env::var_os("RUST_LOG").is_none() {
                cmd.env("RUST_LOG", "warn");
            }
            if let Some(q) = l.mem_quota {
                cmd.arg("--mem-quota").arg(q.to_string());
            }
            if let Some(q) = l.peer_mem_quota {
                cmd.arg("--peer-mem-quota").arg(q.to_string());
            }
            cmd.arg("--host-devices").arg(l.host_devices.to_string());
            cmd.arg("--image-cache").arg(dir.join("images"));
            cmd.arg("--control").arg(format!("unix:{}", dir.join("control.sock").display()));
            cmd.arg("--tcp-key").arg(&self.tcp_key);
            if let Some(d) = &l.state_dir {
                cmd.arg("--state-dir").arg(d);
            }
            for p in &l.peers {
                cmd.arg("--peer").arg(p);
            }
            if let Some(slice) = l.gpu_slice {
                cmd.arg("--gpu-share").arg("weighted").arg("--gpu-slice-ms").arg(slice.as_millis().to_string());
            }
            // Every test of the suite is the same local user and TCP peer.
            for limit in
                ["--max-sessions", "--max-local-sessions", "--max-tcp-sessions", "--max-sessions-per-peer", "--max-pending-per-peer"]
            {
                cmd.arg(limit).arg("256");
            }
            let (child, keeper) = spawn_kept(cmd);
            Running::Process { child, _keeper: keeper }
        } else {
            let host = Arc::new(HostExecutor::with_devices(8 << 30, l.host_devices));
            // A port this backend listened on before a restart may still be
            // held a moment by a process another test is starting (its
            // copy of every descriptor lives until it execs).
            let start = || {
                let mut session =
                    SessionConfig { spin: Duration::from_micros(20), image_cache: Some(dir.join("images")), ..SessionConfig::default() };
                session.limits.mem_quota = l.mem_quota;
                session.gpu_slice = l.gpu_slice;
                session.limits.gpu_turns = l.gpu_slice.is_some();
                let admission = AdmissionConfig {
                    max_sessions: 256,
                    max_local: 256,
                    max_tcp: 256,
                    max_per_peer: Some(256),
                    max_pending_per_peer: Some(64),
                    peer_mem_quota: l.peer_mem_quota,
                    tcp_key: Some(TcpKey::from_file(&self.tcp_key).expect("cannot read the key file")),
                    tls: Some(pvgpu_backend::tls::server_config(&l.tls_cert, &l.tls_key).expect("cannot load the TLS files")),
                    tenants: l
                        .state_dir
                        .as_ref()
                        .map(|d| Arc::new(pvgpu_backend::tenants::Tenants::open(d).expect("cannot open the state directory"))),
                    ..AdmissionConfig::default()
                };
                let mut listen = vec![Listen::Local(self.socket.clone()), Listen::Tcp(self.tcp.clone()), Listen::Tls(self.tls.clone())];
                listen.extend(self.rdma.clone().map(Listen::Rdma));
                let cfg = Config {
                    listen,
                    session,
                    admission,
                    control: ControlSocket::At(dir.join("control.sock")),
                    metrics: None,
                    control_http: None,
                    peers: l
                        .peers
                        .iter()
                        .map(|p| p.parse::<pvgpu_backend::peers::PeerSpec>().and_then(|p| p.open()).expect("a test's --peer"))
                        .collect(),
                };
                Backend::start_threads(host.clone(), cfg)
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            let backend = loop {
                match start() {
                    Err(pvgpu_backend::supervisor::BackendError::Listen(pvgpu_backend::listener::ListenError::Bind { source, .. }))
                        if source.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    started => break started.expect("cannot start the embedded backend"),
                }
            };
            Running::Embedded { backend: Some(Box::new(backend)), exec: host }
        }
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.socket.exists() && std::net::TcpStream::connect(&self.tcp).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("pvgpu-backend did not start listening within 30 s");
    }

    /// Whether the backend runs as a separate process.
    pub fn is_process(&self) -> bool {
        matches!(self.running, Running::Process { .. })
    }

    /// Whether the backend runs in this very process.
    pub fn is_embedded(&self) -> bool {
        matches!(self.running, Running::Embedded { .. })
    }

    /// The address of one transport.
    pub fn addr(&self, t: Transport) -> BackendAddr {
        match t {
            Transport::Local => BackendAddr::Local(self.socket.clone()),
            Transport::Tcp => BackendAddr::Tcp(self.tcp.clone()),
            Transport::Tls => BackendAddr::Tls(self.tls.clone()),
            Transport::Rdma => BackendAddr::Rdma(self.rdma.clone().expect("no RDMA here: check rdma_missing() first")),
            Transport::Xen => BackendAddr::Xen(None),
        }
    }

    /// The suite's client options with this backend's TCP key.
    pub fn options(&self) -> Options {
        Options { tcp_key: Some(self.tcp_key.clone()), tls_ca: Some(self.tls_ca.clone()), ..test_options() }
    }

    /// The backend's control socket (none for an external backend).
    pub fn control(&self) -> Option<pvgpu_ctl::client::Control> {
        match self.running {
            Running::External => None,
            _ => Some(pvgpu_ctl::client::Control::new(self._dir.0.join("control.sock"))),
        }
    }

    /// A new client (session) over `t`.
    pub fn client(&self, t: Transport) -> Client {
        let opts = self.options();
        Client::connect(&self.addr(t), &opts).expect("cannot connect to the backend under test")
    }

    /// Host bytes allocated by all sessions (embedded host executor only).
    pub fn host_used_bytes(&self) -> Option<u64> {
        match &self.running {
            Running::Embedded { exec, .. } => Some(exec.used_bytes()),
            Running::Process { .. } | Running::External => None,
        }
    }

    /// Sessions being served (embedded backend), or worker processes alive
    /// (separate backend).
    pub fn live_sessions(&self) -> usize {
        match &self.running {
            Running::Embedded { backend, .. } => backend.as_ref().map_or(0, |b| b.stats().live()),
            Running::Process { child, .. } => children_of(child.id()),
            Running::External => 0,
        }
    }

    /// Stops the backend (SIGTERM for a separate process) and waits.
    pub fn stop(&mut self) {
        match &mut self.running {
            Running::Embedded { backend, .. } => {
                if let Some(b) = backend.take() {
                    (*b).shutdown();
                }
            }
            Running::Process { child, .. } => {
                // SAFETY: signalling our own child by pid.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                let _ = child.wait();
            }
            Running::External => {}
        }
    }

    /// Kills a separate-process backend and its session workers with
    /// SIGKILL, as a crash or `systemctl kill` would (no clean-up at all).
    pub fn kill(&mut self) -> bool {
        match &mut self.running {
            Running::Process { child, .. } => {
                for pid in child_pids(child.id()) {
                    // SAFETY: signalling a process by pid.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
                let _ = child.kill();
                let _ = child.wait();
                true
            }
            Running::Embedded { .. } | Running::External => false,
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Live (not zombie) child processes of `pid`.
pub fn child_pids(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let me: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // Fields after the command name: state, ppid, ...
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let state = rest.next()?;
            let ppid: u32 = rest.next()?.parse().ok()?;
            (ppid == pid && state != "Z").then_some(me)
        })
        .collect()
}

/// The session workers among the live child processes of backend `pid`:
/// those named `pvgpu-worker` (idle workers of its pool, `pvgpu-idle`,
/// serve no session yet).
pub fn session_workers(pid: u32) -> Vec<u32> {
    child_pids(pid)
        .into_iter()
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "pvgpu-worker"))
        .collect()
}

/// Number of session workers of backend `pid`.
pub fn children_of(pid: u32) -> usize {
    session_workers(pid).len()
}

/// Polls `f` until it is true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
