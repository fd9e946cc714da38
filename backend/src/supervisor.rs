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

use crate::config::{Config, Listen, SessionConfig, WorkerCommand};
use crate::exec::Executor;
use crate::log_limit::LogLimiter;
use crate::session_loop::{Accepted, run_connection};
use pvgpu_ring::local::{self, Refusal};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// XenStore is not reachable.
    #[error("Cannot serve Xen guests (run the backend in the domain that owns the GPU, with xenstored running)")]
    Xen(#[from] pvgpu_xen::XenError),
}

/// Counters for operators and tests.
#[derive(Debug, Default)]
pub struct Stats {
    live: AtomicUsize,
    total: AtomicU64,
}

impl Stats {
    /// Sessions being served now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
    /// Sessions started since the backend started.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }
}

/// Runs when a session has ended (its thread returned or its worker exited).
type OnEnd = Box<dyn FnOnce() + Send>;

/// How a session gets run once its connection is accepted.
trait Spawner: Send + Sync {
    fn spawn(&self, acc: Accepted, id: u64, stats: Arc<Stats>, stop: Arc<AtomicBool>, on_end: Option<OnEnd>) -> io::Result<()>;
    /// Name of the executor sessions run on.
    fn executor(&self) -> &str;
    /// Collects sessions that ended on their own.
    fn reap(&self, _stats: &Stats) {}
    fn shutdown(&self) {}
}

struct ThreadSpawner<E: Executor> {
    exec: Arc<E>,
    cfg: SessionConfig,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<E: Executor> Spawner for ThreadSpawner<E> {
    fn spawn(&self, acc: Accepted, id: u64, stats: Arc<Stats>, stop: Arc<AtomicBool>, on_end: Option<OnEnd>) -> io::Result<()> {
        let (exec, cfg) = (self.exec.clone(), self.cfg.clone());
        let h = std::thread::Builder::new().name(format!("pvgpu-session-{id}")).spawn(move || {
            run_connection(exec, acc, &cfg, id, &stop);
            stats.live.fetch_sub(1, Ordering::SeqCst);
            if let Some(f) = on_end {
                f();
            }
        })?;
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        threads.retain(|t| !t.is_finished());
        threads.push(h);
        Ok(())
    }

    fn executor(&self) -> &str {
        self.exec.kind()
    }

    fn shutdown(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

struct ProcessSpawner {
    cmd: WorkerCommand,
    children: Mutex<Vec<(u64, Child, Option<OnEnd>)>>,
}

/// File descriptor a worker finds its connection on.
pub const WORKER_FD: i32 = 3;

impl ProcessSpawner {
    fn reap_children(&self, stats: &Stats) {
        let mut ended = Vec::new();
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        children.retain_mut(|(id, c, on_end)| match c.try_wait() {
            Ok(Some(status)) => {
                if !status.success() {
                    tracing::warn!(session = *id, %status, "session worker exited abnormally");
                }
                stats.live.fetch_sub(1, Ordering::SeqCst);
                ended.extend(on_end.take());
                false
            }
            _ => true,
        });
        drop(children);
        for f in ended {
            f();
        }
    }
}

impl Spawner for ProcessSpawner {
    fn reap(&self, stats: &Stats) {
        self.reap_children(stats);
    }

    fn spawn(&self, acc: Accepted, id: u64, _stats: Arc<Stats>, _stop: Arc<AtomicBool>, on_end: Option<OnEnd>) -> io::Result<()> {
        use std::os::unix::process::CommandExt;
        let kind = acc.kind();
        let mut cmd = Command::new(&self.cmd.exe);
        cmd.arg("worker").arg("--conn").arg(kind).arg("--session").arg(id.to_string()).args(&self.cmd.args);
        let fd: Option<OwnedFd> = match acc {
            Accepted::Unix(s) => Some(s.into()),
            Accepted::Tcp(s) => Some(s.into()),
            Accepted::Xen { domid, devid } => {
                cmd.arg("--domid").arg(domid.to_string()).arg("--devid").arg(devid.to_string());
                None
            }
        };
        let raw = fd.as_ref().map(|f| f.as_raw_fd());
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only async-signal-safe functions (dup2, fcntl, prctl).
        unsafe {
            cmd.pre_exec(move || {
                let Some(raw) = raw else {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    return Ok(());
                };
                if raw == WORKER_FD {
                    if libc::fcntl(raw, libc::F_SETFD, 0) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(raw, WORKER_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                // The worker ends if the backend dies.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(fd);
        tracing::debug!(session = id, pid = child.id(), "session worker started");
        self.children.lock().unwrap_or_else(|p| p.into_inner()).push((id, child, on_end));
        Ok(())
    }

    fn executor(&self) -> &str {
        &self.cmd.executor
    }

    fn shutdown(&self) {
        let mut children = std::mem::take(&mut *self.children.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, c, _) in &children {
            // SAFETY: sending a signal to our own child by pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && children.iter_mut().any(|(_, c, _)| matches!(c.try_wait(), Ok(None))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for (id, c, _) in &mut children {
            if matches!(c.try_wait(), Ok(None)) {
                tracing::warn!(session = *id, "session worker did not stop; killing it");
                let _ = c.kill();
                let _ = c.wait();
            }
        }
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
    Tcp(TcpListener),
    Xen(pvgpu_xen::XenStore),
}

fn bind(l: &Listen) -> Result<(Listener, Option<SocketAddr>), BackendError> {
    match l {
        Listen::Local(path) => {
            if path.exists() {
                if UnixStream::connect(path).is_ok() {
                    return Err(BackendError::InUse(path.clone()));
                }
                let _ = std::fs::remove_file(path);
            }
            let ul = UnixListener::bind(path).map_err(|source| BackendError::Listen { what: path.display().to_string(), source })?;
            ul.set_nonblocking(true).map_err(|source| BackendError::Listen { what: path.display().to_string(), source })?;
            Ok((Listener::Unix(ul), None))
        }
        Listen::Tcp(a) => {
            let tl = TcpListener::bind(a).map_err(|source| BackendError::Listen { what: a.clone(), source })?;
            tl.set_nonblocking(true).map_err(|source| BackendError::Listen { what: a.clone(), source })?;
            let addr = tl.local_addr().map_err(|source| BackendError::Listen { what: a.clone(), source })?;
            Ok((Listener::Tcp(tl), Some(addr)))
        }
        Listen::Xen => Ok((Listener::Xen(pvgpu_xen::XenStore::open()?), None)),
    }
}

fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, ms: u16) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
}

impl Backend {
    /// Starts a backend serving each session on a thread of this process.
    pub fn start_threads<E: Executor>(exec: Arc<E>, cfg: Config) -> Result<Backend, BackendError> {
        let spawner = Arc::new(ThreadSpawner { exec, cfg: cfg.session.clone(), threads: Mutex::new(Vec::new()) });
        Self::start(cfg, spawner)
    }

    /// Starts a backend serving each session in a worker process.
    pub fn start_processes(cfg: Config, worker: WorkerCommand) -> Result<Backend, BackendError> {
        let spawner = Arc::new(ProcessSpawner { cmd: worker, children: Mutex::new(Vec::new()) });
        Self::start(cfg, spawner)
    }

    fn start(cfg: Config, spawner: Arc<dyn Spawner>) -> Result<Backend, BackendError> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let mut bound = Vec::new();
        let mut tcp_addrs = Vec::new();
        let mut local_paths = Vec::new();
        for l in &cfg.listen {
            let (listener, addr) = bind(l)?;
            if let Some(a) = addr {
                tracing::info!(address = %a, "listening (tcp)");
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
            let (stop, stats, spawner) = (stop.clone(), stats.clone(), spawner.clone());
            let max = cfg.max_sessions;
            let max_data = cfg.session.max_data_area;
            let session = cfg.session.clone();
            let h = std::thread::Builder::new()
                .name("pvgpu-listener".into())
                .spawn(move || match listener {
                    Listener::Xen(xs) => xen_loop(xs, &session, max, stop, &stats, &*spawner),
                    other => accept_loop(other, max, max_data, stop, &stats, &*spawner),
                })
                .map_err(|source| BackendError::Listen { what: "listener thread".into(), source })?;
            listeners.push(h);
        }
        Ok(Backend { stop, stats, listeners, spawner, tcp_addrs, local_paths })
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

fn accept_loop(listener: Listener, max: usize, max_data: u64, stop: Arc<AtomicBool>, stats: &Arc<Stats>, spawner: &dyn Spawner) {
    let mut refused_log = LogLimiter::default();
    while !stop.load(Ordering::SeqCst) {
        let ready = match &listener {
            Listener::Unix(l) => wait_readable(l.as_fd(), 100),
            Listener::Tcp(l) => wait_readable(l.as_fd(), 100),
            Listener::Xen(_) => return,
        };
        spawner.reap(stats);
        if !ready {
            continue;
        }
        let acc = match &listener {
            Listener::Unix(l) => l.accept().map(|(s, _)| Accepted::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| Accepted::Tcp(s)),
            Listener::Xen(_) => return,
        };
        let acc = match acc {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let sock_blocking = match &acc {
            Accepted::Unix(s) => s.set_nonblocking(false),
            Accepted::Tcp(s) => s.set_nonblocking(false),
            Accepted::Xen { .. } => Ok(()),
        };
        if sock_blocking.is_err() {
            continue;
        }
        if stats.live() >= max {
            if refused_log.allow(0) {
                tracing::warn!(max, "session limit reached; refusing a connection");
            }
            if let Accepted::Unix(s) = &acc {
                local::refuse(s, Refusal::Busy, max_data);
            }
            continue;
        }
        let id = stats.total.fetch_add(1, Ordering::SeqCst) + 1;
        stats.live.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = spawner.spawn(acc, id, stats.clone(), stop.clone(), None) {
            tracing::error!(session = id, error = %e, "cannot start a session");
            stats.live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Serves Xen guests: rescans the vgpu devices whenever XenStore changes
/// under the backend's directory (and every second, to notice sessions that
/// ended), and starts a session for each frontend that is ready.
fn xen_loop(
    mut xs: pvgpu_xen::XenStore,
    cfg: &SessionConfig,
    max: usize,
    stop: Arc<AtomicBool>,
    stats: &Arc<Stats>,
    spawner: &dyn Spawner,
) {
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
    let mut log = LogLimiter::default();
    let mut last_scan = Instant::now() - Duration::from_secs(10);
    while !stop.load(Ordering::SeqCst) {
        spawner.reap(stats);
        let event = matches!(xs.read_watch(Some(Duration::from_millis(200))), Ok(Some(_)));
        if !event && last_scan.elapsed() < Duration::from_secs(1) {
            continue;
        }
        last_scan = Instant::now();
        let mut start = |domid: u16, devid: u32| -> bool {
            if stats.live() >= max {
                if log.allow(0) {
                    tracing::warn!(max, domid, devid, "session limit reached; refusing a Xen frontend");
                }
                return false;
            }
            let id = stats.total.fetch_add(1, Ordering::SeqCst) + 1;
            stats.live.fetch_add(1, Ordering::SeqCst);
            let set = active.clone();
            let on_end: OnEnd = Box::new(move || {
                set.lock().unwrap_or_else(|p| p.into_inner()).remove(&(domid, devid));
            });
            match spawner.spawn(Accepted::Xen { domid, devid }, id, stats.clone(), stop.clone(), Some(on_end)) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(session = id, error = %e, "cannot start a session");
                    stats.live.fetch_sub(1, Ordering::SeqCst);
                    false
                }
            }
        };
        let mut skip_log = LogLimiter::default();
        let mut skipped = |device: &str, e: pvgpu_xen::XenError| {
            if skip_log.allow(0) {
                tracing::warn!(device, error = %e, "skipping a vgpu device this pass");
            }
        };
        if let Err(e) = crate::xen::scan(&mut xs, cfg, spawner.executor(), &active, &mut start, &mut skipped) {
            if log.allow(0) {
                tracing::warn!(error = %e, "scanning vgpu devices failed");
            }
        }
    }
}
