//! The supervisor: listeners, one session per accepted peer, session
//! counts and limits, shutdown.
//!
//! Each accepted connection becomes one session, served either on a thread
//! of this process ([`Isolation::Thread`]: tests, the embedded backend of
//! `pvgpu-bench`) or in a worker process of its own
//! ([`Isolation::Process`], the default of `pvgpu-backend`). On a GPU a
//! kernel fault poisons every CUDA context of the process that ran it, so
//! only process isolation keeps one guest's fault from ending the others'
//! sessions; it also makes clean-up unconditional (the worker's exit frees
//! its GPU memory).

use crate::admission::{self, Pools, Slots};
use crate::config::{AdmissionConfig, Config, Listen, SessionConfig, WorkerCommand};
use crate::conn::readable;
use crate::exec::Executor;
use crate::log_limit;
use crate::session_loop::Accepted;
use crate::spawn::{OnEnd, ProcessSpawner, Spawner, Start, ThreadSpawner};
use pvgpu_ring::local::{self, Refusal};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::spawn::WORKER_FD;

/// Why the backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A listener could not be opened.
    #[error("Cannot listen on {what}")]
    Listen {
        /// The address.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A Unix socket path is already served by a running backend.
    #[error("{0} is in use by a running backend; stop it or choose another path")]
    InUse(PathBuf),
    /// TCP without a key, and the network not declared trusted.
    #[error(
        "Refusing to serve TCP without a key: pass --tcp-key FILE (clients set PVGPU_TCP_KEY to a copy), or --tcp-trusted-network if every host that can reach the port is trusted"
    )]
    TcpWithoutKey,
    /// A TLS listener without a certificate.
    #[error("--listen tls: needs --tls-cert FILE and --tls-key FILE")]
    TlsWithoutCert,
    /// XenStore is not reachable.
    #[error("Cannot serve Xen guests (run the backend in the domain that owns the GPU, with xenstored running)")]
    Xen(#[from] pvgpu_xen::XenError),
}

/// Counters for operators and tests.
#[derive(Debug)]
pub struct Stats {
    sessions: Arc<Slots>,
    total: AtomicU64,
}

impl Stats {
    /// Sessions being served now.
    pub fn live(&self) -> usize {
        self.sessions.held()
    }
    /// Sessions started since the backend started.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }
    fn next_id(&self) -> u64 {
        self.total.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// A running backend. Dropping it (or [`Backend::shutdown`]) stops the
/// listeners, ends every session and frees their resources.
pub struct Backend {
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    listeners: Vec<JoinHandle<()>>,
    spawner: Arc<dyn Spawner>,
    tcp_addrs: Vec<SocketAddr>,
    local_paths: Vec<PathBuf>,
}

enum Listener {
    Unix(UnixListener),
    Tcp { l: TcpListener, tls: bool },
    Xen(pvgpu_xen::XenStore),
}

fn bind(l: &Listen, adm: &AdmissionConfig) -> Result<(Listener, Option<SocketAddr>), BackendError> {
    match l {
        Listen::Local(path) => {
            let err = |source| BackendError::Listen { what: path.display().to_string(), source };
            if path.exists() {
                if UnixStream::connect(path).is_ok() {
                    return Err(BackendError::InUse(path.clone()));
                }
                let _ = std::fs::remove_file(path);
            }
            let ul = UnixListener::bind(path).map_err(err)?;
            // The mode decides who may connect, whatever the umask.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(adm.socket_mode)).map_err(err)?;
            ul.set_nonblocking(true).map_err(err)?;
            Ok((Listener::Unix(ul), None))
        }
        Listen::Tcp(a) | Listen::Tls(a) => {
            let tls = matches!(l, Listen::Tls(_));
            if adm.tcp_key.is_none() && !adm.tcp_trusted_network {
                return Err(BackendError::TcpWithoutKey);
            }
            if tls && adm.tls.is_none() {
                return Err(BackendError::TlsWithoutCert);
            }
            let err = |source| BackendError::Listen { what: a.clone(), source };
            let tl = TcpListener::bind(a).map_err(err)?;
            tl.set_nonblocking(true).map_err(err)?;
            let addr = tl.local_addr().map_err(err)?;
            Ok((Listener::Tcp { l: tl, tls }, Some(addr)))
        }
        Listen::Xen => Ok((Listener::Xen(pvgpu_xen::XenStore::open()?), None)),
    }
}

/// What every listener thread shares.
struct Shared {
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    pools: Pools,
    spawner: Arc<dyn Spawner>,
    admission: AdmissionConfig,
    session: SessionConfig,
}

impl Backend {
    /// Starts a backend serving each session on a thread of this process.
    pub fn start_threads<E: Executor>(exec: Arc<E>, cfg: Config) -> Result<Backend, BackendError> {
        let spawner = Arc::new(ThreadSpawner::new(exec, cfg.session.clone(), cfg.admission.end_grace));
        Self::start(cfg, spawner)
    }

    /// Starts a backend serving each session in a worker process.
    pub fn start_processes(cfg: Config, worker: WorkerCommand) -> Result<Backend, BackendError> {
        let spawner = Arc::new(ProcessSpawner::new(worker, cfg.admission.end_grace));
        Self::start(cfg, spawner)
    }

    fn start(cfg: Config, spawner: Arc<dyn Spawner>) -> Result<Backend, BackendError> {
        let pools = Pools::new(&cfg.admission);
        let stats = Arc::new(Stats { sessions: pools.sessions.clone(), total: AtomicU64::new(0) });
        let shared = Arc::new(Shared {
            stop: Arc::new(AtomicBool::new(false)),
            stats: stats.clone(),
            pools,
            spawner: spawner.clone(),
            admission: cfg.admission.clone(),
            session: cfg.session.clone(),
        });
        let mut bound = Vec::new();
        let mut tcp_addrs = Vec::new();
        let mut local_paths = Vec::new();
        for l in &cfg.listen {
            let (listener, addr) = bind(l, &cfg.admission)?;
            if let Some(a) = addr {
                let auth = if cfg.admission.tcp_key.is_some() { "key required" } else { "trusted network, no key" };
                tracing::info!(address = %a, auth, "listening (tcp)");
                tcp_addrs.push(a);
            }
            if let Listen::Local(p) = l {
                tracing::info!(path = %p.display(), "listening (local shared memory)");
                local_paths.push(p.clone());
            }
            bound.push(listener);
        }
        let mut listeners = Vec::new();
        for listener in bound {
            let shared = shared.clone();
            let h = std::thread::Builder::new()
                .name("pvgpu-listener".into())
                .spawn(move || match listener {
                    Listener::Xen(xs) => xen_loop(xs, &shared),
                    other => accept_loop(other, &shared),
                })
                .map_err(|source| BackendError::Listen { what: "listener thread".into(), source })?;
            listeners.push(h);
        }
        Ok(Backend { stop: shared.stop.clone(), stats, listeners, spawner, tcp_addrs, local_paths })
    }

    /// Bound TCP addresses (useful with port 0).
    pub fn tcp_addrs(&self) -> &[SocketAddr] {
        &self.tcp_addrs
    }

    /// Session counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// A flag that stops the backend when set (for signal handlers).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Stops listening, ends every session, frees everything, and waits.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for l in self.listeners.drain(..) {
            let _ = l.join();
        }
        self.spawner.shutdown();
        for p in self.local_paths.drain(..) {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Accepts connections and hands each to an admission thread: it has the
/// handshake timeout to open (hello, key check) while holding a pending
/// slot, and gets a worker only once it has, and a session slot is free.
fn accept_loop(listener: Listener, sh: &Arc<Shared>) {
    while !sh.stop.load(Ordering::SeqCst) {
        let ready = match &listener {
            Listener::Unix(l) => readable(l, Duration::from_millis(100)).unwrap_or(false),
            Listener::Tcp { l, .. } => readable(l, Duration::from_millis(100)).unwrap_or(false),
            Listener::Xen(_) => return,
        };
        sh.spawner.tend();
        if !ready {
            continue;
        }
        let acc = match &listener {
            Listener::Unix(l) => l.accept().map(|(s, _)| Accepted::Unix(s)),
            Listener::Tcp { l, tls } => l.accept().map(|(s, _)| if *tls { Accepted::Tls(s) } else { Accepted::Tcp(s) }),
            Listener::Xen(_) => return,
        };
        let acc = match acc {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                if log_limit::peer_triggered() {
                    tracing::warn!(error = %e, "accept failed");
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let sock_blocking = match &acc {
            Accepted::Unix(s) => s.set_nonblocking(false),
            Accepted::Tcp(s) | Accepted::Tls(s) => s.set_nonblocking(false),
            Accepted::Relayed { .. } | Accepted::Xen { .. } => Ok(()),
        };
        if sock_blocking.is_err() {
            continue;
        }
        let (peer, kind) = (acc.owner().0, acc.kind());
        let pending = match sh.pools.pending.acquire(kind, &peer) {
            Ok(p) => p,
            Err(full) => {
                if let Accepted::Unix(s) = &acc {
                    local::refuse(s, Refusal::Busy, sh.session.max_data_area);
                }
                admission::log_refusal(&peer, kind, &admission::Refused::Full(full));
                continue;
            }
        };
        let sh2 = sh.clone();
        let r = std::thread::Builder::new().name("pvgpu-admit".into()).spawn(move || admit(acc, pending, &sh2));
        if let Err(e) = r {
            tracing::error!(error = %e, "cannot start an admission thread");
        }
    }
}

/// One connection's opening (holding its `pending` slot), then its
/// session; for TLS, this thread then relays the session's traffic.
fn admit(acc: Accepted, pending: admission::Slot, sh: &Shared) {
    let (peer, kind) = (acc.owner().0, acc.kind());
    let admitted = admission::open(acc, &sh.admission, &sh.pools.sessions, sh.session.max_data_area);
    drop(pending);
    match admitted {
        Ok(admission::Admitted { acc, slot, relay }) => {
            let id = sh.stats.next_id();
            if let Err(e) = sh.spawner.spawn(Start { acc, id, slot, on_ready: None, on_end: None }, sh.stop.clone()) {
                tracing::error!(session = id, error = %e, "cannot start a session");
                return;
            }
            if let Some((tls, local)) = relay {
                crate::tls::relay(tls, local);
            }
        }
        Err(why) => admission::log_refusal(&peer, kind, &why),
    }
}

/// Serves Xen guests: rescans the vgpu devices whenever XenStore changes
/// under the backend's directory (and every second, to notice sessions that
/// ended), starts a session for each frontend that is ready, and ends the
/// sessions of guests that went away or closed their device.
fn xen_loop(mut xs: pvgpu_xen::XenStore, sh: &Shared) {
    let me = match xs.domid() {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "cannot read this domain's id; not serving Xen guests");
            return;
        }
    };
    let root = pvgpu_xen::vgpu::backend_root(me);
    if let Err(e) = xs.watch(&root, "pvgpu-backend") {
        tracing::error!(error = %e, path = %root, "cannot watch XenStore; not serving Xen guests");
        return;
    }
    tracing::info!(path = %root, "serving Xen guests' vgpu devices");
    let active: crate::xen::Active = Default::default();
    let mut last_scan = Instant::now() - Duration::from_secs(10);
    while !sh.stop.load(Ordering::SeqCst) {
        sh.spawner.tend();
        let event = matches!(xs.read_watch(Some(Duration::from_millis(200))), Ok(Some(_)));
        if !event && last_scan.elapsed() < Duration::from_secs(1) {
            continue;
        }
        last_scan = Instant::now();
        for id in crate::xen::departed(&mut xs, &active) {
            sh.spawner.end(id);
        }
        let mut start = |xs: &mut pvgpu_xen::XenStore, domid: u16, devid: u32| -> Option<u64> {
            // The supervisor reads what the guest published; its worker
            // reads no XenStore.
            let ring = match crate::xen::XenRing::read(xs, domid, devid, &sh.session) {
                Ok(r) => r,
                Err(e) => {
                    if log_limit::peer_triggered() {
                        tracing::warn!(domid, devid, error = %pvgpu_ring::report::Chain(&e), "refusing a Xen frontend's ring");
                    }
                    return None;
                }
            };
            let acc = Accepted::Xen { domid, devid, ring };
            let peer = acc.owner().0;
            let slot = match sh.pools.sessions.acquire("xen", &peer) {
                Ok(s) => s,
                Err(full) => {
                    admission::log_refusal(&peer, "xen", &admission::Refused::Full(full));
                    return None;
                }
            };
            let id = sh.stats.next_id();
            let set = active.clone();
            let on_end: OnEnd = Box::new(move || {
                // The device's XenStore side is the supervisor's: the
                // worker holds none once it serves.
                crate::xen::close_device(domid, devid);
                set.lock().unwrap_or_else(|p| p.into_inner()).remove(&(domid, devid));
            });
            let on_ready: OnEnd = Box::new(move || crate::xen::connect_device(domid, devid));
            match sh.spawner.spawn(Start { acc, id, slot, on_ready: Some(on_ready), on_end: Some(on_end) }, sh.stop.clone()) {
                Ok(()) => Some(id),
                Err(e) => {
                    tracing::error!(session = id, error = %e, "cannot start a session");
                    None
                }
            }
        };
        let mut skipped = |device: &str, e: pvgpu_xen::XenError| {
            if log_limit::peer_triggered() {
                tracing::warn!(device, error = %e, "skipping a vgpu device this pass");
            }
        };
        if let Err(e) = crate::xen::scan(&mut xs, &sh.session, sh.spawner.executor(), &active, &mut start, &mut skipped) {
            if log_limit::peer_triggered() {
                tracing::warn!(error = %e, "scanning vgpu devices failed");
            }
        }
    }
}
