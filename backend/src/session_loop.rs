//! A session's serving loop: set up the connection an accepted peer
//! brings (local handshake, TCP socket, Xen grants), then receive, process,
//! release and reply until the session ends. Runs on a thread of the
//! supervisor ([`crate::Isolation::Thread`]) or in a worker process.

use crate::config::SessionConfig;
use crate::conn::{Conn, ConnError, RingConn, TcpConn};
use crate::exec::Executor;
use crate::image_cache::{ImageCache, Owner};
use crate::session::{Outcome, Session};
use pvgpu_ring::local;
use pvgpu_ring::proto::{HEADER_LEN, Header};
use pvgpu_ring::report::Chain;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A connection accepted by a listener.
pub enum Accepted {
    /// Local transport (handshake not yet done).
    Unix(UnixStream),
    /// TCP transport.
    Tcp(TcpStream),
    /// A Xen guest's vgpu device whose frontend is `Initialised`.
    Xen {
        /// Guest domain.
        domid: u16,
        /// Device id.
        devid: u32,
    },
}

impl Accepted {
    /// Who is at the other end, as far as the transport says: the guest
    /// domain, the local user, or the TCP peer's address.
    pub fn owner(&self) -> Owner {
        Owner(match self {
            Accepted::Unix(s) => match nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials) {
                Ok(c) => format!("uid:{}", c.uid()),
                Err(_) => "local".into(),
            },
            Accepted::Tcp(s) => s.peer_addr().map_or("tcp".into(), |a| format!("tcp:{}", a.ip())),
            Accepted::Xen { domid, .. } => format!("xen:{domid}"),
        })
    }

    /// The transport's name (`local`, `tcp`, `xen`).
    pub fn kind(&self) -> &'static str {
        match self {
            Accepted::Unix(_) => "local",
            Accepted::Tcp(_) => "tcp",
            Accepted::Xen { .. } => "xen",
        }
    }
}

/// Serves one accepted connection with `exec` until the session ends.
pub fn run_connection<E: Executor>(exec: Arc<E>, acc: Accepted, cfg: &SessionConfig, id: u64, stop: &AtomicBool) -> Ended {
    let kind = acc.kind();
    let owner = acc.owner();
    let mut xen_hold = None;
    let mut conn: Box<dyn Conn> = match acc {
        Accepted::Unix(s) => {
            let side = match local::server_handshake(s, cfg.max_data_area, cfg.same_address) {
                Ok(side) => side,
                Err(e) => return Ended::Broken(format!("handshake failed: {}", Chain(&e))),
            };
            tracing::debug!(session = id, same_address = side.same_address, "shared memory mapped");
            match RingConn::new(side.region, &side.geometry, Box::new(side.notifier), cfg.spin) {
                Ok(c) => Box::new(c),
                Err(e) => return Ended::Broken(format!("ring setup failed: {}", Chain(&e))),
            }
        }
        Accepted::Tcp(s) => match TcpConn::new(s) {
            Ok(c) => Box::new(c),
            Err(e) => return Ended::Broken(format!("socket setup failed: {}", Chain(&e))),
        },
        Accepted::Xen { domid, devid } => match crate::xen::open_session(domid, devid, cfg) {
            Ok((c, hold)) => {
                xen_hold = Some(hold);
                Box::new(c)
            }
            Err(e) => return Ended::Broken(format!("Xen handshake with domain {domid} device {devid} failed: {}", Chain(&e))),
        },
    };
    tracing::info!(session = id, transport = kind, executor = exec.kind(), "session started");
    let t = Instant::now();
    let ended = serve(exec, &mut *conn, id, owner, cfg, stop);
    // The ring and its mappings go first, then the device's XenStore side.
    drop(conn);
    drop(xen_hold);
    match &ended {
        Ended::Broken(why) => tracing::warn!(session = id, reason = %why, "session ended: frontend broke the protocol"),
        other => tracing::info!(session = id, how = ?other, secs = t.elapsed().as_secs_f64(), "session ended"),
    }
    ended
}

/// How a session ended.
#[derive(Debug)]
pub enum Ended {
    /// The frontend said goodbye.
    Goodbye,
    /// The frontend went away without saying goodbye.
    PeerGone,
    /// The backend is shutting down.
    Shutdown,
    /// The frontend broke the protocol; the reason is logged.
    Broken(String),
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
            // synchronising call returns on a GPU.
            session.take_output(&mut printed);
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
