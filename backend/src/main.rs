//! `pvgpu-backend`: serves pvgpu frontends (local shared memory and TCP) and
//! runs their CUDA commands. See `docs/operations.md`.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use pvgpu_backend::Backend;
use pvgpu_backend::config::{
    AdmissionConfig, Config, ControlHttp, ControlSocket, DeviceMemory, ExecutorKind, Isolation, Listen, WorkerCommand, parse_bytes,
};
use pvgpu_backend::exec::cuda::CudaExecutor;
use pvgpu_backend::exec::host::HostExecutor;
use pvgpu_backend::sandbox::{Confinement, WorkerUser};
use pvgpu_backend::worker_process;
use pvgpu_ring::tcp_auth::TcpKey;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod exec_args;
use exec_args::ExecArgs;

#[derive(Parser, Debug)]
#[command(name = "pvgpu-backend", version, about = "Paravirtual GPU backend: serves CUDA driver-API commands from pvgpu frontends")]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Read options from a TOML file: each key a long option without its
    /// dashes (`listen = ["tcp:0.0.0.0:7300"]`, `state-dir = "/var/lib/pvgpu"`,
    /// `no-seccomp = true`); options on the command line win.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Where to listen: local:PATH (shared-memory transport), tcp:HOST:PORT, tls:HOST:PORT, rdma:HOST:PORT (an RDMA device's address), or xen (vgpu devices of Xen guests). Repeatable.
    #[arg(long = "listen", value_name = "ADDR")]
    listen: Vec<Listen>,
    /// The control socket pvgpu-ctl talks to: unix:PATH, or off. Default:
    /// $XDG_RUNTIME_DIR/pvgpu/control.sock, /run/pvgpu/control.sock as
    /// root, else /tmp/pvgpu-UID/control.sock (left out, with a warning,
    /// when another backend serves it).
    #[arg(long, value_name = "unix:PATH|off", value_parser = parse_control)]
    control: Option<ControlSocket>,
    /// Serve Prometheus' /metrics over plain HTTP at HOST:PORT (the control
    /// socket serves it too). It tells who uses the GPUs and how much: bind
    /// it where only the monitoring network reaches.
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Serve the control API and the web dashboard over HTTP at HOST:PORT
    /// (HTTPS with --control-tls-cert); every API request must carry the
    /// token of --control-token. Without TLS, bind it to localhost and
    /// reach it through ssh, or put it behind a TLS proxy.
    #[arg(long, value_name = "HOST:PORT", requires = "control_token")]
    control_http: Option<String>,
    /// Serve --control-http inside TLS with this certificate chain (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["control_http", "control_tls_key"])]
    control_tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --control-tls-cert.
    #[arg(long, value_name = "FILE", requires = "control_tls_cert")]
    control_tls_key: Option<std::path::PathBuf>,
    /// File holding the dashboard's and HTTP API's bearer token (at least
    /// 16 bytes, owner-only). Make one with:
    /// head -c 24 /dev/urandom | base64 > FILE; chmod 600 FILE.
    #[arg(long, value_name = "FILE", requires = "control_http")]
    control_token: Option<std::path::PathBuf>,
    /// A backend sessions may be moved to by name (the dashboard's Move, `POST
    /// /v1/sessions/ID/migrate`), and a program's copies sent to (from a
    /// session of this backend to one of that backend, same program):
    /// name=NAME,control=unix:PATH|https://HOST:PORT,
    /// address=WHERE-ITS-GUESTS-REACH-IT[,token=FILE,ca=FILE] (token for
    /// https; ca for https or a tls: address). Repeatable.
    #[arg(long = "peer", value_name = "SPEC")]
    peers: Vec<pvgpu_backend::peers::PeerSpec>,
    /// How sessions are separated: a worker process each (a GPU fault then
    /// ends only the faulting session) or a thread each.
    #[arg(long, value_enum, default_value = "process")]
    isolation: Isolation,
    /// Worker processes started ahead of their sessions, executor ready, so
    /// that a program's first command does not wait for one to start (on
    /// the GPU, for the driver to initialise). 0: each session's worker is
    /// started for it.
    #[arg(long, value_name = "N", default_value_t = 2)]
    worker_pool: usize,
    #[command(flatten)]
    admission: AdmissionArgs,
    /// User the worker processes switch to once the GPU is open (a
    /// dedicated one, such as `pvgpu`, that may open /dev/nvidia*).
    /// Default: the backend's own user.
    #[arg(long, value_name = "NAME")]
    worker_user: Option<String>,
    /// Leave out the workers' seccomp filter (which denies exec, fork,
    /// network sockets, ptrace and the kernel's administrative calls).
    #[arg(long)]
    no_seccomp: bool,
    #[command(flatten)]
    exec: ExecArgs,
}

/// Who may open sessions, and how many.
#[derive(Args, Debug, Clone)]
struct AdmissionArgs {
    /// Most sessions served at once, over all transports.
    #[arg(long, default_value = "64")]
    max_sessions: usize,
    /// Most sessions over the local transport.
    #[arg(long, default_value = "64")]
    max_local_sessions: usize,
    /// Most sessions over TCP.
    #[arg(long, default_value = "16")]
    max_tcp_sessions: usize,
    /// Most sessions of Xen guests.
    #[arg(long, default_value = "64")]
    max_xen_sessions: usize,
    /// Most sessions of one peer over each transport: a local user, a TCP
    /// client address (an IPv6 /64), a guest. Default: a quarter of the
    /// transport's limit.
    #[arg(long)]
    max_sessions_per_peer: Option<usize>,
    /// Device memory all sessions of one peer may hold together (e.g. 32G).
    /// Unlimited if unset (each session still has --mem-quota).
    #[arg(long, value_parser = parse_bytes)]
    peer_mem_quota: Option<u64>,
    /// Most connections still opening (no worker yet) per transport (local,
    /// TCP, TLS); when full, the one opening longest is dropped for a new one.
    #[arg(long, default_value = "128")]
    max_pending: usize,
    /// Most connections still opening from one peer; a burst beyond it
    /// (many processes of one user starting at once) is refused. Default:
    /// an eighth of --max-pending.
    #[arg(long)]
    max_pending_per_peer: Option<usize>,
    /// Seconds a new connection has in all to open (send its hello, finish
    /// TLS, pass the key check) before it is dropped, however much it sends.
    #[arg(long, value_name = "SECS", default_value = "5")]
    handshake_timeout: u64,
    /// File holding the key TCP clients must prove they hold (their
    /// PVGPU_TCP_KEY names a copy). Make one with:
    /// head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE.
    #[arg(long, value_name = "FILE")]
    tcp_key: Option<std::path::PathBuf>,
    /// Serve TCP without a key: every host that can reach the port is trusted.
    #[arg(long)]
    tcp_trusted_network: bool,
    /// Directory of the backend's lasting state: tenants, their quotas and
    /// their keys (an SQLite database, made owner-only). With it, TCP
    /// clients may open with tenant keys (`pvgpu-ctl key issue`).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// Certificate chain (PEM) of tls: listeners.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// Private key (PEM) of the certificate.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Local users (uid) who may connect; repeatable. Default: whoever can
    /// open the socket (see --socket-mode).
    #[arg(long = "allow-uid", value_name = "UID")]
    allow_uids: Vec<u32>,
    /// Permission bits of the local socket, in octal.
    #[arg(long, value_name = "MODE", default_value = "660", value_parser = parse_mode)]
    socket_mode: u32,
    /// Seconds a session's worker may live on after its peer left (or its
    /// guest went away) before it is killed; frees the GPU even when a
    /// kernel never ends.
    #[arg(long, value_name = "SECS", default_value = "10")]
    end_grace: u64,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8).ok().filter(|m| *m <= 0o777).ok_or_else(|| format!("'{s}' is not an octal mode like 660"))
}

impl AdmissionArgs {
    fn config(&self) -> Result<AdmissionConfig> {
        let tcp_key = match &self.tcp_key {
            Some(p) => Some(TcpKey::from_file(p)?),
            None => None,
        };
        Ok(AdmissionConfig {
            max_sessions: self.max_sessions,
            max_local: self.max_local_sessions,
            max_tcp: self.max_tcp_sessions,
            max_xen: self.max_xen_sessions,
            max_per_peer: self.max_sessions_per_peer,
            peer_mem_quota: self.peer_mem_quota,
            max_pending: self.max_pending,
            max_pending_per_peer: self.max_pending_per_peer,
            handshake_timeout: Duration::from_secs(self.handshake_timeout.max(1)),
            tcp_key,
            tcp_trusted_network: self.tcp_trusted_network,
            tenants: match &self.state_dir {
                Some(dir) => Some(Arc::new(pvgpu_backend::tenants::Tenants::open(dir)?)),
                None => None,
            },
            tls: match (&self.tls_cert, &self.tls_key) {
                (Some(c), Some(k)) => Some(pvgpu_backend::tls::server_config(c, k)?),
                _ => None,
            },
            allow_uids: (!self.allow_uids.is_empty()).then(|| self.allow_uids.clone()),
            socket_mode: self.socket_mode,
            end_grace: Duration::from_secs(self.end_grace),
        })
    }
}

/// How the backend tells a worker to confine itself (see
/// `pvgpu_backend::sandbox`).
#[derive(Args, Debug, Clone)]
struct SandboxArgs {
    /// User id to switch to.
    #[arg(long, requires = "worker_gid")]
    worker_uid: Option<u32>,
    /// Group id to switch to.
    #[arg(long, requires = "worker_uid")]
    worker_gid: Option<u32>,
    /// Every group of the user, comma-separated.
    #[arg(long, value_delimiter = ',', requires = "worker_uid")]
    worker_groups: Vec<u32>,
    /// No seccomp filter.
    #[arg(long)]
    no_seccomp: bool,
}

impl SandboxArgs {
    fn confinement(&self) -> Confinement {
        let user = self.worker_uid.zip(self.worker_gid).map(|(uid, gid)| WorkerUser { uid, gid, groups: self.worker_groups.clone() });
        Confinement { user, seccomp: !self.no_seccomp }
    }

    fn to_args(user: Option<&WorkerUser>, no_seccomp: bool) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(u) = user {
            a.extend(["--worker-uid".into(), u.uid.to_string(), "--worker-gid".into(), u.gid.to_string()]);
            if !u.groups.is_empty() {
                let groups: Vec<String> = u.groups.iter().map(u32::to_string).collect();
                a.extend(["--worker-groups".into(), groups.join(",")]);
            }
        }
        if no_seccomp {
            a.push("--no-seccomp".into());
        }
        a
    }
}

fn parse_control(s: &str) -> Result<ControlSocket, String> {
    if s == "off" {
        return Ok(ControlSocket::Off);
    }
    pvgpu_ctl::parse_address(s).map(ControlSocket::At)
}

/// A worker's `--gpus` list (clap takes a `Vec` value for many values).
type GpuList = Vec<usize>;

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Waits, its executor ready, for a session to serve (an idle worker of the pool).
    #[command(hide = true)]
    PoolWorker {
        #[command(flatten)]
        exec: ExecArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Serves one session on an inherited connection (started by the backend itself).
    #[command(hide = true)]
    Worker {
        /// local or tcp.
        #[arg(long)]
        conn: String,
        /// Session number.
        #[arg(long)]
        session: u64,
        /// Guest domain (xen).
        #[arg(long)]
        domid: Option<u16>,
        /// vgpu device of the guest (xen).
        #[arg(long)]
        devid: Option<u32>,
        /// The peer of a relayed TLS or RDMA session.
        #[arg(long)]
        peer: Option<String>,
        /// The ring a Xen guest published (read by the backend).
        #[arg(long)]
        xen_ring: Option<String>,
        /// Where to report how the session ended (a pipe from the backend).
        #[arg(long)]
        report_fd: Option<i32>,
        /// A local frontend's hello, read by the backend (its memfd on fd 5).
        #[arg(long)]
        local_hello: Option<String>,
        /// The session's seat in its peer's memory ledger (on fd 6).
        #[arg(long)]
        ledger_seat: Option<usize>,
        /// The backend's handle registry is on fd 7 (interprocess handles).
        #[arg(long)]
        ipc: bool,
        /// The session's meter is on fd 8.
        #[arg(long)]
        meter: bool,
        /// Whom the session belongs to when not its connection's peer (a
        /// tenant).
        #[arg(long)]
        scope: Option<String>,
        /// The backend's devices the session may use, in its order (`none`:
        /// no device). Default: all.
        #[arg(long, value_parser = pvgpu_backend::devices::parse_list_arg)]
        gpus: Option<GpuList>,
        #[command(flatten)]
        exec: ExecArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(pvgpu_backend::log_sink::LogSink::default)
        .init();
    let args = pvgpu_backend::config_file::expand(std::env::args_os().collect())?;
    let cli = Cli::parse_from(args);
    // A worker, while this is its only thread (a supervisor makes the
    // room as it starts, `Backend::start`).
    if cli.command.is_some() {
        pvgpu_backend::fd_table::make_room();
    }
    match &cli.command {
        Some(cmd @ Cmd::Worker { .. }) => return worker(cmd, None),
        Some(Cmd::PoolWorker { exec, sandbox }) => return pool_worker(exec, sandbox),
        None => {}
    }
    if cli.exec.executor == ExecutorKind::Cuda && cli.exec.device_memory == DeviceMemory::Placed {
        pvgpu_backend::layout::fix()?;
    }
    // Before any key is read.
    pvgpu_backend::sandbox::protect_secrets().context("cannot protect the backend's keys")?;
    let backend = start(&cli)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("cannot install signal handlers")?;
    }
    tracing::info!(isolation = ?cli.isolation, executor = ?cli.exec.executor, "pvgpu-backend running; SIGINT or SIGTERM stops it");
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    tracing::info!(live_sessions = backend.stats().live(), "stopping: ending sessions");
    backend.shutdown();
    tracing::info!("stopped");
    Ok(())
}

/// An idle worker of the pool: readies its executor, waits for its
/// session, then serves it as a worker started for it would.
fn pool_worker(exec: &ExecArgs, sandbox: &SandboxArgs) -> Result<()> {
    use pvgpu_backend::worker_pool;
    // Before anything opens a descriptor.
    worker_pool::reserve_numbers().context("an idle worker cannot reserve its descriptor numbers")?;
    worker_pool::name_process(c"pvgpu-idle");
    let mut prepared = match exec.executor {
        ExecutorKind::Cuda => Some(worker_process::Prepared::Cuda(worker_process::prepare_cuda(exec.device_memory)?, None)),
        ExecutorKind::Host => None,
    };
    let args = loop {
        let Some(args) = worker_pool::wait_for_session().context("an idle worker's session")? else {
            // The backend is stopping.
            return Ok(());
        };
        if args.first().is_some_and(|a| a == worker_pool::PREPARE) {
            // Made ahead for a session that moves here; then its session.
            worker_pool::name_process(c"pvgpu-prepared");
            // Confined first, as a session's worker is before it hands the
            // driver anything of the guest's (the skeleton's module images).
            let made = worker_process::confine_once(&sandbox.confinement())
                .map_err(|e| format!("the worker could not be confined: {}", pvgpu_ring::report::Chain(&e)))
                .and_then(|()| worker_process::prepare_skeleton(&mut prepared, &exec.executor(), &exec.session()));
            if let Err(why) = &made {
                tracing::warn!(why, "a worker could not be prepared from a session's skeleton");
            }
            worker_pool::answer(made).context("a prepared worker's answer")?;
            continue;
        }
        break args;
    };
    let cli = Cli::try_parse_from(std::iter::once(std::ffi::OsString::from("pvgpu-backend")).chain(args))
        .context("an idle worker's session arguments")?;
    match &cli.command {
        Some(cmd @ Cmd::Worker { .. }) => worker(cmd, prepared),
        _ => bail!("an idle worker was handed something other than a session"),
    }
}

/// Serves the one session a worker process was started for (with its
/// executor `prepared` when it waited in the pool).
fn worker(cmd: &Cmd, prepared: Option<worker_process::Prepared>) -> Result<()> {
    let Cmd::Worker {
        conn,
        session,
        domid,
        devid,
        peer,
        xen_ring,
        report_fd,
        local_hello,
        ledger_seat,
        ipc,
        meter,
        scope,
        gpus,
        exec,
        sandbox,
    } = cmd
    else {
        bail!("not a session's worker");
    };
    let w = worker_process::WorkerSession {
        conn,
        xen: domid.zip(*devid),
        xen_ring: xen_ring.as_deref(),
        id: *session,
        peer: peer.as_deref(),
        report_fd: *report_fd,
        local_hello: local_hello.as_deref(),
        ledger_seat: *ledger_seat,
        ipc: *ipc,
        meter: *meter,
        scope: scope.as_deref(),
    };
    let mut session = exec.session();
    session.limits.gpus = gpus.clone();
    worker_process::run_worker(&w, &exec.executor(), &session, &sandbox.confinement(), prepared)?;
    Ok(())
}

/// Starts the backend the command line describes.
fn start(cli: &Cli) -> Result<Backend> {
    if cli.listen.is_empty() {
        bail!(
            "nothing to listen on: pass --listen local:/run/pvgpu/pvgpu.sock, --listen tcp:HOST:7300 (with --tcp-key FILE) and/or --listen xen"
        );
    }
    let cfg = Config {
        listen: cli.listen.clone(),
        session: cli.exec.session(),
        admission: cli.admission.config()?,
        control: cli.control.clone().unwrap_or_else(|| ControlSocket::Default(pvgpu_ctl::default_socket())),
        metrics: cli.metrics.clone(),
        control_http: match (&cli.control_http, &cli.control_token) {
            (Some(addr), Some(token)) => Some(ControlHttp {
                addr: addr.clone(),
                token: TcpKey::from_file(token).context("cannot read --control-token")?,
                tls: match (&cli.control_tls_cert, &cli.control_tls_key) {
                    (Some(cert), Some(key)) => Some(pvgpu_backend::tls::server_config(cert, key).context("--control-tls-cert")?),
                    _ => None,
                },
            }),
            _ => None,
        },
        peers: cli.peers.iter().map(|p| p.open()).collect::<Result<_, _>>()?,
    };
    let worker_user = match &cli.worker_user {
        Some(name) => Some(WorkerUser::lookup(name).with_context(|| format!("--worker-user {name}"))?),
        None => None,
    };
    match cli.isolation {
        Isolation::Thread if worker_user.is_some() || cli.no_seccomp => {
            bail!("--worker-user and --no-seccomp apply to worker processes (--isolation process)")
        }
        Isolation::Process if worker_user.is_none() && nix::unistd::geteuid().is_root() => tracing::warn!(
            "running as root without --worker-user: workers keep root (seccomp still applies); \
             give them a dedicated user that may open /dev/nvidia*"
        ),
        _ => {}
    }
    Ok(match (cli.isolation, cli.exec.executor) {
        (Isolation::Process, _) => {
            let devices = worker_process::probe(&cli.exec.executor())?;
            let exe = std::env::current_exe().context("cannot find the pvgpu-backend binary to start workers")?;
            let mut args = cli.exec.to_args();
            args.extend(SandboxArgs::to_args(worker_user.as_ref(), cli.no_seccomp));
            Backend::start_processes(
                cfg,
                WorkerCommand { exe, args, executor: cli.exec.executor.name().into(), devices, pool: cli.worker_pool },
            )?
        }
        (Isolation::Thread, ExecutorKind::Cuda) => {
            Backend::start_threads(Arc::new(CudaExecutor::with_memory(cli.exec.device_memory)?), cfg)?
        }
        (Isolation::Thread, ExecutorKind::Host) => {
            Backend::start_threads(Arc::new(HostExecutor::with_devices(cli.exec.host_mem, cli.exec.host_devices.into())), cfg)?
        }
    })
}
