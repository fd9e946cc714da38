//! Connections still opening: one pool per transport, each with a total
//! deadline per connection and a bound per peer.
//!
//! A connection enters its transport's pool when it is accepted and leaves
//! it when its opening is complete (a local hello, a TCP key check, a TLS
//! handshake and key check) or has failed. While in the pool it holds no
//! worker and no session slot, and the pool holds a duplicate of its
//! socket: the pool *cuts* a connection by shutting that socket down,
//! which ends whatever read or write its admission thread is blocked in.
//! It cuts
//!
//! - every connection whose opening has lasted its deadline, however many
//!   bytes it has sent meanwhile ([`PendingPool::expire`], called by the
//!   transport's listener every tick), and
//! - when the pool is full, the connection that has been opening the
//!   longest, to make room for a new one. An honest client opens in a
//!   round trip or two; holding a place against it means opening new
//!   connections faster than the pool's size per round trip, not merely
//!   keeping slow ones open.
//!
//! A peer (an IPv4 address, an IPv6 /64, a local user) may hold at most
//! [`PendingLimits::per_peer`] places of a pool; more are refused.

use super::slots::Full;
use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Limits of one transport's pool.
#[derive(Debug, Clone, Copy)]
pub struct PendingLimits {
    /// Connections opening at once.
    pub capacity: usize,
    /// Of one peer.
    pub per_peer: usize,
    /// How long an opening may take in all.
    pub deadline: Duration,
}

/// Why a connection's opening was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Cut {
    /// It took longer than the deadline.
    #[error("its opening took longer than {0:?}")]
    Deadline(Duration),
    /// The pool was full and it had been opening the longest.
    #[error("the pool of openings was full and it was the oldest")]
    Evicted,
}

/// What the pool shuts down to cut a connection: a duplicate of its
/// socket, or (RDMA) a handle on its rsocket.
pub enum Cutter {
    /// A kernel socket.
    Socket(OwnedFd),
    /// An rsocket.
    Rdma(pvgpu_rdma::RdmaStream),
}

impl From<OwnedFd> for Cutter {
    fn from(fd: OwnedFd) -> Cutter {
        Cutter::Socket(fd)
    }
}

impl Cutter {
    fn shut(&self) {
        match self {
            Cutter::Socket(fd) => {
                let _ = nix::sys::socket::shutdown(std::os::fd::AsRawFd::as_raw_fd(fd), nix::sys::socket::Shutdown::Both);
            }
            Cutter::Rdma(s) => s.shutdown(),
        }
    }
}

struct Entry {
    id: u64,
    peer: String,
    started: Instant,
    sock: Cutter,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// Oldest first.
    open: VecDeque<Entry>,
    per_peer: HashMap<String, usize>,
    /// Connections cut, by id, until their admission thread finds out.
    cut: HashMap<u64, Cut>,
}

/// One transport's connections still opening.
pub struct PendingPool {
    transport: &'static str,
    limits: PendingLimits,
    inner: Mutex<Inner>,
}

/// A place in a pool: dropped when the opening is over, whichever way.
pub struct Pending {
    pool: Arc<PendingPool>,
    id: u64,
}

impl PendingPool {
    /// A pool for `transport` under `limits`.
    pub fn new(transport: &'static str, limits: PendingLimits) -> Arc<PendingPool> {
        let limits = PendingLimits { capacity: limits.capacity.max(1), per_peer: limits.per_peer.max(1), ..limits };
        Arc::new(PendingPool { transport, limits, inner: Mutex::new(Inner::default()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a place for `peer`'s new connection, whose socket `sock` (a
    /// duplicate) the pool shuts down to cut it. A full pool cuts its
    /// oldest opening first.
    pub fn enter(self: &Arc<Self>, peer: &str, sock: impl Into<Cutter>) -> Result<Pending, Full> {
        let sock = sock.into();
        let mut g = self.lock();
        if g.per_peer.get(peer).copied().unwrap_or(0) >= self.limits.per_peer {
            return Err(Full::Peer(self.limits.per_peer));
        }
        if g.open.len() >= self.limits.capacity {
            if let Some(oldest) = g.open.pop_front() {
                tracing::debug!(transport = self.transport, peer = %oldest.peer, "pool of openings full: cutting the oldest");
                cut(&mut g, oldest, Cut::Evicted);
            }
        }
        let id = g.next;
        g.next += 1;
        *g.per_peer.entry(peer.to_string()).or_default() += 1;
        g.open.push_back(Entry { id, peer: peer.to_string(), started: Instant::now(), sock });
        Ok(Pending { pool: self.clone(), id })
    }

    /// Cuts every connection that has been opening for the deadline.
    pub fn expire(&self) {
        let mut g = self.lock();
        while g.open.front().is_some_and(|e| e.started.elapsed() >= self.limits.deadline) {
            if let Some(e) = g.open.pop_front() {
                cut(&mut g, e, Cut::Deadline(self.limits.deadline));
            }
        }
    }

    /// Connections opening now.
    pub fn len(&self) -> usize {
        self.lock().open.len()
    }

    /// Whether none is opening.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Shuts `e`'s socket down (its admission thread's reads and writes end)
/// and remembers why, for that thread.
fn cut(g: &mut Inner, e: Entry, why: Cut) {
    e.sock.shut();
    forget_peer(g, &e.peer);
    g.cut.insert(e.id, why);
}

fn forget_peer(g: &mut Inner, peer: &str) {
    if let Some(n) = g.per_peer.get_mut(peer) {
        *n -= 1;
        if *n == 0 {
            g.per_peer.remove(peer);
        }
    }
}

impl Pending {
    /// Ends the opening successfully, unless the pool cut it meanwhile (then
    /// its socket is shut down and the session must not start). Checked
    /// under the pool's lock, so a connection is either cut or finished,
    /// never both.
    pub fn finish(self) -> Result<(), Cut> {
        let mut g = self.pool.lock();
        match g.cut.remove(&self.id) {
            Some(why) => Err(why),
            None => {
                remove(&mut g, self.id);
                Ok(())
            }
        }
    }

    /// Why the pool cut this connection, if it did.
    pub fn cut(&self) -> Option<Cut> {
        self.pool.lock().cut.get(&self.id).copied()
    }
}

fn remove(g: &mut Inner, id: u64) {
    if let Some(at) = g.open.iter().position(|e| e.id == id) {
        if let Some(e) = g.open.remove(at) {
            forget_peer(g, &e.peer);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut g = self.pool.lock();
        if g.cut.remove(&self.id).is_none() {
            remove(&mut g, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    fn limits(capacity: usize, per_peer: usize, deadline_ms: u64) -> PendingLimits {
        PendingLimits { capacity, per_peer, deadline: Duration::from_millis(deadline_ms) }
    }

    fn conn() -> (UnixStream, OwnedFd) {
        let (a, b) = UnixStream::pair().unwrap();
        (a, OwnedFd::from(b))
    }

    /// A peer that keeps sending never outlives the deadline: the whole
    /// opening is bounded, not each read.
    #[test]
    fn the_deadline_is_total_and_unblocks_the_reader() {
        let pool = PendingPool::new("tcp", limits(4, 4, 300));
        let (a, b) = UnixStream::pair().unwrap();
        let p = pool.enter("tcp:10.0.0.1", OwnedFd::from(b.try_clone().unwrap())).unwrap();
        let reader = std::thread::spawn(move || {
            let mut b = b;
            let mut n = 0;
            let mut buf = [0u8; 1];
            while let Ok(1) = b.read(&mut buf) {
                n += 1;
            }
            n
        });
        let started = Instant::now();
        let mut a = a;
        // A byte every 50 ms: a read timeout would never fire.
        while started.elapsed() < Duration::from_millis(900) {
            use std::io::Write;
            if a.write_all(b"x").is_err() {
                break;
            }
            pool.expire();
            std::thread::sleep(Duration::from_millis(50));
        }
        let got = reader.join().unwrap();
        assert!(got < 12, "the reader went on for {got} bytes past its deadline");
        assert_eq!(p.cut(), Some(Cut::Deadline(Duration::from_millis(300))));
        assert_eq!(p.finish(), Err(Cut::Deadline(Duration::from_millis(300))));
        assert!(pool.is_empty());
    }

    #[test]
    fn a_full_pool_cuts_its_oldest_and_peers_are_bounded() {
        let pool = PendingPool::new("tcp", limits(3, 2, 60_000));
        let (_a1, s1) = conn();
        let (_a2, s2) = conn();
        let (_a3, s3) = conn();
        let first = pool.enter("tcp:10.0.0.1", s1).unwrap();
        let second = pool.enter("tcp:10.0.0.1", s2).unwrap();
        let (_x, sx) = conn();
        assert_eq!(pool.enter("tcp:10.0.0.1", sx).err().map(|e| e.to_string()), Some(Full::Peer(2).to_string()));
        let third = pool.enter("tcp:10.0.0.2", s3).unwrap();
        // Full: a newcomer takes the oldest's place.
        let (_a4, s4) = conn();
        let fourth = pool.enter("tcp:10.0.0.3", s4).unwrap();
        assert_eq!(first.finish(), Err(Cut::Evicted));
        assert_eq!(pool.len(), 3);
        // The evicted one's peer may open again.
        let (_a5, s5) = conn();
        let fifth = pool.enter("tcp:10.0.0.1", s5).unwrap();
        assert_eq!(second.finish(), Err(Cut::Evicted));
        for p in [third, fourth, fifth] {
            assert_eq!(p.finish(), Ok(()));
        }
        assert!(pool.is_empty());
    }
}
