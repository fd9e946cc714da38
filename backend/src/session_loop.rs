//! A session's serving loop: set up the connection an accepted peer
//! brings (local handshake, TCP socket, Xen grants), then receive, process,
//! release and reply until the session ends. Runs on a thread of the
//! supervisor ([`crate::Isolation::Thread`]) or in a worker process.

use crate::config::SessionConfig;
use crate::conn::{Conn, ConnError, RingConn, TcpConn};
use crate::exec::Executor;
use crate::handover::Handover;
use crate::image_cache::{ImageCache, Owner};
use crate::session::{Outcome, Session};
use pvgpu_ring::local;
use pvgpu_ring::proto::{HEADER_LEN, Header};
use pvgpu_ring::report::Chain;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A connection set up and ready to serve.
pub struct Opened {
    conn: Box<dyn Conn>,
    xen_hold: Option<crate::xen::XenSession>,
    owner: Owner,
    kind: &'static str,
}

/// Sets up the connection an accepted peer brings: the local handshake
/// (the frontend's memory mapped), the TCP socket, or the Xen grants. Runs
/// before the executor starts, so a peer that cannot open a connection
/// never costs a GPU context.
pub fn open_connection(handover: Handover, cfg: &SessionConfig, id: u64) -> Result<Opened, Ended> {
    let kind = handover.transport().name();
    let owner = handover.owner();
    let mut xen_hold = None;
    let conn: Box<dyn Conn> = match handover {
        Handover::Local { sock, hello, .. } => {
            let side = match local::finish_handshake(sock, hello, cfg.max_data_area, cfg.same_address) {
                Ok(side) => side,
                Err(e) => return Err(Ended::Broken(format!("handshake failed: {}", Chain(&e)))),
            };
            tracing::debug!(session = id, same_address = side.same_address, "shared memory mapped");
            match RingConn::new(side.region, &side.geometry, Box::new(side.notifier), cfg.spin) {
                Ok(c) => Box::new(c.with_idle_timeout(cfg.idle_timeout)),
                Err(e) => return Err(Ended::Broken(format!("ring setup failed: {}", Chain(&e)))),
            }
        }
        Handover::Tcp(s) => match TcpConn::new(s, cfg.tcp_idle_timeout) {
            Ok(c) => Box::new(c),
            Err(e) => return Err(Ended::Broken(format!("socket setup failed: {}", Chain(&e)))),
        },
        Handover::Relayed { sock, .. } => match TcpConn::relayed(sock, cfg.tcp_idle_timeout) {
            Ok(c) => Box::new(c),
            Err(e) => return Err(Ended::Broken(format!("socket setup failed: {}", Chain(&e)))),
        },
        Handover::Xen { domid, devid, ring } => match crate::xen::open_session(domid, &ring, cfg) {
            Ok((c, hold)) => {
                xen_hold = Some(hold);
                Box::new(c.with_idle_timeout(cfg.idle_timeout))
            }
            Err(e) => return Err(Ended::Broken(format!("Xen handshake with domain {domid} device {devid} failed: {}", Chain(&e)))),
        },
    };
    Ok(Opened { conn, xen_hold, owner, kind })
}

/// Serves an opened connection with `exec` until the session ends.
pub fn serve_opened<E: Executor>(exec: Arc<E>, opened: Opened, cfg: &SessionConfig, id: u64, stop: &AtomicBool) -> Ended {
    let Opened { mut conn, xen_hold, owner, kind } = opened;
    tracing::info!(session = id, transport = kind, executor = exec.kind(), "session started");
    if let Some(cpus) = &cfg.cpus {
        match crate::affinity::pin_current_thread(cpus) {
            Ok(()) => conn.cpus_changed(),
            Err(e) => tracing::warn!(session = id, ?cpus, error = %e, "cannot pin the session to its CPUs; it runs unpinned"),
        }
    }
    let ended = serve(exec, &mut *conn, id, owner, cfg, stop);
    // The ring and its mappings go first, then the device's XenStore side.
    drop(conn);
    drop(xen_hold);
    ended
}

/// Logs how a session ended; a peer that broke the protocol is reported
/// within the backend's limit for peer-triggered lines.
pub fn log_end(id: u64, ended: &Ended, secs: f64) {
    match ended {
        Ended::Broken(why) => {
            if crate::log_limit::peer_triggered() {
                tracing::warn!(session = id, reason = %why, "session ended: frontend broke the protocol");
            }
        }
        Ended::Killed(why) => tracing::warn!(session = id, reason = %why, secs, "session ended: worker killed"),
        other => tracing::info!(session = id, how = %other, secs, "session ended"),
    }
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The frontend said goodbye.
    Goodbye,
    /// The frontend went away without saying goodbye.
    PeerGone,
    /// The frontend sent nothing for the idle timeout.
    Idle,
    /// The backend is shutting down.
    Shutdown,
    /// The frontend broke the protocol; the reason is logged.
    Broken(String),
    /// The supervisor killed the session's worker (why).
    Killed(String),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Goodbye => f.write_str("goodbye"),
            Ended::PeerGone => f.write_str("peer gone"),
            Ended::Idle => f.write_str("idle timeout"),
            Ended::Shutdown => f.write_str("shutdown"),
            Ended::Broken(why) => write!(f, "broken: {why}"),
            Ended::Killed(why) => write!(f, "killed: {why}"),
        }
    }
}

impl Ended {
    /// Parses what [`Display`](std::fmt::Display) wrote (a worker's report
    /// to the supervisor).
    pub fn parse(s: &str) -> Ended {
        match s {
            "goodbye" => Ended::Goodbye,
            "peer gone" => Ended::PeerGone,
            "idle timeout" => Ended::Idle,
            "shutdown" => Ended::Shutdown,
            _ => match s.split_once(": ") {
                Some(("killed", why)) => Ended::Killed(why.into()),
                Some(("broken", why)) => Ended::Broken(why.into()),
                _ => Ended::Broken(s.into()),
            },
        }
    }
}

/// Serves one session until it ends. Everything the session made is freed
/// before this returns.
pub fn serve<E: Executor>(exec: Arc<E>, conn: &mut dyn Conn, id: u64, owner: Owner, cfg: &SessionConfig, stop: &AtomicBool) -> Ended {
    let mut session = Session::new(exec, id, cfg.limits.clone());
    if let Some(dir) = &cfg.image_cache {
        match ImageCache::open(dir, cfg.image_cache_max) {
            Ok(cache) => session = session.with_image_cache(Arc::new(cache), owner),
            Err(e) => tracing::warn!(session = id, error = %Chain(&e), "module images are not cached"),
        }
    }
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut out = Vec::with_capacity(64 * 1024);
    let mut printed = Vec::new();
    loop {
        // A stopping backend ends the session at the next request boundary,
        // even while the frontend keeps requests coming (the connection only
        // looks at `stop` while it waits for one).
        if stop.load(Ordering::Relaxed) {
            return Ended::Shutdown;
        }
        match conn.recv(&mut buf, stop) {
            Ok(()) => {}
            Err(ConnError::PeerGone) => return Ended::PeerGone,
            Err(ConnError::Shutdown) => return Ended::Shutdown,
            Err(ConnError::Idle) => return Ended::Idle,
            Err(e) => return Ended::Broken(Chain(&e).to_string()),
        }
        let h = match Header::parse(&buf) {
            Ok(h) => h,
            Err(e) => return Ended::Broken(format!("malformed header: {}", Chain(&e))),
        };
        let payload = &buf[HEADER_LEN.min(buf.len())..];
        let outcome = session.process(&h, payload, conn.area(), &mut out);
        if let Err(e) = conn.release() {
            return Ended::Broken(Chain(&e).to_string());
        }
        let (status, last) = match outcome {
            Ok(Outcome::Quiet) => continue,
            Ok(Outcome::Reply(s)) => (s, false),
            Ok(Outcome::Goodbye(s)) => (s, true),
            Err(e) => return Ended::Broken(Chain(&e).to_string()),
        };
        if h.wants_reply() {
            // What kernels printed goes first, as it appears before the
            // synchronising call returns on a GPU. Calls that cannot make
            // the driver print skip the look (a flush and a system call).
            if pvgpu_ring::proto::Opcode::try_from(h.opcode.get()).map_or(true, |op| op.may_print()) {
                session.take_output(&mut printed);
            }
            if !printed.is_empty() {
                let r = conn.send(&Header::output(printed.len()), &printed, stop);
                printed.clear();
                match r {
                    Ok(()) => {}
                    Err(ConnError::PeerGone) => return Ended::PeerGone,
                    Err(ConnError::Shutdown) => return Ended::Shutdown,
                    Err(e) => return Ended::Broken(Chain(&e).to_string()),
                }
            }
            let rh = h.reply(status, out.len());
            match conn.send(&rh, &out, stop) {
                Ok(()) => {}
                Err(ConnError::PeerGone) => return Ended::PeerGone,
                Err(ConnError::Shutdown) => return Ended::Shutdown,
                Err(e) => return Ended::Broken(Chain(&e).to_string()),
            }
        }
        if last {
            return Ended::Goodbye;
        }
    }
}
