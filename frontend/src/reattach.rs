//! Taking a session back after the backend checkpointed it: the reply
//! that says the session left ([`pvgpu_ring::proto::FLAG_DETACHED`]) makes
//! the next call first open a new connection to the same address and
//! present the session's token (`Resume`), retrying while the session is
//! on its way back (a restore into this or a restarted backend), up to
//! [`crate::Options::resume_timeout`].
//!
//! The old connection's shared memory stays mapped: page-locked
//! allocations the program made in it stay valid (as ordinary host memory
//! from then on).

use crate::error::{Error, Result, TransportError};
use crate::options::{BackendAddr, Options};
use crate::rpc::Conn;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{
    FEATURE_LEAVE_FRAMES, FLAG_REPLY, HelloRep, MOVED_ADDRESS_MAX, Opcode, PROTOCOL_VERSION, Reply, Resume, STATUS_MOVED,
};
use std::time::{Duration, Instant};

/// What a connection needs to come back.
#[derive(Clone)]
pub(crate) struct Reattach {
    pub(crate) addr: BackendAddr,
    pub(crate) opts: Options,
}

/// What a `Resume` was answered.
enum Resumed {
    /// The session, here.
    Back(HelloRep),
    /// The session lives at another backend now (`pvgpu-ctl migrate`).
    Moved(BackendAddr),
}

/// How many times in a row a session may be sent on to another backend:
/// two backends that name each other would otherwise bounce it forever.
const MAX_HOPS: u32 = 8;

/// How long to wait between tries: briefly at first (a migration's target
/// takes the session within a fraction of a second, and every wait adds
/// to the program's pause), then longer (each try is a connection, and a
/// worker process in the backend, while a backend restarts).
const FIRST_RETRY: Duration = Duration::from_millis(10);
const RETRY: Duration = Duration::from_millis(100);

impl Conn {
    /// Takes a session that left back before a call builds its request: a
    /// request names places in its connection's data area (bytes staged
    /// there, page-locked memory the program allocated there), and they
    /// must be places of the connection it goes on, not of the one the
    /// session left (a copy into page-locked memory made before the session
    /// left was otherwise written into the new connection's area, and the
    /// program's memory kept its old bytes). A session that does not come
    /// back ends here: the call fails, as every later one.
    pub(crate) fn take_back_before_a_call(&mut self) {
        if !self.detached || self.dead {
            return;
        }
        if let Err(e) = self.reattach() {
            tracing::warn!(error = %e, "the session did not come back; its calls fail from now on");
            self.dead = true;
        }
    }

    /// Opens a new connection and takes the session back on it.
    pub(crate) fn reattach(&mut self) -> Result<()> {
        let Some(mut r) = self.reattach.clone() else {
            self.detached = false;
            return self.fail(TransportError::BackendGone);
        };
        tracing::info!(addr = %r.addr, "the backend checkpointed this session; waiting for it to come back");
        let deadline = Instant::now() + r.opts.resume_timeout;
        let mut kept_old = false;
        let mut hops = 0;
        let mut wait = FIRST_RETRY;
        loop {
            if let Ok(t) = crate::client::open_transport(&r.addr, &r.opts) {
                let old = std::mem::replace(&mut self.t, t);
                // A new data area: where the device reaches it is asked
                // anew at the next page-locked allocation.
                self.area_device = None;
                if !kept_old {
                    self.retired.push(old);
                    kept_old = true;
                }
                self.detached = false;
                self.dead = false;
                let resume = Resume {
                    token: self.token,
                    min_version: PROTOCOL_VERSION.into(),
                    max_version: PROTOCOL_VERSION.into(),
                    features: FEATURE_LEAVE_FRAMES.into(),
                    reserved: 0.into(),
                };
                match self.resume(&resume) {
                    Ok(Resumed::Back(rep)) => {
                        self.token = rep.resume_token;
                        tracing::info!(session = rep.session_id.get(), "session taken back");
                        return Ok(());
                    }
                    Ok(Resumed::Moved(to)) => {
                        hops += 1;
                        if hops > MAX_HOPS {
                            self.dead = true;
                            return Err(TransportError::MovedTooOften { hops: MAX_HOPS, last: to.to_string() }.into());
                        }
                        tracing::info!(to = %to, "the session moved to another backend; following it");
                        r.addr = to.clone();
                        self.reattach = Some(Reattach { addr: to, opts: r.opts.clone() });
                        continue;
                    }
                    Err(Error::Cuda(e)) if e == CuError::NOT_FOUND => {}
                    // The backend it reached went away before answering (one
                    // stopping, whose successor starts at its address, may
                    // still take a connection), or the answer came broken (a
                    // Xen guest saved while it waited finds, once restored,
                    // whatever of the answer was written before its memory
                    // was): a resume changes nothing until it succeeds, so
                    // try again.
                    Err(Error::Transport(e)) => {
                        tracing::debug!(addr = %r.addr, error = %e, "the resume was not answered; trying again");
                    }
                    Err(e) => return Err(e),
                }
            }
            // No doorbell held while waiting (see `Transport::retire`).
            self.t.retire();
            if Instant::now() + wait > deadline {
                self.dead = true;
                return Err(TransportError::NotResumed { secs: r.opts.resume_timeout.as_secs() }.into());
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(RETRY);
        }
    }

    /// Sends `Resume` and reads its answer: the session, or where it moved.
    fn resume(&mut self, resume: &Resume) -> Result<Resumed> {
        let id = self.send(resume, FLAG_REPLY)?;
        let status = self.reply(Opcode::Resume as u16, id)?;
        if status.0 == STATUS_MOVED {
            let to = std::str::from_utf8(&self.buf)
                .ok()
                .filter(|s| s.len() <= MOVED_ADDRESS_MAX)
                .and_then(|s| s.parse::<BackendAddr>().ok())
                .ok_or(Error::Cuda(CuError::UNKNOWN))?;
            return Ok(Resumed::Moved(to));
        }
        status.result()?;
        HelloRep::decode(Opcode::Resume, &self.buf).map(Resumed::Back).map_err(|e| TransportError::Decode(e).into())
    }
}
