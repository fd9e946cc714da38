//! Admission: what a peer must do, and how much it may hold, before the
//! backend starts a worker for it.
//!
//! A connection first takes a place in its transport's pool of openings
//! ([`pending`]: bounded per peer, each opening under a total deadline,
//! the oldest cut when the pool is full), then must open: a local peer
//! must be an allowed user and send its complete hello, a TCP peer must
//! pass the key check ([`pvgpu_ring::tcp_auth`]), a TLS peer its TLS
//! handshake and then the key check. Only then does it take a *session*
//! slot ([`slots`]: bounded in all, per transport and per peer) and a seat
//! in its peer's memory ledger ([`crate::ledger`]), and get a worker.
//! Nothing of the GPU is touched before that.

pub mod peer;
pub mod pending;
pub mod slots;

use crate::config::AdmissionConfig;
use crate::handover::{Handover, Transport};
use crate::ledger::{Ledgers, Seat};
use crate::listener::Accepted;
use crate::log_limit;
use crate::peer_copy::Copies;
use crate::roster::TenantOf;
use pending::{Cut, Pending, PendingLimits, PendingPool};
use pvgpu_ring::local::{self, LocalError, Refusal};
use pvgpu_ring::tcp_auth::{self, AuthError, Status};
pub use slots::{Full, Slot, SlotLimits, Slots, TransportLimit};
use std::io::{Read, Write};
use std::sync::Arc;

/// The pools an admission draws from.
pub struct Pools {
    /// Connections opening, per transport (local, TCP, TLS, RDMA); Xen guests
    /// publish their whole ring before the backend reads it, so a Xen
    /// opening is read in one step and waits in no pool.
    pub pending: [Arc<PendingPool>; 4],
    /// Sessions being served.
    pub sessions: Arc<Slots>,
    /// What each peer holds across its sessions, capped by
    /// `--peer-mem-quota` where set, or a tenant's memory quota (the
    /// control socket reads it either way).
    pub ledgers: Arc<Ledgers>,
    /// Sessions of one transport at most (a tenant without a session
    /// limit of its own may have them all).
    transport_totals: [usize; 3],
    /// `--peer-mem-quota`, or none.
    peer_cap: u64,
}

impl Pools {
    /// The pools `cfg` describes.
    pub fn new(cfg: &AdmissionConfig) -> Pools {
        let pending = |t: Transport| {
            let per_peer = cfg.max_pending_per_peer.unwrap_or((cfg.max_pending / 8).max(1));
            PendingPool::new(t.name(), PendingLimits { capacity: cfg.max_pending, per_peer, deadline: cfg.handshake_timeout })
        };
        let per_transport = [cfg.max_local, cfg.max_tcp, cfg.max_xen].map(|n| TransportLimit::new(n, cfg.max_per_peer));
        // A tenant may hold every session of a transport.
        let seats = per_transport.iter().map(|l| l.total.max(l.per_peer)).max().unwrap_or(1);
        let peer_cap = cfg.peer_mem_quota.unwrap_or(u64::MAX);
        Pools {
            pending: [pending(Transport::Local), pending(Transport::Tcp), pending(Transport::Tls), pending(Transport::Rdma)],
            sessions: Slots::new(SlotLimits { total: cfg.max_sessions, per_transport }),
            ledgers: Arc::new(Ledgers::new(peer_cap, seats)),
            transport_totals: per_transport.map(|l| l.total),
            peer_cap,
        }
    }

    /// A session slot and ledger seat for tenant `name` over `t`, under its
    /// quota.
    pub fn tenant_session(&self, t: Transport, name: &str, quota: &pvgpu_ctl::api::Quota) -> Result<(Slot, Seat), Refused> {
        let peer = crate::tenants::peer_of(name);
        let per_peer = quota.max_sessions.map_or(self.transport_totals[t.session_class()], |n| n as usize);
        let slot = self.sessions.acquire_within(t, &peer, Some(per_peer))?;
        let seat = self.ledgers.seat_capped(&peer, quota.memory_bytes.unwrap_or(self.peer_cap)).map_err(Refused::Ledger)?;
        Ok((slot, seat))
    }

    /// The pool of openings of `t` (none for Xen).
    pub fn pending(&self, t: Transport) -> Option<&Arc<PendingPool>> {
        match t {
            Transport::Local => Some(&self.pending[0]),
            Transport::Tcp => Some(&self.pending[1]),
            Transport::Tls => Some(&self.pending[2]),
            Transport::Rdma => Some(&self.pending[3]),
            Transport::Xen => None,
        }
    }

    /// A session slot and ledger seat for `peer`.
    pub fn session(&self, t: Transport, peer: &str) -> Result<(Slot, Seat), Refused> {
        let slot = self.sessions.acquire(t, peer)?;
        let seat = self.ledgers.seat(peer).map_err(Refused::Ledger)?;
        Ok((slot, seat))
    }
}

/// Why a connection was not admitted (logged, rate-limited).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The local user is not allowed.
    #[error("local user {0} is not allowed (--allow-uid)")]
    User(u32),
    /// The local hello was malformed, or never came whole.
    #[error("local handshake failed")]
    Local(#[from] LocalError),
    /// The TCP key check failed.
    #[error("TCP opening failed")]
    Auth(#[from] AuthError),
    /// The opening's pool cut it.
    #[error("opening cut")]
    Cut(#[from] Cut),
    /// A session limit.
    #[error("session limit")]
    Full(#[from] Full),
    /// The socket failed.
    #[error("socket error")]
    Io(#[from] std::io::Error),
    /// The peer's memory ledger could not be made or has no seat left.
    #[error("no seat in the peer's memory ledger")]
    Ledger(#[source] std::io::Error),
    /// Another backend's copy whose ticket is unknown, used, expired or of
    /// another length, or that came over RDMA.
    #[error("a backend's copy with a ticket this backend does not hold")]
    Ticket,
    /// A TLS connection without TLS settings (cannot happen: the listener
    /// needs them).
    #[error("no TLS settings")]
    NoTls,
}

/// An admitted connection: what its session serves, its slot and ledger
/// seat, its tenant, and, for TLS and RDMA, the relay the supervisor runs
/// between the peer and the session.
pub struct Admitted {
    /// The tenant the session belongs to: by the key a TCP or TLS peer
    /// opened with, or as a member peer.
    pub tenant: Option<TenantOf>,
    /// The connection the session serves.
    pub handover: Handover,
    /// Its session slot.
    pub slot: Slot,
    /// Its seat in its peer's memory ledger.
    pub seat: Seat,
    /// TLS and RDMA: the peer's side of the relay, and the session's
    /// other end.
    pub relay: Option<crate::rdma::Relay>,
}

/// Runs a connection's opening while it holds its place in the pool
/// (`pending`). Returns the connection, its slot and its seat when it may
/// have a worker; `None` for another backend's copy, parked under its
/// ticket in `copies` ([`crate::peer_copy`]); otherwise the peer has been
/// told why (where the transport can say) and the connection is dropped.
pub fn open(
    acc: Accepted,
    pending: Pending,
    cfg: &AdmissionConfig,
    pools: &Pools,
    max_data: u64,
    copies: &Copies,
) -> Result<Option<Admitted>, Refused> {
    let peer = acc.peer();
    let transport = acc.transport();
    // Also bounded by the pool's deadline, which cuts the socket.
    let give_up = |e: Refused| match pending.cut() {
        Some(why) => Refused::Cut(why),
        None => e,
    };
    match acc {
        Accepted::Unix { sock, uid } => {
            if cfg.allow_uids.as_ref().is_some_and(|allowed| !allowed.contains(&uid)) {
                local::refuse(&sock, Refusal::Denied, max_data);
                return Err(Refused::User(uid));
            }
            sock.set_read_timeout(Some(cfg.handshake_timeout))?;
            let hello = match local::read_hello(&sock, max_data).map_err(|e| give_up(e.into()))? {
                local::Opening::Session(hello) => hello,
                local::Opening::Peer(a) => {
                    pending.finish()?;
                    return peer_copy(copies, a, &sock, sock.try_clone()?.into());
                }
            };
            pending.finish()?;
            // A local user may be a member of a tenant: its sessions are the
            // tenant's, under its quota.
            let member = cfg.tenants.as_deref().and_then(|t| t.of_member(&peer));
            let held = match &member {
                Some((name, quota)) => pools.tenant_session(transport, name, quota),
                None => pools.session(transport, &peer),
            };
            let tenant = member.map(|(name, _)| TenantOf { name, key: None });
            match held {
                Ok((slot, seat)) => Ok(Some(Admitted { handover: Handover::Local { sock, hello, uid }, slot, seat, relay: None, tenant })),
                Err(why) => {
                    local::refuse(&sock, Refusal::Busy, max_data);
                    Err(why)
                }
            }
        }
        Accepted::Tcp(mut s) => {
            s.set_read_timeout(Some(cfg.handshake_timeout))?;
            s.set_write_timeout(Some(cfg.handshake_timeout))?;
            let (slot, seat, tenant) = match key_check(&mut s, pending, cfg, pools, transport, &peer)? {
                Keyed::Session(k) => k,
                Keyed::Peer(a) => return peer_copy(copies, a, &s, s.try_clone()?.into()),
            };
            Ok(Some(Admitted { handover: Handover::Tcp(s), slot, seat, relay: None, tenant }))
        }
        Accepted::Tls(s) => {
            s.set_read_timeout(Some(cfg.handshake_timeout))?;
            s.set_write_timeout(Some(cfg.handshake_timeout))?;
            let tls = cfg.tls.as_ref().ok_or(Refused::NoTls)?;
            let mut s = crate::tls::accept(tls, s).map_err(|e| give_up(e.into()))?;
            let (slot, seat, tenant) = match key_check(&mut s, pending, cfg, pools, transport, &peer)? {
                Keyed::Session(k) => k,
                // The copy's plaintext goes to its session through a socket
                // pair this thread relays, as a session's does.
                Keyed::Peer(a) => {
                    let (worker_end, relay_end) = std::os::unix::net::UnixStream::pair()?;
                    let took = peer_copy(copies, a, &mut s, worker_end.into())?;
                    crate::tls::relay(s, relay_end);
                    return Ok(took);
                }
            };
            let (handover, end) = relayed(peer, transport)?;
            Ok(Some(Admitted { handover, slot, seat, relay: Some(crate::rdma::Relay::Tls(Box::new(s), end)), tenant }))
        }
        Accepted::Rdma(mut s) => {
            s.set_read_timeout(Some(cfg.handshake_timeout));
            s.set_write_timeout(Some(cfg.handshake_timeout));
            let (slot, seat, tenant) = key_check(&mut s, pending, cfg, pools, transport, &peer)?.session()?;
            let (handover, end) = relayed(peer, transport)?;
            Ok(Some(Admitted { handover, slot, seat, relay: Some(crate::rdma::Relay::Rdma(s, end)), tenant }))
        }
    }
}

/// A relayed session's handover (the worker's end of a socket pair) and
/// the supervisor's end of the pair.
fn relayed(peer: String, transport: Transport) -> std::io::Result<(Handover, std::os::unix::net::UnixStream)> {
    let (worker_end, relay_end) = std::os::unix::net::UnixStream::pair()?;
    Ok((Handover::Relayed { sock: worker_end, peer, transport }, relay_end))
}

/// What a TCP or TLS peer's key check gives: its slot, its ledger seat,
/// and the tenant and key it opened with.
type KeyChecked = (Slot, Seat, Option<TenantOf>);

/// A key check's outcome: a session, or another backend's copy (which
/// presents a ticket instead of a key).
enum Keyed {
    Session(KeyChecked),
    Peer(pvgpu_ring::peer_copy::Arrival),
}

impl Keyed {
    /// A session: copies from backends come over local sockets, TCP and
    /// TLS, not RDMA.
    fn session(self) -> Result<KeyChecked, Refused> {
        match self {
            Keyed::Session(k) => Ok(k),
            Keyed::Peer(_) => Err(Refused::Ticket),
        }
    }
}

/// Another backend's copy, `a`, arrived on `conn`: parked under its
/// ticket, or refused.
fn peer_copy<S>(copies: &Copies, a: pvgpu_ring::peer_copy::Arrival, conn: S, fd: std::os::fd::OwnedFd) -> Result<Option<Admitted>, Refused>
where
    S: Write,
{
    if copies.arrive(a, conn, fd) {
        tracing::debug!(len = a.len, "another backend's copy arrived");
        Ok(None)
    } else {
        Err(Refused::Ticket)
    }
}

/// The key check of a TCP or TLS connection, with a session slot taken
/// between the peer's proof and the backend's answer, so that a peer told
/// "busy" has proved its key and one told "welcome" has its slot. A peer
/// that opened with a tenant key counts as its tenant, under the tenant's
/// quota.
fn key_check<S: Read + Write>(
    s: &mut S,
    pending: Pending,
    cfg: &AdmissionConfig,
    pools: &Pools,
    transport: Transport,
    peer: &str,
) -> Result<Keyed, Refused> {
    let tenants = cfg.tenants.as_deref();
    let lookup = |id| tenants.and_then(|t| t.verifier(id));
    let accepting = tcp_auth::Accepting {
        shared: cfg.tcp_key.as_ref(),
        tenants: tenants.is_some().then_some(&lookup as &dyn Fn(_) -> _),
        keyless: cfg.tcp_trusted_network || (cfg.tcp_key.is_none() && tenants.is_none()),
    };
    let opened = match tcp_auth::server_open(s, &accepting) {
        Ok(o) => o,
        Err(e) => return Err(pending.cut().map_or(Refused::Auth(e), Refused::Cut)),
    };
    pending.finish()?;
    if let Some(a) = opened.peer_copy() {
        return Ok(Keyed::Peer(a));
    }
    // The key may have been revoked since its proof was checked: then the
    // tenant is gone from the lookup and the peer is refused.
    let tenant = match opened.tenant_key() {
        Some(id) => match tenants.and_then(|t| t.of_key(id)) {
            Some((name, quota)) => Some((name, id, quota)),
            None => {
                let _ = tcp_auth::refuse(s, Status::WrongKey);
                return Err(Refused::Auth(AuthError::WrongKey));
            }
        },
        None => None,
    };
    let held = match &tenant {
        Some((name, _, quota)) => pools.tenant_session(transport, name, quota),
        None => pools.session(transport, peer),
    };
    let (slot, seat) = match held {
        Ok(held) => held,
        Err(why) => {
            let _ = tcp_auth::refuse(s, Status::Busy);
            let _ = s.flush();
            return Err(why);
        }
    };
    tcp_auth::accept(s, &opened)?;
    s.flush()?;
    Ok(Keyed::Session((slot, seat, tenant.map(|(name, id, _)| TenantOf { name, key: Some(id) }))))
}

/// Logs a refusal, within the backend's limit for peer-triggered lines.
pub fn log_refusal(peer: &str, transport: Transport, why: &Refused) {
    if log_limit::peer_triggered() {
        let transport = transport.name();
        match why {
            Refused::Cut(_) | Refused::Io(_) | Refused::Auth(AuthError::Io(_)) | Refused::Local(LocalError::Os { .. }) => {
                tracing::info!(peer, transport, reason = %pvgpu_ring::report::Chain(why), "connection dropped")
            }
            _ => tracing::warn!(peer, transport, reason = %pvgpu_ring::report::Chain(why), "connection refused"),
        }
    }
}
