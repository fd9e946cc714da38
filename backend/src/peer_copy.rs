//! Copies between the device memory of two backends' sessions of one
//! program, from backend to backend (`PVGPU_BACKEND=a,b`,
//! `cuMemcpyPeer`): the supervisor's part.
//!
//! - **Receiving backend.** Its session *opens* the copy: the supervisor
//!   hands out a ticket (16 random bytes) naming the session and the
//!   copy's length ([`Copies::open`]). The sending backend's connection
//!   arrives at a listener with the ticket instead of a hello
//!   ([`pvgpu_ring::peer_copy`]); admission parks it under its ticket
//!   ([`Copies::arrive`]) and the session takes it ([`Copies::take`]).
//!   A ticket is good for one connection of the length it was opened
//!   for, for [`TICKET_LIFE`]; a session holds one at a time; the
//!   tickets of a session go with it.
//! - **Sending backend.** Its session asks for a connection to the
//!   receiving backend's address ([`Copies::connect`]). The supervisor
//!   makes it only to a backend it lists with `--peer` (by the address
//!   programs reach it at), over the local transport, TCP or TLS: a guest
//!   cannot make a backend connect anywhere else. A sandboxed worker opens
//!   no socket of its own; it gets the connection's descriptor (over TLS,
//!   one end of a socket pair the supervisor relays, as for a session).
//!
//! The ticket stands in for the key of a TCP listener: whoever presents
//! it writes into the memory its session opened for it, as the program
//! that asked for it would through its own connection.

use crate::ipc::{IpcError, Token};
use pvgpu_ring::peer_copy::{self, Arrival};
use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a ticket waits for its connection, and a parked connection
/// for its session.
pub const TICKET_LIFE: Duration = Duration::from_secs(30);
/// Tickets held at once, in all (each session holds one at most).
const MAX_TICKETS: usize = 4096;
/// How long the connection's reads and writes may stall before the copy
/// fails.
pub const STALL: Duration = Duration::from_secs(30);

struct Ticket {
    session: u64,
    len: u64,
    made: Instant,
    conn: Option<OwnedFd>,
}

/// A backend copies may go to: a `--peer`.
#[derive(Debug, Clone)]
pub struct PeerLink {
    /// Where programs reach it (`local:`, `tcp:`, `tls:`).
    pub address: String,
    /// For a `tls:` address, how its certificate is checked (none: copies
    /// to it pass through the program).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// Connections of copies between backends, counted for `/metrics`.
#[derive(Debug, Default)]
pub struct CopyCounts {
    /// Arrived with a ticket a session held.
    pub accepted: AtomicU64,
    /// Arrived with a ticket no session held (unknown, used, expired, of
    /// another length).
    pub refused: AtomicU64,
    /// Made to another backend, and accepted there.
    pub made: AtomicU64,
    /// Asked for to a backend that is not a `--peer`, or not over the
    /// local transport or TCP.
    pub not_a_peer: AtomicU64,
    /// To a peer, failed (unreachable, or it refused the ticket).
    pub failed: AtomicU64,
}

fn count(c: &AtomicU64) {
    // Relaxed: a count read at the next scrape, ordered with nothing.
    c.fetch_add(1, Ordering::Relaxed);
}

/// The tickets of copies into this backend's sessions, and the backends
/// this one may send copies to.
#[derive(Default)]
pub struct Copies {
    tickets: Mutex<HashMap<Token, Ticket>>,
    arrived: Condvar,
    /// The `--peer` backends copies may go to.
    peers: OnceLock<Vec<PeerLink>>,
    /// What happened to connections, for `/metrics`.
    pub counts: Arc<CopyCounts>,
}

impl std::fmt::Debug for Copies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Copies").finish_non_exhaustive()
    }
}

impl Copies {
    /// The backends copies may go to (set once, at start).
    pub fn set_peers(&self, peers: Vec<PeerLink>) {
        let _ = self.peers.set(peers);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Ticket>> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ticket for `len` bytes into session `session` (which gives up the
    /// one it held).
    pub fn open(&self, session: u64, len: u64) -> Result<Token, IpcError> {
        let mut t = self.lock();
        t.retain(|_, k| k.session != session && k.made.elapsed() < TICKET_LIFE);
        if t.len() >= MAX_TICKETS {
            return Err(IpcError::Full);
        }
        let token = crate::ipc::random_token()?;
        t.insert(token, Ticket { session, len, made: Instant::now(), conn: None });
        Ok(token)
    }

    /// A connection presenting `a`: parked under its ticket, and told so
    /// through `answer` while the ticket is held (so no session reads it
    /// before the answer is written). Whether the ticket took it; a
    /// connection it did not take is told so.
    pub fn arrive<S: Write>(&self, a: Arrival, mut conn: S, fd: OwnedFd) -> bool {
        let mut t = self.lock();
        let ok = t.get(&a.ticket).is_some_and(|k| k.conn.is_none() && k.len == a.len && k.made.elapsed() < TICKET_LIFE);
        if !ok {
            drop(t);
            count(&self.counts.refused);
            let _ = peer_copy::answer(&mut conn, false);
            return false;
        }
        widen(&fd);
        if peer_copy::answer(&mut conn, true).is_err() {
            t.remove(&a.ticket);
            return false;
        }
        if let Some(k) = t.get_mut(&a.ticket) {
            k.conn = Some(fd);
        }
        self.arrived.notify_all();
        count(&self.counts.accepted);
        true
    }

    /// The connection that arrived for session `session`'s `ticket`,
    /// waiting up to `wait` for it. The ticket is used up either way.
    pub fn take(&self, session: u64, ticket: &Token, wait: Duration) -> Result<OwnedFd, IpcError> {
        let deadline = Instant::now() + wait;
        let mut t = self.lock();
        loop {
            match t.get_mut(ticket) {
                Some(k) if k.session == session => {
                    if let Some(fd) = k.conn.take() {
                        t.remove(ticket);
                        return Ok(fd);
                    }
                }
                _ => return Err(IpcError::Unknown),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                t.remove(ticket);
                return Err(IpcError::Unknown);
            }
            t = self.arrived.wait_timeout(t, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Session `session` ended: its ticket goes.
    pub fn end_session(&self, session: u64) {
        self.lock().retain(|_, k| k.session != session);
    }

    /// A connection to the backend at `address` for the copy `a`, accepted
    /// by it. Only to a `--peer` backend, over the local transport, TCP, or
    /// TLS where the peer's authority is known (`Unknown` otherwise: the
    /// program copies through itself).
    pub fn connect(&self, address: &str, a: Arrival) -> Result<OwnedFd, IpcError> {
        let made = self.connect_peer(address, a);
        count(match &made {
            Ok(_) => &self.counts.made,
            Err(IpcError::Unknown) => &self.counts.not_a_peer,
            Err(_) => &self.counts.failed,
        });
        made
    }

    fn connect_peer(&self, address: &str, a: Arrival) -> Result<OwnedFd, IpcError> {
        let Some(peer) = self.peers.get().and_then(|p| p.iter().find(|x| x.address == address)) else {
            return Err(IpcError::Unknown);
        };
        let refused = |e: peer_copy::PeerCopyError| {
            tracing::debug!(to = address, error = %pvgpu_ring::report::Chain(&e), "a copy to another backend could not open");
            IpcError::Unreachable
        };
        let io = |e: std::io::Error| refused(e.into());
        match address.parse::<pvgpu_ring::addr::Addr>() {
            Ok(pvgpu_ring::addr::Addr::Local(path)) => {
                let s = UnixStream::connect(path).map_err(io)?;
                opened(s, |s| peer_copy::open_local(s, a)).map_err(refused)
            }
            Ok(pvgpu_ring::addr::Addr::Tcp(hp)) => {
                let to = hp.to_socket_addrs().map_err(io)?.next().ok_or(IpcError::Unreachable)?;
                let s = TcpStream::connect_timeout(&to, STALL).map_err(io)?;
                s.set_nodelay(true).map_err(io)?;
                opened(s, |s| peer_copy::open_tcp(s, a)).map_err(refused)
            }
            // TLS ends in this supervisor: the worker gets one end of a
            // socket pair, a thread relays between the other and the peer.
            Ok(pvgpu_ring::addr::Addr::Tls(hp)) => {
                let config = peer.tls.as_ref().ok_or(IpcError::Unknown)?;
                let mut s = crate::tls::connect(config, &hp, STALL).map_err(io)?;
                peer_copy::open_tcp(&mut s, a).map_err(refused)?;
                widen(&s.sock);
                let (worker_end, relay_end) = UnixStream::pair().map_err(io)?;
                widen(&worker_end);
                widen(&relay_end);
                std::thread::Builder::new().name("pvgpu-copy-tls".into()).spawn(move || crate::tls::relay(s, relay_end)).map_err(io)?;
                Ok(worker_end.into())
            }
            _ => Err(IpcError::Unknown),
        }
    }
}

/// `s`, a connection made for a copy, opened with `open`: its reads and
/// writes stall for [`STALL`] at most, its socket buffers wide.
fn opened<S>(mut s: S, open: impl FnOnce(&mut S) -> Result<(), peer_copy::PeerCopyError>) -> Result<OwnedFd, peer_copy::PeerCopyError>
where
    S: std::io::Read + Write + std::os::fd::AsFd + Into<OwnedFd>,
{
    use nix::sys::socket::{setsockopt, sockopt};
    let stall = nix::sys::time::TimeVal::new(STALL.as_secs() as i64, 0);
    setsockopt(&s, sockopt::ReceiveTimeout, &stall).map_err(std::io::Error::from)?;
    setsockopt(&s, sockopt::SendTimeout, &stall).map_err(std::io::Error::from)?;
    open(&mut s)?;
    widen(&s);
    Ok(s.into())
}

/// Socket buffers a copy's connection asks for: a few pieces in flight
/// each way, above the kernel's default where the backend may (it runs
/// as root with `CAP_NET_ADMIN`), else as far as the kernel allows.
const SOCKET_BUFFER: usize = 8 << 20;

/// Widens `s`'s socket buffers for bulk bytes.
fn widen(s: &impl std::os::fd::AsFd) {
    use nix::sys::socket::{setsockopt, sockopt};
    if setsockopt(s, sockopt::SndBufForce, &SOCKET_BUFFER).is_err() {
        let _ = setsockopt(s, sockopt::SndBuf, &SOCKET_BUFFER);
    }
    if setsockopt(s, sockopt::RcvBufForce, &SOCKET_BUFFER).is_err() {
        let _ = setsockopt(s, sockopt::RcvBuf, &SOCKET_BUFFER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn arrive(c: &Copies, a: Arrival) -> (bool, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let fd = OwnedFd::from(ours.try_clone().unwrap());
        let took = c.arrive(a, &ours, fd);
        (took, theirs)
    }

    fn verdict(s: &mut UnixStream) -> [u8; 16] {
        let mut b = [0; 16];
        s.read_exact(&mut b).unwrap();
        b
    }

    #[test]
    fn a_ticket_takes_one_connection_of_its_length_for_its_session() {
        let c = Copies::default();
        let t = c.open(7, 100).unwrap();
        assert!(!arrive(&c, Arrival { ticket: t, len: 99 }).0, "another length");
        assert!(!arrive(&c, Arrival { ticket: [0; 16], len: 100 }).0, "an unknown ticket");
        let (took, mut sender) = arrive(&c, Arrival { ticket: t, len: 100 });
        assert!(took);
        assert_eq!(verdict(&mut sender)[8..12], [0, 0, 0, 0], "accepted");
        assert!(!arrive(&c, Arrival { ticket: t, len: 100 }).0, "a second connection");
        assert_eq!(c.take(8, &t, Duration::ZERO).err(), Some(IpcError::Unknown), "another session's ticket");
        assert!(c.take(7, &t, Duration::ZERO).is_ok());
        assert_eq!(c.take(7, &t, Duration::ZERO).err(), Some(IpcError::Unknown), "used up");
    }

    #[test]
    fn a_session_holds_one_ticket_and_its_tickets_end_with_it() {
        let c = Copies::default();
        let first = c.open(1, 10).unwrap();
        let second = c.open(1, 10).unwrap();
        assert_ne!(first, second);
        assert!(!arrive(&c, Arrival { ticket: first, len: 10 }).0, "replaced");
        c.end_session(1);
        assert!(!arrive(&c, Arrival { ticket: second, len: 10 }).0, "ended");
    }

    #[test]
    fn a_take_waits_for_its_connection() {
        let c = std::sync::Arc::new(Copies::default());
        let t = c.open(3, 5).unwrap();
        let c2 = c.clone();
        let taker = std::thread::spawn(move || c2.take(3, &t, Duration::from_secs(20)).is_ok());
        std::thread::sleep(Duration::from_millis(50));
        let (took, _sender) = arrive(&c, Arrival { ticket: t, len: 5 });
        assert!(took);
        assert!(taker.join().unwrap());
        let t = c.open(3, 5).unwrap();
        assert_eq!(c.take(3, &t, Duration::from_millis(20)).err(), Some(IpcError::Unknown), "none came");
    }

    #[test]
    fn connections_go_only_to_listed_peers_over_local_and_tcp() {
        let c = Copies::default();
        let a = Arrival { ticket: [1; 16], len: 1 };
        assert_eq!(c.connect("tcp:127.0.0.1:9", a).err(), Some(IpcError::Unknown), "no peers");
        let link = |address: &str| PeerLink { address: address.into(), tls: None };
        c.set_peers(vec![link("tls:127.0.0.1:9"), link("tcp:127.0.0.1:1"), link("rdma:127.0.0.1:9")]);
        assert_eq!(c.connect("tcp:10.0.0.1:9", a).err(), Some(IpcError::Unknown), "not listed");
        assert_eq!(c.connect("tls:127.0.0.1:9", a).err(), Some(IpcError::Unknown), "TLS without the peer's authority");
        assert_eq!(c.connect("rdma:127.0.0.1:9", a).err(), Some(IpcError::Unknown), "RDMA is not sent to");
        assert_eq!(c.connect("tcp:127.0.0.1:1", a).err(), Some(IpcError::Unreachable), "listed, nobody there");
    }
}
