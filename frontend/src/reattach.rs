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
use pvgpu_ring::proto::{PROTOCOL_VERSION, Resume};
use std::time::{Duration, Instant};

/// What a connection needs to come back.
#[derive(Clone)]
pub(crate) struct Reattach {
    pub(crate) addr: BackendAddr,
    pub(crate) opts: Options,
}

/// How long to wait between tries.
const RETRY: Duration = Duration::from_millis(100);

impl Conn {
    /// Opens a new connection and takes the session back on it.
    pub(crate) fn reattach(&mut self) -> Result<()> {
        let Some(r) = self.reattach.clone() else {
            self.detached = false;
            return self.fail(TransportError::BackendGone);
        };
        tracing::info!(addr = %r.addr, "the backend checkpointed this session; waiting for it to come back");
        let deadline = Instant::now() + r.opts.resume_timeout;
        let mut kept_old = false;
        loop {
            if let Ok(t) = crate::client::open_transport(&r.addr, &r.opts) {
                let old = std::mem::replace(&mut self.t, t);
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
                    reserved: 0.into(),
                };
                match self.call(&resume) {
                    Ok(rep) => {
                        self.token = rep.resume_token;
                        tracing::info!(session = rep.session_id.get(), "session taken back");
                        return Ok(());
                    }
                    Err(Error::Cuda(e)) if e == CuError::NOT_FOUND => {}
                    Err(e) => return Err(e),
                }
            }
            if Instant::now() + RETRY > deadline {
                self.dead = true;
                return Err(TransportError::NotResumed { secs: r.opts.resume_timeout.as_secs() }.into());
            }
            std::thread::sleep(RETRY);
        }
    }
}
