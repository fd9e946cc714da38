//! The serving loop of one session: receive, process, release, reply.

use crate::conn::{Conn, ConnError};
use crate::exec::Executor;
use crate::session::{Outcome, Session, SessionLimits};
use pvgpu_ring::proto::{HEADER_LEN, Header};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
pub fn serve<E: Executor>(exec: Arc<E>, conn: &mut dyn Conn, id: u64, limits: SessionLimits, stop: &AtomicBool) -> Ended {
    let mut session = Session::new(exec, id, limits);
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut out = Vec::with_capacity(64 * 1024);
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
            Err(e) => return Ended::Broken(e.to_string()),
        }
        let h = match Header::parse(&buf) {
            Ok(h) => h,
            Err(e) => return Ended::Broken(format!("malformed header: {e}")),
        };
        let payload = &buf[HEADER_LEN.min(buf.len())..];
        let outcome = session.process(&h, payload, conn.area(), &mut out);
        if let Err(e) = conn.release() {
            return Ended::Broken(e.to_string());
        }
        let (status, last) = match outcome {
            Ok(Outcome::Quiet) => continue,
            Ok(Outcome::Reply(s)) => (s, false),
            Ok(Outcome::Goodbye(s)) => (s, true),
            Err(e) => return Ended::Broken(e.to_string()),
        };
        if h.wants_reply() {
            let rh = h.reply(status, out.len());
            match conn.send(&rh, &out, stop) {
                Ok(()) => {}
                Err(ConnError::PeerGone) => return Ended::PeerGone,
                Err(ConnError::Shutdown) => return Ended::Shutdown,
                Err(e) => return Ended::Broken(e.to_string()),
            }
        }
        if last {
            return Ended::Goodbye;
        }
    }
}
