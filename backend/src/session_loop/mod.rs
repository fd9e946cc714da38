//! A session's serving loop: set up the connection an accepted peer
//! brings (local handshake, TCP socket, Xen grants), then receive, process,
//! release and reply until the session ends. Runs on a thread of the
//! supervisor ([`crate::Isolation::Thread`]) or in a worker process.

mod detach;
mod ended;
mod host_calls;

pub use ended::{Broken, Ended, Report};

use crate::config::{SessionConfig, SessionLimits};
use crate::conn::{Conn, RingConn, TcpConn};
use crate::exec::Executor;
use crate::handover::Handover;
use crate::image_cache::{ImageCache, Owner};
use crate::session::{Outcome, Premade, Session};
use pvgpu_ring::local;
use pvgpu_ring::proto::{HEADER_LEN, Header};
use pvgpu_ring::report::Chain;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
            let side = local::finish_handshake(sock, hello, cfg.max_data_area, cfg.same_address).map_err(Broken::Handshake)?;
            tracing::debug!(session = id, same_address = side.same_address, "shared memory mapped");
            let c = RingConn::new(side.region, &side.geometry, Box::new(side.notifier), cfg.spin).map_err(Broken::Ring)?;
            Box::new(c.with_idle_timeout(cfg.idle_timeout).with_leave_hint(cfg.limits.checkpoint.clone()))
        }
        Handover::Tcp(s) => {
            let c = TcpConn::new(s, cfg.tcp_idle_timeout, cfg.spin).map_err(Broken::Socket)?;
            Box::new(c.with_leave_hint(cfg.limits.checkpoint.clone()))
        }
        Handover::Relayed { sock, .. } => {
            let c = TcpConn::relayed(sock, cfg.tcp_idle_timeout, cfg.spin).map_err(Broken::Socket)?;
            Box::new(c.with_leave_hint(cfg.limits.checkpoint.clone()))
        }
        Handover::Xen { domid, devid, ring } => {
            let (c, hold) = crate::xen::open_session(domid, &ring, cfg).map_err(|source| Broken::Xen { domid, devid, source })?;
            xen_hold = Some(hold);
            Box::new(c.with_idle_timeout(cfg.idle_timeout).with_leave_hint(cfg.limits.checkpoint.clone()))
        }
    };
    Ok(Opened { conn, xen_hold, owner, kind })
}

impl Opened {
    /// The session belongs to `owner` rather than its connection's peer
    /// (a tenant's session): its snapshots, interprocess handles and cached
    /// images are scoped to it.
    pub fn owned_by(mut self, owner: Owner) -> Opened {
        self.owner = owner;
        self
    }
}

/// Serves an opened connection with `exec` until the session ends.
/// `premade`: the session made ahead from the skeleton of a session this
/// connection may take back ([`crate::session::Premade`]).
pub fn serve_opened<E: Executor>(
    exec: Arc<E>,
    opened: Opened,
    cfg: &SessionConfig,
    id: u64,
    stop: &AtomicBool,
    premade: Option<Premade<E>>,
) -> Ended {
    let Opened { mut conn, xen_hold, owner, kind } = opened;
    tracing::info!(session = id, transport = kind, executor = exec.kind(), "session started");
    if let Some(cpus) = &cfg.cpus {
        match crate::affinity::pin_current_thread(cpus) {
            Ok(()) => conn.cpus_changed(),
            Err(e) => tracing::warn!(session = id, ?cpus, error = %e, "cannot pin the session to its CPUs; it runs unpinned"),
        }
    }
    let ended = serve(exec, &mut *conn, id, owner, cfg, stop, premade);
    // The ring and its mappings go first, then the device's XenStore side.
    drop(conn);
    drop(xen_hold);
    ended
}

/// Serves one session until it ends. Everything the session made is freed
/// before this returns.
pub fn serve<E: Executor>(
    exec: Arc<E>,
    conn: &mut dyn Conn,
    id: u64,
    owner: Owner,
    cfg: &SessionConfig,
    stop: &AtomicBool,
    premade: Option<Premade<E>>,
) -> Ended {
    let peer = owner.0.clone();
    let mut session = Session::new(exec, id, cfg.limits.clone());
    if let Some(p) = premade {
        session.set_premade(p);
    }
    session.set_max_reply(conn.max_reply());
    if let Some(st) = conn.staging() {
        // SAFETY: the connection owns the staging and outlives the session
        // (dropped when this function returns).
        unsafe { session.set_staging(st) };
    }
    if let Some(dir) = &cfg.image_cache {
        match ImageCache::open(dir, cfg.image_cache_max) {
            Ok(cache) => session = session.with_image_cache(Arc::new(cache), owner),
            Err(e) => tracing::warn!(session = id, error = %Chain(&e), "module images are not cached"),
        }
    }
    let mut io = Buffers::default();
    loop {
        // A stopping backend ends the session at the next request boundary,
        // even while the frontend keeps requests coming (the connection only
        // looks at `stop` while it waits for one).
        if stop.load(Ordering::Relaxed) {
            return Ended::Shutdown;
        }
        let served = serve_one(&mut session, conn, &mut io, stop, &cfg.limits, &peer);
        session.leave_turn();
        if let Err(ended) = served {
            if matches!(ended, Ended::Detached { in_place: true }) {
                let_go_later(stop);
            }
            return ended;
        }
    }
}

/// How long a session that left with its device memory handed over in
/// place keeps its context here before it lets go of it (while the
/// backend is not stopping).
const LET_GO_AFTER: Duration = Duration::from_millis(400);

/// Waits [`LET_GO_AFTER`] (less if the backend stops). A context's
/// teardown holds the driver: done at once, it ran while the restoring
/// backend mapped the memory handed over, whose mapping then took 30-48 ms
/// of the program's pause instead of 1-7 ms (PyTorch trainings on the
/// H200, 2026-11-29). The memory itself stays on the GPU either way; a
/// session whose memory was copied lets go at once, as the restoring
/// backend needs the room.
fn let_go_later(stop: &AtomicBool) {
    let until = std::time::Instant::now() + LET_GO_AFTER;
    while std::time::Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The buffers a session reuses from request to request.
#[derive(Default)]
struct Buffers {
    /// The request, header and payload.
    req: Vec<u8>,
    /// The reply's payload.
    out: Vec<u8>,
    /// Kernel output to send before the reply.
    printed: crate::exec::Printed,
    /// The program's answers to host calls.
    answers: host_calls::Buffers,
}

/// Receives, processes, releases and answers one request; `Err` ends the
/// session (a goodbye included).
fn serve_one<E: Executor>(
    session: &mut Session<E>,
    conn: &mut dyn Conn,
    b: &mut Buffers,
    stop: &AtomicBool,
    limits: &SessionLimits,
    peer: &str,
) -> Result<(), Ended> {
    conn.recv(&mut b.req, stop)?;
    let h = Header::parse(conn.received(&b.req)).map_err(Broken::Header)?;
    // Service time runs from here to the reply's send, taken for one
    // waited call in a few (crate::meter).
    let arrived = limits.meter.as_ref().and_then(|m| {
        m.command();
        (h.wants_reply() && m.time_this()).then(std::time::Instant::now)
    });
    let (resume, host_call) = (pvgpu_ring::proto::Opcode::Resume as u16, pvgpu_ring::proto::Opcode::HostCallWait as u16);
    // These receive more before they are done: the request must not stay
    // where the next one is read, and is taken from `b.req` after.
    let unstaged = [resume, host_call].contains(&h.opcode.get());
    if unstaged {
        conn.unstage(&mut b.req);
    }
    if !session.greeted() && h.opcode.get() != resume {
        // Not the session made ahead here: it would only hold the GPU.
        session.drop_premade();
    }
    if !session.greeted() && h.opcode.get() == resume {
        let payload = &b.req[HEADER_LEN.min(b.req.len())..];
        let r = detach::resume(session, conn, limits, &h, payload, stop);
        conn.release()?;
        return r;
    }
    if h.opcode.get() == host_call {
        host_calls::serve(session, conn, &mut b.answers, stop)?;
    }
    let req = if unstaged { &b.req[..] } else { conn.received(&b.req) };
    let payload = &req[HEADER_LEN.min(req.len())..];
    let greeted = session.greeted();
    let outcome = session.process(&h, payload, conn.area(), &mut b.out);
    if !greeted && session.reads_leave_frames() {
        conn.leave_frames_understood();
    }
    conn.release()?;
    let (status, last) = match outcome.map_err(Broken::Session)? {
        Outcome::Quiet => return Ok(()),
        Outcome::Reply(s) => (s, false),
        Outcome::Goodbye(s) => (s, true),
    };
    // A checkpoint is taken where the program waits for a reply: everything
    // it sent before is done, and it sends nothing until this reply.
    let left = if h.wants_reply() { detach::checkpoint_if_ordered(session, limits, peer) } else { None };
    let detached = left.is_some();
    if h.wants_reply() {
        // What kernels printed goes first, as it appears before the
        // synchronising call returns on a GPU. Calls that cannot make the
        // driver print skip the look (a flush and a system call).
        if pvgpu_ring::proto::Opcode::try_from(h.opcode.get()).map_or(true, |op| op.may_print()) {
            session.take_output(&mut b.printed);
        }
        for (bytes, header) in [(&mut b.printed.out, Header::output as fn(usize) -> Header), (&mut b.printed.err, Header::output_stderr)] {
            if !bytes.is_empty() {
                let r = conn.send(&header(bytes.len()), bytes, stop);
                bytes.clear();
                r?;
            }
        }
        let staged = session.staged_reply();
        let too_large = b.out.len() + staged > conn.max_reply();
        // Counted before the reply leaves, so that whoever reads the meter
        // after the program has its answer finds the call counted.
        if let Some(m) = &limits.meter {
            let counted = if too_large { pvgpu_ring::CuError::NOT_SUPPORTED.into() } else { status };
            m.replied(arrived.map(|t| t.elapsed()), counted.0);
        }
        if too_large {
            // A reply this transport cannot carry fails its call (paged
            // replies never get here); the session goes on.
            if session.log.allow(session.id()) {
                tracing::warn!(
                    session = session.id(),
                    opcode = h.opcode.get(),
                    bytes = b.out.len(),
                    max = conn.max_reply(),
                    "a reply larger than the transport carries: the call fails with CUDA_ERROR_NOT_SUPPORTED"
                );
            }
            b.out.clear();
            let refused = pvgpu_ring::CuResult::from(pvgpu_ring::CuError::NOT_SUPPORTED);
            conn.send(&h.reply(refused, 0), &b.out, stop)?;
        } else {
            let mut reply = h.reply(status, b.out.len() + staged);
            if detached {
                reply.flags = (reply.flags.get() | pvgpu_ring::proto::FLAG_DETACHED).into();
            }
            conn.send_staged(&reply, &b.out, staged, stop)?;
        }
    }
    if let Some(in_place) = left {
        return Err(Ended::Detached { in_place });
    }
    if last { Err(Ended::Goodbye) } else { Ok(()) }
}
