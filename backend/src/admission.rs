//! Admission: what a peer must do, and how many sessions it may hold,
//! before the backend starts a worker for it.
//!
//! A connection first takes a *pending* slot (bounded in all and per peer,
//! so silent connections cannot crowd out others), then has
//! [`AdmissionConfig::handshake_timeout`] to open: a local peer must be an
//! allowed user and send its hello, a TCP peer must pass the key check
//! ([`pvgpu_ring::tcp_auth`]). Only then does it take a *session* slot
//! (bounded in all, per transport and per peer) and get a worker. Nothing of
//! the GPU is touched before that.

use crate::config::AdmissionConfig;
use crate::log_limit;
use crate::session_loop::Accepted;
use pvgpu_ring::local::{self, Refusal};
use pvgpu_ring::tcp_auth::{self, AuthError, Status};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

/// The transports, as slots count them.
const TRANSPORTS: [&str; 3] = ["local", "tcp", "xen"];

fn transport_index(kind: &str) -> usize {
    // TLS is TCP as far as limits go.
    let kind = if kind == "tls" { "tcp" } else { kind };
    TRANSPORTS.iter().position(|t| *t == kind).unwrap_or(0)
}

/// Limits on slots held at once.
#[derive(Debug, Clone, Copy)]
pub struct SlotLimits {
    /// In all.
    pub total: usize,
    /// Per transport (local, tcp, xen).
    pub per_transport: [usize; 3],
    /// Per peer.
    pub per_peer: usize,
}

/// Which limit turned a peer away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// Every slot is taken.
    #[error("all {0} slots are taken")]
    Total(usize),
    /// Every slot of the transport is taken.
    #[error("all {1} {0} slots are taken")]
    Transport(&'static str, usize),
    /// The peer holds as many as it may.
    #[error("the peer holds {0}, its most")]
    Peer(usize),
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    transport: [usize; 3],
    peer: HashMap<String, usize>,
}

/// Counted slots: sessions, or connections still opening.
#[derive(Debug)]
pub struct Slots {
    limits: SlotLimits,
    counts: Mutex<Counts>,
}

/// One slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    transport: usize,
    peer: String,
}

impl Slots {
    /// Slots under `limits`.
    pub fn new(limits: SlotLimits) -> Arc<Slots> {
        Arc::new(Slots { limits, counts: Mutex::new(Counts::default()) })
    }

    /// Takes a slot for `peer` over `transport` (`local`, `tcp`, `xen`).
    pub fn acquire(self: &Arc<Self>, transport: &str, peer: &str) -> Result<Slot, Full> {
        let t = transport_index(transport);
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if c.total >= self.limits.total {
            return Err(Full::Total(self.limits.total));
        }
        if c.transport[t] >= self.limits.per_transport[t] {
            return Err(Full::Transport(TRANSPORTS[t], self.limits.per_transport[t]));
        }
        let held = c.peer.get(peer).copied().unwrap_or(0);
        if held >= self.limits.per_peer {
            return Err(Full::Peer(self.limits.per_peer));
        }
        c.total += 1;
        c.transport[t] += 1;
        *c.peer.entry(peer.to_string()).or_default() += 1;
        Ok(Slot { slots: self.clone(), transport: t, peer: peer.to_string() })
    }

    /// Slots held now.
    pub fn held(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.slots.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.total -= 1;
        c.transport[self.transport] -= 1;
        if let Some(n) = c.peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                c.peer.remove(&self.peer);
            }
        }
    }
}

/// The slot pools an admission draws from.
pub struct Pools {
    /// Connections in their opening.
    pub pending: Arc<Slots>,
    /// Sessions being served.
    pub sessions: Arc<Slots>,
}

impl Pools {
    /// The pools `cfg` describes.
    pub fn new(cfg: &AdmissionConfig) -> Pools {
        Pools {
            pending: Slots::new(SlotLimits {
                total: cfg.max_pending,
                per_transport: [cfg.max_pending; 3],
                per_peer: cfg.max_pending_per_peer,
            }),
            sessions: Slots::new(SlotLimits {
                total: cfg.max_sessions,
                per_transport: [cfg.max_local, cfg.max_tcp, cfg.max_xen],
                per_peer: cfg.max_per_peer,
            }),
        }
    }
}

/// Why a connection was not admitted (logged, rate-limited).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The local user is not allowed.
    #[error("local user {0} is not allowed (--allow-uid)")]
    User(u32),
    /// The peer sent nothing in time.
    #[error("no hello within the handshake timeout")]
    Silent,
    /// The TCP key check failed.
    #[error("TCP opening failed")]
    Auth(#[from] AuthError),
    /// A session limit.
    #[error("session limit: {0}")]
    Full(#[from] Full),
    /// The socket failed.
    #[error("socket error")]
    Io(#[from] std::io::Error),
    /// A TLS connection without TLS settings (cannot happen: the listener
    /// needs them).
    #[error("no TLS settings")]
    NoTls,
}

/// An admitted connection: what its session serves, its slot, and, for
/// TLS, the relay the supervisor runs between the peer and the session.
pub struct Admitted {
    /// The connection the session serves.
    pub acc: Accepted,
    /// Its session slot.
    pub slot: Slot,
    /// TLS: the peer's side of the relay, and the session's other end.
    pub relay: Option<(crate::tls::TlsStream, std::os::unix::net::UnixStream)>,
}

/// Runs a connection's opening. Returns the connection and its session
/// slot when it may have a worker; otherwise the peer has been told why
/// (where the transport can say) and the connection is dropped.
pub fn open(acc: Accepted, cfg: &AdmissionConfig, sessions: &Arc<Slots>, max_data: u64) -> Result<Admitted, Refused> {
    let peer = acc.owner().0;
    let kind = acc.kind();
    match acc {
        Accepted::Unix(s) => {
            if let Some(allowed) = &cfg.allow_uids {
                let uid = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials).map(|c| c.uid()).unwrap_or(u32::MAX);
                if !allowed.contains(&uid) {
                    local::refuse(&s, Refusal::Denied, max_data);
                    return Err(Refused::User(uid));
                }
            }
            if !crate::conn::readable(&s, cfg.handshake_timeout).unwrap_or(false) {
                return Err(Refused::Silent);
            }
            match sessions.acquire(kind, &peer) {
                Ok(slot) => Ok(Admitted { acc: Accepted::Unix(s), slot, relay: None }),
                Err(full) => {
                    local::refuse(&s, Refusal::Busy, max_data);
                    Err(full.into())
                }
            }
        }
        Accepted::Tcp(mut s) => {
            s.set_read_timeout(Some(cfg.handshake_timeout))?;
            s.set_write_timeout(Some(cfg.handshake_timeout))?;
            let slot = key_check(&mut s, cfg, sessions, kind, &peer)?;
            Ok(Admitted { acc: Accepted::Tcp(s), slot, relay: None })
        }
        Accepted::Tls(s) => {
            s.set_read_timeout(Some(cfg.handshake_timeout))?;
            s.set_write_timeout(Some(cfg.handshake_timeout))?;
            let tls = cfg.tls.as_ref().ok_or(Refused::NoTls)?;
            let mut s = crate::tls::accept(tls, s)?;
            let slot = key_check(&mut s, cfg, sessions, kind, &peer)?;
            let (worker_end, relay_end) = std::os::unix::net::UnixStream::pair()?;
            Ok(Admitted { acc: Accepted::Relayed { sock: worker_end, peer }, slot, relay: Some((s, relay_end)) })
        }
        Accepted::Xen { .. } => {
            let slot = sessions.acquire(kind, &peer)?;
            Ok(Admitted { acc, slot, relay: None })
        }
        Accepted::Relayed { .. } => Err(Refused::NoTls),
    }
}

/// The key check of a TCP or TLS connection, with a session slot taken
/// between the peer's proof and the backend's answer, so that a peer told
/// "busy" has proved its key and one told "welcome" has its slot.
fn key_check<S: Read + Write>(
    s: &mut S,
    cfg: &AdmissionConfig,
    sessions: &Arc<Slots>,
    kind: &'static str,
    peer: &str,
) -> Result<Slot, Refused> {
    let key = cfg.tcp_key.as_ref();
    let opened = tcp_auth::server_open(s, key)?;
    let slot = match sessions.acquire(kind, peer) {
        Ok(slot) => slot,
        Err(full) => {
            let _ = tcp_auth::refuse(s, Status::Busy);
            let _ = s.flush();
            return Err(full.into());
        }
    };
    tcp_auth::accept(s, &opened, key)?;
    s.flush()?;
    Ok(slot)
}

/// Logs a refusal, within the backend's limit for peer-triggered lines.
pub fn log_refusal(peer: &str, transport: &str, why: &Refused) {
    if log_limit::peer_triggered() {
        match why {
            Refused::Silent | Refused::Io(_) | Refused::Auth(AuthError::Io(_)) => {
                tracing::info!(peer, transport, reason = %pvgpu_ring::report::Chain(why), "connection dropped")
            }
            _ => tracing::warn!(peer, transport, reason = %pvgpu_ring::report::Chain(why), "connection refused"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_in_all_per_transport_and_per_peer() {
        let s = Slots::new(SlotLimits { total: 5, per_transport: [4, 2, 4], per_peer: 2 });
        let a = s.acquire("tcp", "tcp:10.0.0.1").unwrap();
        let _b = s.acquire("tcp", "tcp:10.0.0.2").unwrap();
        assert_eq!(s.acquire("tcp", "tcp:10.0.0.3").unwrap_err(), Full::Transport("tcp", 2));
        let _c = s.acquire("local", "uid:1000").unwrap();
        let _d = s.acquire("local", "uid:1000").unwrap();
        assert_eq!(s.acquire("local", "uid:1000").unwrap_err(), Full::Peer(2));
        let e = s.acquire("xen", "xen:5").unwrap();
        assert_eq!(s.acquire("xen", "xen:6").unwrap_err(), Full::Total(5));
        drop(a);
        let _f = s.acquire("xen", "xen:6").unwrap();
        assert_eq!(s.held(), 5);
        drop(e);
        assert_eq!(s.held(), 4);
    }
}
