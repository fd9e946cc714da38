//! How an admitted session runs, and how the supervisor ends it.
//!
//! [`ThreadSpawner`] serves each session on a thread of this process (tests,
//! the embedded backend of `pvgpu-bench`); [`ProcessSpawner`] starts a worker
//! process per session (the default of `pvgpu-backend`). The supervisor owns
//! a worker's lifetime: it watches the session's peer itself (a duplicate of
//! the socket, or the guest's XenStore state) and, once the peer is gone,
//! gives the worker [`AdmissionConfig::end_grace`](crate::config::AdmissionConfig)
//! to exit before it kills it, so the GPU is freed even when the worker is
//! stuck in the driver (a kernel that never ends makes `cuCtxDestroy` wait
//! for ever). Threads cannot be killed: thread isolation is for tests.

use crate::admission::Slot;
use crate::checkpoints::Desk;
use crate::config::{SessionConfig, WorkerCommand};
use crate::exec::Executor;
use crate::handover::Handover;
use crate::ipc::{Broker, Registry};
use crate::ledger::Seat;
use crate::session_loop::{Report, open_connection, serve_opened};
use crate::worker_start::{Fork, broker_pair, forker, hung_up, place_fds};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// File descriptor a worker finds its connection on.
pub const WORKER_FD: i32 = 3;
/// File descriptor a worker reports how its session ended on.
pub const REPORT_FD: i32 = 4;
/// File descriptor a local session's worker finds the frontend's memfd on.
pub const MEMFD_FD: i32 = 5;
/// File descriptor a worker finds its peer's memory ledger on.
pub const LEDGER_FD: i32 = 6;
/// File descriptor a worker reaches the supervisor's handle registry on
/// ([`crate::ipc`]).
pub const BROKER_FD: i32 = 7;
/// File descriptor a worker finds its session's meter on
/// ([`crate::meter`]).
pub const METER_FD: i32 = 8;
/// The line a worker reports once its connection is set up.
pub const REPORT_READY: &str = "ready";

/// Runs when a session has ended (its thread returned or its worker exited).
pub type OnEnd = Box<dyn FnOnce() + Send>;

/// An admitted session, ready to run.
pub struct Start {
    /// Its connection.
    pub handover: Handover,
    /// Its number.
    pub id: u64,
    /// Its slot, held until it has ended.
    pub slot: Slot,
    /// Its seat in its peer's memory ledger, held until it has ended.
    pub seat: Seat,
    /// What to do once its connection is set up (a Xen device is then
    /// marked `Connected`).
    pub on_ready: Option<OnEnd>,
    /// What to do once it has ended.
    pub on_end: Option<OnEnd>,
    /// Where it counts what it does.
    pub meter: Option<Arc<crate::meter::Meter>>,
    /// Whom it belongs to when not its connection's peer: a tenant
    /// (`tenant:NAME`). Its snapshots and interprocess handles are scoped
    /// to it.
    pub scope: Option<String>,
    /// The backend's devices it may use, in the order it numbers them
    /// (`None`: all); see [`crate::devices`].
    pub gpus: Option<Vec<usize>>,
}

/// How sessions get run once admitted.
pub trait Spawner: Send + Sync {
    /// Runs a session.
    fn spawn(&self, s: Start, stop: Arc<AtomicBool>) -> io::Result<()>;
    /// Name of the executor sessions run on.
    fn executor(&self) -> &str;
    /// Each of that executor's devices, by the backend's index: its UUID
    /// as the executor names it.
    fn device_uuids(&self) -> Vec<[u8; 16]>;
    /// Collects sessions that ended, and ends those whose peer is gone.
    fn tend(&self) {}
    /// Ends session `id` (its guest went away): it has the grace period to
    /// exit, then is killed.
    fn end(&self, _id: u64) {}
    /// Checkpoint orders and parked snapshots of these sessions.
    fn desk(&self) -> &Arc<Desk>;
    /// Tells session `id` a checkpoint is ordered; whether it runs.
    fn nudge(&self, id: u64) -> bool;
    /// Prepares a worker from the skeleton `meta` in `file`, for its
    /// session's next connection once its snapshot is parked
    /// ([`crate::prepared_workers`]); waits up to `wait`. Why not, where
    /// not.
    fn prepare(&self, _file: &File, _meta: &pvgpu_ctl::snapshot::Meta, _wait: Duration) -> Result<(), String> {
        Err("this backend serves sessions on threads of its own process (--isolation thread): there is no worker to prepare".into())
    }
    /// Session `token`'s snapshot, of `state`, was parked.
    fn parked(&self, _token: &[u8; 16], _state: &pvgpu_ctl::snapshot::State) {}
    /// Ends every session and waits (at most the grace period for each).
    fn shutdown(&self) {}
}

/// Sessions on threads of this process.
pub struct ThreadSpawner<E: Executor> {
    exec: Arc<E>,
    /// Handles the sessions exported to other processes of their guest.
    ipc: Arc<Registry>,
    desk: Arc<Desk>,
    cfg: SessionConfig,
    grace: Duration,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Each running session's stop flag, by session number.
    stops: Arc<Mutex<std::collections::HashMap<u64, Arc<AtomicBool>>>>,
    /// Each running session's checkpoint flag, by session number.
    nudges: Arc<Mutex<std::collections::HashMap<u64, Arc<AtomicBool>>>>,
}

impl<E: Executor> ThreadSpawner<E> {
    /// Sessions on `exec`.
    pub fn new(exec: Arc<E>, cfg: SessionConfig, grace: Duration) -> Self {
        ThreadSpawner {
            exec,
            ipc: Arc::default(),
            desk: Arc::default(),
            cfg,
            grace,
            threads: Mutex::new(Vec::new()),
            stops: Default::default(),
            nudges: Default::default(),
        }
    }
}

impl<E: Executor> Spawner for ThreadSpawner<E> {
    fn spawn(&self, s: Start, stop: Arc<AtomicBool>) -> io::Result<()> {
        let (exec, mut cfg) = (self.exec.clone(), self.cfg.clone());
        let Start { handover, id, slot, seat, on_ready, on_end, meter, scope: owner, gpus } = s;
        cfg.limits.gpus = gpus;
        cfg.limits.peer_ledger = Some(seat.view());
        cfg.limits.meter = meter.map(|m| m.view());
        let scope: Arc<str> = owner.clone().unwrap_or_else(|| handover.owner().0).into();
        cfg.limits.ipc = Some(Arc::new(Broker::Direct { registry: self.ipc.clone(), scope, session: id, desk: self.desk.clone() }));
        let nudge = Arc::new(AtomicBool::new(false));
        cfg.limits.checkpoint = Some(nudge.clone());
        self.nudges.lock().unwrap_or_else(|p| p.into_inner()).insert(id, nudge);
        let nudges = self.nudges.clone();
        // The session's own flag: set by `end`, and by `shutdown` for all.
        let mine = Arc::new(AtomicBool::new(stop.load(Ordering::SeqCst)));
        self.stops.lock().unwrap_or_else(|p| p.into_inner()).insert(id, mine.clone());
        let stops = self.stops.clone();
        let h = std::thread::Builder::new().name(format!("pvgpu-session-{id}")).spawn(move || {
            let t = Instant::now();
            let ended = match open_connection(handover, &cfg, id) {
                Ok(opened) => {
                    let opened = match owner {
                        Some(o) => opened.owned_by(crate::image_cache::Owner(o)),
                        None => opened,
                    };
                    if let Some(f) = on_ready {
                        f();
                    }
                    serve_opened(exec, opened, &cfg, id, &mine, None)
                }
                Err(ended) => ended,
            };
            stops.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            nudges.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            ended.log(id, t.elapsed().as_secs_f64());
            drop((slot, seat));
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

    fn device_uuids(&self) -> Vec<[u8; 16]> {
        self.exec.devices().iter().map(|d| d.uuid).collect()
    }

    fn desk(&self) -> &Arc<Desk> {
        &self.desk
    }

    fn nudge(&self, id: u64) -> bool {
        let nudges = self.nudges.lock().unwrap_or_else(|p| p.into_inner());
        nudges.get(&id).map(|f| f.store(true, Ordering::SeqCst)).is_some()
    }

    fn end(&self, id: u64) {
        // A thread cannot be killed: the session ends at its next request
        // boundary or wait.
        if let Some(f) = self.stops.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            f.store(true, Ordering::SeqCst);
        }
    }

    fn shutdown(&self) {
        for f in self.stops.lock().unwrap_or_else(|p| p.into_inner()).values() {
            f.store(true, Ordering::SeqCst);
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let deadline = Instant::now() + self.grace;
        for t in threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::warn!("a session thread did not end (stuck in the driver?); leaving it behind");
            }
        }
    }
}

/// A worker process and what the supervisor knows of its session.
struct Worker {
    id: u64,
    child: Child,
    _slot: Slot,
    /// Dropped once the worker has exited: what it held leaves its peer's
    /// total then, however it ended.
    _seat: Seat,
    on_end: Option<OnEnd>,
    /// The session's socket (a duplicate), watched for the peer leaving.
    peer: Option<OwnedFd>,
    /// Read end of the worker's reports: `ready` once its connection is
    /// set up, then how its session ended.
    report: Option<File>,
    /// What the worker reported so far.
    reported: String,
    on_ready: Option<OnEnd>,
    /// When the peer was found gone (or the session was asked to end).
    ending_since: Option<Instant>,
    killed: bool,
    started: Instant,
}

/// Sessions in worker processes.
pub struct ProcessSpawner {
    cmd: WorkerCommand,
    /// Workers started ahead of their sessions.
    pool: crate::worker_pool::Pool,
    /// Handles the sessions exported to other processes of their guest.
    ipc: Arc<Registry>,
    desk: Arc<Desk>,
    grace: Duration,
    workers: Mutex<Vec<Worker>>,
    forker: Mutex<std::sync::mpsc::Sender<Fork>>,
    /// Workers prepared for sessions on their way here.
    prepared: crate::prepared_workers::Prepared,
}

impl ProcessSpawner {
    /// Workers started with `cmd`, `cmd.pool` of them ahead of their
    /// sessions; a worker whose peer is gone is killed after `grace`.
    pub fn new(cmd: WorkerCommand, grace: Duration) -> Self {
        let s = ProcessSpawner {
            pool: crate::worker_pool::Pool::new(cmd.pool),
            cmd,
            ipc: Arc::default(),
            desk: Arc::default(),
            grace,
            workers: Mutex::new(Vec::new()),
            forker: Mutex::new(forker()),
            prepared: Default::default(),
        };
        s.refill_pool();
        s
    }

    /// Runs `cmd` from the forker thread.
    fn fork(&self, cmd: Command) -> io::Result<Child> {
        let (tx, rx) = std::sync::mpsc::channel();
        let gone = || io::Error::other("the thread that starts workers is gone");
        self.forker.lock().unwrap_or_else(|p| p.into_inner()).send((cmd, tx)).map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }

    /// Starts session `id`'s worker with `args` and descriptors `fds`: an
    /// idle one if the pool has one ready, else a new process.
    /// A connection of `peer` goes to the worker prepared for its parked
    /// session, if there is one (not a Xen guest's, whose worker opens
    /// the guest's grants before it is confined, and a prepared one is).
    fn start_worker(
        &self,
        id: u64,
        peer: Option<&str>,
        args: &[std::ffi::OsString],
        fds: Vec<(std::os::fd::RawFd, i32)>,
    ) -> io::Result<Child> {
        if let Some(idle) = peer.and_then(|p| self.prepared.take_for(p)) {
            match idle.assign(args, &fds) {
                Ok(child) => {
                    tracing::info!(session = id, pid = child.id(), "session handed to the worker prepared for it");
                    return Ok(child);
                }
                Err(e) => tracing::warn!(session = id, error = %e, "a prepared worker could not take its session; starting one for it"),
            }
        }
        if let Some(idle) = self.pool.take() {
            let handed = idle.assign(args, &fds);
            self.refill_pool();
            match handed {
                Ok(child) => {
                    tracing::debug!(session = id, pid = child.id(), "session handed to an idle worker");
                    return Ok(child);
                }
                Err(e) => tracing::warn!(session = id, error = %e, "an idle worker could not take a session; starting one for it"),
            }
        }
        let mut cmd = Command::new(&self.cmd.exe);
        cmd.args(args);
        place_fds(&mut cmd, fds);
        self.fork(cmd)
    }

    /// Starts idle workers until the pool is full.
    fn refill_pool(&self) {
        self.pool.refill(|end| self.start_idle(end));
    }

    /// Starts an idle worker on its end of a pool socket.
    fn start_idle(&self, end: OwnedFd) -> io::Result<Child> {
        let mut cmd = Command::new(&self.cmd.exe);
        cmd.arg("pool-worker").args(&self.cmd.args);
        place_fds(&mut cmd, vec![(end.as_raw_fd(), crate::worker_pool::POOL_FD)]);
        let child = self.fork(cmd);
        drop(end);
        child
    }

    /// Reads what the worker reported since the last call (without
    /// blocking: the pipe is non-blocking), at most 4 KiB in all.
    fn read_report(w: &mut Worker) {
        let Some(r) = &mut w.report else { return };
        let mut buf = [0u8; 512];
        while w.reported.len() < 4096 {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => w.reported.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    }

    fn finish(w: &mut Worker, status: std::process::ExitStatus) {
        Self::read_report(w);
        let report = w.reported.lines().rfind(|l| *l != REPORT_READY).unwrap_or("").to_string();
        let report = if w.killed {
            Report::Killed(format!("still running {} s after its peer left", w.ending_since.map_or(0, |t| t.elapsed().as_secs())))
        } else if report.trim().is_empty() {
            Report::Broken(format!("worker exited ({status}) without a report"))
        } else {
            Report::parse(report.trim())
        };
        report.log(w.id, w.started.elapsed().as_secs_f64());
    }
}

impl Spawner for ProcessSpawner {
    fn spawn(&self, s: Start, _stop: Arc<AtomicBool>) -> io::Result<()> {
        let Start { handover, id, slot, seat, on_ready, on_end, meter, scope: owner, gpus } = s;
        let scope: Arc<str> = owner.clone().unwrap_or_else(|| handover.owner().0).into();
        let routed = handover.transport() != crate::handover::Transport::Xen;
        // The worker's arguments, for a process started for the session or
        // handed to an idle one.
        let mut cmd = crate::worker_pool::WorkerArgs::default();
        cmd.arg("worker").arg("--conn").arg(handover.transport().name()).arg("--session").arg(id.to_string()).args(&self.cmd.args);
        if let Some(g) = &gpus {
            cmd.arg("--gpus").arg(crate::devices::list_arg(g));
        }
        // Descriptors the worker finds at fixed numbers.
        let mut fds: Vec<(OwnedFd, i32)> = Vec::new();
        match handover {
            Handover::Local { sock, hello, .. } => {
                let g = hello.geometry;
                cmd.arg("--local-hello").arg(format!("{},{},{},{}", g.req_size, g.rsp_size, g.data_size, hello.region_addr));
                fds.push((sock.into(), WORKER_FD));
                fds.push((hello.memfd, MEMFD_FD));
            }
            Handover::Tcp(s) => fds.push((s.into(), WORKER_FD)),
            Handover::Relayed { sock, peer, .. } => {
                cmd.arg("--peer").arg(peer);
                fds.push((sock.into(), WORKER_FD));
            }
            Handover::Xen { domid, devid, ring } => {
                cmd.arg("--domid").arg(domid.to_string()).arg("--devid").arg(devid.to_string()).arg("--xen-ring").arg(ring.to_arg());
            }
        }
        let peer = fds.iter().find(|(_, n)| *n == WORKER_FD).map(|(f, _)| f.try_clone()).transpose()?;
        cmd.arg("--ledger-seat").arg(seat.index().to_string());
        fds.push((seat.fd().try_clone_to_owned()?, LEDGER_FD));
        if let Some(o) = &owner {
            cmd.arg("--scope").arg(o);
        }
        if let Some(m) = &meter {
            cmd.arg("--meter");
            fds.push((m.fd().try_clone_to_owned()?, METER_FD));
        }
        let (broker, broker_worker) = broker_pair()?;
        cmd.arg("--ipc");
        fds.push((broker_worker, BROKER_FD));
        let (report_rd, report_wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        cmd.arg("--report-fd").arg(REPORT_FD.to_string());
        fds.push((report_wr, REPORT_FD));
        let placed: Vec<(std::os::fd::RawFd, i32)> = fds.iter().map(|(f, n)| (f.as_raw_fd(), *n)).collect();
        let child = self.start_worker(id, routed.then_some(&*scope), &cmd.0, placed)?;
        drop(fds);
        let report = File::from(report_rd);
        // Read without blocking when the worker is reaped (it has exited,
        // so what it wrote is all there is).
        nix::fcntl::fcntl(&report, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
        tracing::debug!(session = id, pid = child.id(), "session worker started");
        let (registry, desk) = (self.ipc.clone(), self.desk.clone());
        // Serves the worker's exports, imports and checkpoint orders until
        // it exits.
        let served = std::thread::Builder::new()
            .name(format!("pvgpu-ipc-{id}"))
            .spawn(move || crate::ipc::serve_worker(&registry, &desk, &scope, id, &broker));
        if let Err(e) = served {
            // The session goes on; its interprocess handles fail.
            tracing::warn!(session = id, error = %e, "cannot start the session's handle broker");
        }
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).push(Worker {
            id,
            child,
            _slot: slot,
            _seat: seat,
            on_end,
            peer,
            report: Some(report),
            reported: String::new(),
            on_ready,
            ending_since: None,
            killed: false,
            started: Instant::now(),
        });
        // The worker served as soon as it had its connection: a checkpoint
        // ordered before it was listed here (`nudge` found nothing) is
        // signalled now.
        if self.desk.has_order(id) {
            self.nudge(id);
        }
        Ok(())
    }

    fn executor(&self) -> &str {
        &self.cmd.executor
    }

    fn device_uuids(&self) -> Vec<[u8; 16]> {
        self.cmd.devices.clone()
    }

    fn prepare(&self, file: &File, meta: &pvgpu_ctl::snapshot::Meta, wait: Duration) -> Result<(), String> {
        if !self.prepared.has_room() {
            return Err(format!("{} workers are prepared already", crate::prepared_workers::MAX_PREPARED));
        }
        let idle = match self.pool.take() {
            Some(idle) => {
                self.refill_pool();
                idle
            }
            None => crate::worker_pool::Pool::start_one(|end| self.start_idle(end)).map_err(|e| format!("no worker started: {e}"))?,
        };
        self.prepared.prepare(idle, file, meta, wait)
    }

    fn parked(&self, token: &[u8; 16], state: &pvgpu_ctl::snapshot::State) {
        self.prepared.parked(token, state);
    }

    fn tend(&self) {
        self.refill_pool();
        self.prepared.expire();
        let mut ended = Vec::new();
        let mut ready = Vec::new();
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers.retain_mut(|w| match w.child.try_wait() {
            Ok(Some(status)) => {
                Self::finish(w, status);
                ended.extend(w.on_end.take());
                false
            }
            _ => {
                if w.on_ready.is_some() {
                    Self::read_report(w);
                    if w.reported.lines().any(|l| l == REPORT_READY) {
                        ready.extend(w.on_ready.take());
                    }
                }
                if w.ending_since.is_none() && w.peer.as_ref().is_some_and(hung_up) {
                    tracing::debug!(session = w.id, "peer left; the worker has the grace period to exit");
                    w.ending_since = Some(Instant::now());
                }
                if !w.killed && w.ending_since.is_some_and(|t| t.elapsed() >= self.grace) {
                    let _ = w.child.kill();
                    w.killed = true;
                }
                true
            }
        });
        drop(workers);
        for f in ready {
            f();
        }
        // Slots were given back as the workers dropped; now the rest.
        for f in ended {
            f();
        }
    }

    fn desk(&self) -> &Arc<Desk> {
        &self.desk
    }

    fn nudge(&self, id: u64) -> bool {
        let workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(w) = workers.iter().find(|w| w.id == id && w.ending_since.is_none()) else { return false };
        // SAFETY: signalling our own child by pid; it has not been reaped
        // (it is still in the list), so the pid is its.
        unsafe { libc::kill(w.child.id() as i32, libc::SIGUSR1) == 0 }
    }

    fn end(&self, id: u64) {
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        for w in workers.iter_mut().filter(|w| w.id == id && w.ending_since.is_none()) {
            // SAFETY: signalling our own child by pid; it has not been
            // reaped (it is still in the list), so the pid is its.
            unsafe { libc::kill(w.child.id() as i32, libc::SIGTERM) };
            w.ending_since = Some(Instant::now());
        }
    }

    fn shutdown(&self) {
        self.pool.shutdown();
        self.prepared.end_all();
        let mut workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in &workers {
            // SAFETY: signalling our own child by pid (not yet reaped).
            unsafe { libc::kill(w.child.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline && workers.iter_mut().any(|w| matches!(w.child.try_wait(), Ok(None))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for w in &mut workers {
            if matches!(w.child.try_wait(), Ok(None)) {
                tracing::warn!(session = w.id, "session worker did not stop; killing it");
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
        }
    }
}
