//! How a session ends, with the typed cause when its peer broke something;
//! and how a worker reports that to the supervisor (a line of text on a
//! pipe, the one place the cause leaves its type).

use crate::conn::ConnError;
use crate::xen::XenSessionError;
use pvgpu_ring::layout::LayoutError;
use pvgpu_ring::local::LocalError;
use pvgpu_ring::proto::DecodeError;
use pvgpu_ring::report::Chain;
use std::io;

/// What a peer broke, ending its session.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    /// The local handshake failed.
    #[error("Local handshake failed")]
    Handshake(#[source] LocalError),
    /// The frontend's region does not hold a valid ring.
    #[error("Ring setup failed")]
    Ring(#[source] LayoutError),
    /// The TCP socket or TLS relay could not be set up.
    #[error("Socket setup failed")]
    Socket(#[source] io::Error),
    /// The Xen handshake failed.
    #[error("Xen handshake with domain {domid} device {devid} failed")]
    Xen {
        /// Guest domain.
        domid: u16,
        /// Device.
        devid: u32,
        /// Why.
        #[source]
        source: XenSessionError,
    },
    /// The connection failed or the peer broke the ring or framing.
    #[error("Connection failed")]
    Conn(#[source] ConnError),
    /// A header did not parse.
    #[error("Malformed header")]
    Header(#[source] DecodeError),
    /// The peer broke the protocol.
    #[error(transparent)]
    Session(#[from] crate::session::Broken),
}

/// How a session ended.
#[derive(Debug, thiserror::Error)]
pub enum Ended {
    /// The frontend said goodbye.
    #[error("goodbye")]
    Goodbye,
    /// The frontend went away without saying goodbye.
    #[error("peer gone")]
    PeerGone,
    /// The frontend sent nothing for the idle timeout.
    #[error("idle timeout")]
    Idle,
    /// The backend is shutting down.
    #[error("shutdown")]
    Shutdown,
    /// The session was checkpointed and left this backend; its guest
    /// takes it back from a restore. `in_place`: its device memory was
    /// handed over in place (it stays on the GPU for the backend that
    /// restores it).
    #[error("checkpointed and detached")]
    Detached {
        /// Whether its device memory was handed over in place.
        in_place: bool,
    },
    /// The connection asked for a checkpointed session that is not (or
    /// no longer) parked here, or whose restore failed.
    #[error("resume refused ({0:?})")]
    NotResumed(pvgpu_ring::CuError),
    /// The frontend broke something.
    #[error("broken")]
    Broken(#[source] Broken),
}

impl From<ConnError> for Ended {
    fn from(e: ConnError) -> Ended {
        match e {
            ConnError::PeerGone => Ended::PeerGone,
            ConnError::Shutdown => Ended::Shutdown,
            ConnError::Idle => Ended::Idle,
            other => Ended::Broken(Broken::Conn(other)),
        }
    }
}

impl From<Broken> for Ended {
    fn from(b: Broken) -> Ended {
        Ended::Broken(b)
    }
}

impl Ended {
    /// The line a worker reports: what [`Ended`] says, with every cause.
    pub fn report(&self) -> String {
        Chain(self).to_string()
    }

    /// Logs how a session ended; a peer that broke the protocol is
    /// reported within the backend's limit for peer-triggered lines.
    pub fn log(&self, id: u64, secs: f64) {
        Report::of(self).log(id, secs);
    }
}

/// How a session ended, as the supervisor learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// It ended on its own; the report's text.
    Ended(String),
    /// Its peer broke something; the report's text, causes included.
    Broken(String),
    /// The supervisor killed the worker (why).
    Killed(String),
}

impl Report {
    /// The report of `e`.
    pub fn of(e: &Ended) -> Report {
        match e {
            Ended::Broken(_) => Report::Broken(e.report()),
            other => Report::Ended(other.report()),
        }
    }

    /// Reads a worker's report line.
    pub fn parse(line: &str) -> Report {
        if line.starts_with("broken") { Report::Broken(line.to_string()) } else { Report::Ended(line.to_string()) }
    }

    /// Logs it (a peer's faults within the limit for peer-triggered lines).
    pub fn log(&self, id: u64, secs: f64) {
        match self {
            Report::Broken(why) => {
                if crate::log_limit::peer_triggered() {
                    tracing::warn!(session = id, reason = %why, "session ended: frontend broke the protocol");
                }
            }
            Report::Killed(why) => tracing::warn!(session = id, reason = %why, secs, "session ended: worker killed"),
            Report::Ended(how) => tracing::info!(session = id, how = %how, secs, "session ended"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_keeps_the_cause_and_parses_back() {
        let e = Ended::from(Broken::Header(DecodeError::Truncated));
        let line = e.report();
        assert!(line.starts_with("broken: Malformed header: "), "{line}");
        assert_eq!(Report::parse(&line), Report::Broken(line.clone()));
        assert_eq!(Report::parse(&Ended::Goodbye.report()), Report::Ended("goodbye".into()));
        assert!(matches!(Ended::from(ConnError::Idle), Ended::Idle));
    }
}
