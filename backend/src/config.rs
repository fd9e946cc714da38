//! What an operator configures: listeners, isolation, executors and the
//! limits every session runs under.

use pvgpu_ring::addr::{Addr, AddrError};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Where to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket path (local shared-memory transport).
    Local(PathBuf),
    /// A TCP address, `host:port` (port 0 picks one).
    Tcp(String),
    /// A TCP address served inside TLS (`--tls-cert`, `--tls-key`).
    Tls(String),
    /// An address of an RDMA device's interface, `host:port`, served over
    /// rsockets (the TCP key check as for TCP).
    Rdma(String),
    /// vgpu devices of Xen guests, found in XenStore (this must be the
    /// backend domain, usually Dom0).
    Xen,
}

impl FromStr for Listen {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, AddrError> {
        match s.parse()? {
            Addr::Local(p) => Ok(Listen::Local(p)),
            Addr::Tcp(a) => Ok(Listen::Tcp(a)),
            Addr::Tls(a) => Ok(Listen::Tls(a)),
            Addr::Rdma(a) => Ok(Listen::Rdma(a)),
            Addr::Xen(None) => Ok(Listen::Xen),
            // A backend serves every device it finds, not one.
            Addr::Xen(Some(_)) => Err(AddrError(s.to_string())),
        }
    }
}

/// How sessions are separated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// One worker process per session.
    Process,
    /// One thread per session in this process.
    Thread,
}

/// Limits applied to each session.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Device memory a session may hold, in bytes.
    pub mem_quota: Option<u64>,
    /// Objects of each kind (contexts, modules, functions, streams, events,
    /// allocations) a session may hold.
    pub max_objects: usize,
    /// Largest module image accepted, in bytes.
    pub max_image: usize,
    /// Count against the quota everything the process holds on the device
    /// (what the driver reserves for contexts, their limits, module code
    /// and globals), as the executor measures it, besides the allocations
    /// the session counts itself. Only a process that serves one session
    /// (a worker) sets it.
    pub footprint: bool,
    /// The session's seat in its peer's memory ledger: what all sessions of
    /// the peer hold together stays within `--peer-mem-quota`.
    pub peer_ledger: Option<crate::ledger::LedgerView>,
    /// Percent of a device's largest persisting-L2 set-aside a session may
    /// ask for; more is cut to it.
    pub persisting_l2_percent: u32,
    /// The session's way to the handles other processes of its guest
    /// exported (`None`: interprocess handles are not offered).
    pub ipc: Option<std::sync::Arc<crate::ipc::Broker>>,
    /// Set when a checkpoint is ordered for the session (the supervisor's
    /// nudge): the session looks at its order at its next waited call
    /// ([`crate::checkpoints`]).
    pub checkpoint: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Where the session counts what it does, for `/metrics`
    /// ([`crate::meter`]).
    pub meter: Option<crate::meter::MeterView>,
    /// The backend's devices this session may use, in the order it
    /// numbers them (`None`: all of them). A tenant's GPUs less those
    /// drained ([`crate::devices`]); ordinals the executor lacks are left
    /// out.
    pub gpus: Option<Vec<usize>>,
    /// The session takes turns on each GPU as the supervisor grants them
    /// (`--gpu-share weighted`, [`crate::share`]); needs `meter`.
    pub gpu_turns: bool,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            mem_quota: None,
            max_objects: 65536,
            max_image: pvgpu_ring::proto::MAX_PAYLOAD,
            footprint: false,
            peer_ledger: None,
            persisting_l2_percent: 25,
            ipc: None,
            checkpoint: None,
            meter: None,
            gpus: None,
            gpu_turns: false,
        }
    }
}

/// Session settings shared by every transport.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Per-session limits.
    pub limits: SessionLimits,
    /// Largest data area accepted from a local frontend, in bytes.
    pub max_data_area: u64,
    /// How long a session spins for the next request before sleeping.
    pub spin: Duration,
    /// Whether a local frontend's shared memory may be mapped at the
    /// frontend's own address (so page-locked memory has one address on
    /// both sides and on the GPU). Only a process that serves one session
    /// does: the frontend learns where its memory lies in the process.
    pub same_address: bool,
    /// Where module images are kept between sessions (`None`: nowhere).
    pub image_cache: Option<PathBuf>,
    /// Most bytes of images kept there.
    pub image_cache_max: u64,
    /// A TCP session that sends nothing for this long is ended.
    pub tcp_idle_timeout: Option<Duration>,
    /// A local or Xen session that sends nothing for this long is ended.
    pub idle_timeout: Option<Duration>,
    /// CPUs a session's serving thread runs on (`None`: wherever the
    /// scheduler puts it).
    pub cpus: Option<Vec<usize>>,
    /// Sessions take turns on each GPU, of this long while others wait
    /// (`--gpu-share weighted`, [`crate::share`]); `None`: the driver
    /// shares the GPU's time.
    pub gpu_slice: Option<Duration>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            limits: SessionLimits::default(),
            max_data_area: 1 << 30,
            spin: Duration::from_micros(50),
            same_address: false,
            image_cache: None,
            image_cache_max: 4 << 30,
            tcp_idle_timeout: Some(Duration::from_secs(3600)),
            idle_timeout: None,
            cpus: None,
            gpu_slice: None,
        }
    }
}

/// Backend configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listeners.
    pub listen: Vec<Listen>,
    /// Session settings.
    pub session: SessionConfig,
    /// Who may open a session, how many, and how quickly they must.
    pub admission: AdmissionConfig,
    /// Where the control socket is served.
    pub control: ControlSocket,
    /// A TCP address serving `/metrics` to Prometheus (the control socket
    /// serves it too).
    pub metrics: Option<String>,
    /// The control API and the web dashboard over HTTP or HTTPS.
    pub control_http: Option<ControlHttp>,
    /// The backends this one may move sessions to (`--peer`).
    pub peers: Vec<crate::peers::Peer>,
}

/// Where and how the control API is served over TCP (`--control-http`).
#[derive(Debug, Clone)]
pub struct ControlHttp {
    /// `host:port` (port 0 picks one).
    pub addr: String,
    /// The bearer token every API request must carry.
    pub token: pvgpu_ring::tcp_auth::TcpKey,
    /// TLS with this certificate (`--control-tls-cert`), else plain HTTP.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

/// Where the control socket ([`crate::control`]) is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlSocket {
    /// Nowhere.
    Off,
    /// At the default path ([`pvgpu_ctl::default_socket`]); if another
    /// backend serves it, this one goes on without a control socket (and
    /// says so).
    Default(PathBuf),
    /// At this path (`--control unix:PATH`); failing to open it stops the
    /// backend.
    At(PathBuf),
}

/// Who may open sessions and how many; what a peer must do before the
/// backend starts a worker for it.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    /// Most sessions served at once, over all transports.
    pub max_sessions: usize,
    /// Most sessions over each transport: local, TCP, Xen.
    pub max_local: usize,
    /// See [`AdmissionConfig::max_local`].
    pub max_tcp: usize,
    /// See [`AdmissionConfig::max_local`].
    pub max_xen: usize,
    /// Most sessions of one peer over each transport: a local user, a TCP
    /// address (an IPv6 /64), a guest. `None`: a quarter of each
    /// transport's limit.
    pub max_per_peer: Option<usize>,
    /// Device memory all sessions of one peer may hold together.
    pub peer_mem_quota: Option<u64>,
    /// Most connections still in their opening (no worker yet), per
    /// transport (local, TCP, TLS); when full, the oldest is cut to make
    /// room.
    pub max_pending: usize,
    /// Most of those from one peer. `None`: an eighth of
    /// [`AdmissionConfig::max_pending`].
    pub max_pending_per_peer: Option<usize>,
    /// How long a connection may take to open in all (hello, TLS
    /// handshake, key check), however much it sends meanwhile.
    pub handshake_timeout: Duration,
    /// The key TCP clients must prove they hold.
    pub tcp_key: Option<pvgpu_ring::tcp_auth::TcpKey>,
    /// Serve TCP without a key (a network where every host is trusted).
    pub tcp_trusted_network: bool,
    /// Tenants and their keys (`--state-dir`): a TCP peer holding a
    /// tenant key is that tenant, under its quotas.
    pub tenants: Option<std::sync::Arc<crate::tenants::Tenants>>,
    /// Certificate and key of `tls:` listeners.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Local users (uids) who may connect; `None`: whoever can open the
    /// socket.
    pub allow_uids: Option<Vec<u32>>,
    /// Permission bits of the local socket.
    pub socket_mode: u32,
    /// How long a session's worker may live on after its peer left (or its
    /// guest went away) before it is killed.
    pub end_grace: Duration,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_sessions: 64,
            max_local: 64,
            max_tcp: 16,
            max_xen: 64,
            max_per_peer: None,
            peer_mem_quota: None,
            max_pending: 128,
            max_pending_per_peer: None,
            handshake_timeout: Duration::from_secs(5),
            tcp_key: None,
            tcp_trusted_network: false,
            tenants: None,
            tls: None,
            allow_uids: None,
            socket_mode: 0o660,
            end_grace: Duration::from_secs(10),
        }
    }
}

/// Where the GPU executor puts a session's device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DeviceMemory {
    /// Where the driver's `cuMemAlloc` puts it: addresses a new process
    /// cannot have back, so a session never leaves its backend.
    #[default]
    Driver,
    /// At addresses the backend reserves for each context (the virtual
    /// memory API), which a new process can reserve again: a checkpointed
    /// session can be restored in another backend process (docs/operations.md).
    Placed,
}

/// Which executor runs the commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    /// The GPU, through the CUDA driver.
    Cuda,
    /// The host test double (no GPU; for tests).
    Host,
}

impl ExecutorKind {
    /// The name sessions report (`cuda`, `host`).
    pub fn name(self) -> &'static str {
        match self {
            ExecutorKind::Cuda => "cuda",
            ExecutorKind::Host => "host",
        }
    }
}

/// Executor settings passed to every worker.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Which executor.
    pub kind: ExecutorKind,
    /// Bytes of fake device memory of the host executor.
    pub host_mem: u64,
    /// Devices of the host executor.
    pub host_devices: usize,
    /// Where the GPU executor puts device memory.
    pub device_memory: DeviceMemory,
}

/// The command that starts a worker process: the `pvgpu-backend` binary and
/// the arguments that select its executor.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// Path of the `pvgpu-backend` binary.
    pub exe: PathBuf,
    /// Arguments after `worker` (executor and limits).
    pub args: Vec<String>,
    /// Name of the executor the workers run (`cuda`, `host`).
    pub executor: String,
    /// The devices that executor has, as it names them (`cuDeviceGetUuid`,
    /// found at start-up).
    pub devices: Vec<[u8; 16]>,
    /// Idle workers kept ready for the next sessions (`--worker-pool`).
    pub pool: usize,
}

/// Parses a byte count as operators write it (`64M`, `2G`, `1.5GiB`,
/// `4096`; powers of 1024), as `pvgpu-ctl` does.
pub use pvgpu_ctl::parse_size as parse_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert!(parse_bytes("12Q").is_err());
        assert!(parse_bytes("x").is_err());
    }

    #[test]
    fn listen_addresses() {
        assert_eq!("local:/run/x.sock".parse(), Ok(Listen::Local("/run/x.sock".into())));
        assert_eq!("tcp:127.0.0.1:0".parse(), Ok(Listen::Tcp("127.0.0.1:0".into())));
        assert_eq!("xen".parse(), Ok(Listen::Xen));
        assert!("xen:1".parse::<Listen>().is_err());
        assert!("local:".parse::<Listen>().is_err());
    }
}
