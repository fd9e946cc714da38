//! What one peer holds across all its sessions (`--peer-mem-quota`), and
//! what each of its sessions holds (read by the control socket).
//!
//! Sessions run in separate worker processes, so a peer's total lives in
//! shared memory: one small memfd per peer, made by the supervisor and
//! mapped by each of the peer's sessions. It holds the cap (`u64::MAX`
//! without a quota), the peer's total, and one *seat* per session: what
//! that session holds now and which devices it has contexts on. A
//! session changes only its own seat and moves the total by the same
//! amount with a compare-and-swap that refuses to pass the cap, so two
//! sessions of one peer allocating at once cannot both pass it. When a
//! session ends (even killed), the supervisor takes its seat's amount off
//! the total.
//!
//! ```text
//! offset 0: cap    (AtomicU64, written by the supervisor: a tenant's
//!                  quota may change while its sessions run)
//!        8: total  (AtomicU64)
//!       16: seat 0: held (AtomicU64), devices (AtomicU64, bit n: device n)
//!       32: seat 1 ...
//! ```

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

const CAP: usize = 0;
const TOTAL: usize = 8;
const SEATS: usize = 16;
/// Bytes of one seat: what the session holds, then its devices.
const SEAT: usize = 16;

/// A peer's ledger, mapped.
struct Mem {
    map: memmap2::MmapRaw,
    seats: usize,
}

impl Mem {
    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset + 8 <= self.map.len() && offset % 8 == 0, "ledger word out of range");
        // SAFETY: in bounds and 8-aligned (checked; the mapping is page
        // aligned); the memory is shared and reached only through atomics,
        // and AtomicU64 has the layout of u64. The mapping outlives `self`.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    fn seat(&self, index: usize) -> &AtomicU64 {
        self.word(SEATS + SEAT * index)
    }

    fn devices(&self, index: usize) -> &AtomicU64 {
        self.word(SEATS + SEAT * index + 8)
    }

    fn cap(&self) -> u64 {
        self.word(CAP).load(Ordering::Relaxed)
    }
}

fn len_for(seats: usize) -> usize {
    SEATS + SEAT * seats
}

/// A session's view of its peer's ledger: it moves its own seat.
#[derive(Clone)]
pub struct LedgerView {
    mem: Arc<Mem>,
    index: usize,
}

impl std::fmt::Debug for LedgerView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LedgerView(seat {} of {})", self.index, self.mem.seats)
    }
}

impl LedgerView {
    /// Maps ledger `fd` (from the supervisor) as seat `index`.
    pub fn map(fd: OwnedFd, index: usize) -> io::Result<LedgerView> {
        let file = std::fs::File::from(fd);
        let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        if len < SEATS || index >= (len - SEATS) / SEAT {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ledger seat out of range"));
        }
        let map = memmap2::MmapOptions::new().len(len).map_raw(&file)?;
        Ok(LedgerView { mem: Arc::new(Mem { map, seats: (len - SEATS) / SEAT }), index })
    }

    /// Sets this session's holding to `amount` if the peer's total stays
    /// within the cap (or the holding shrinks); says whether it did.
    pub fn reserve(&self, amount: u64) -> bool {
        let (total, seat) = (self.mem.word(TOTAL), self.mem.seat(self.index));
        let mine = seat.load(Ordering::Relaxed);
        let cap = self.mem.cap();
        // SYNC POINT: the total's compare-and-swap orders this session's
        // change against other sessions' (and the supervisor's clean-up,
        // which subtracts a finished seat with fetch_sub).
        let r = total.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            let new = t.saturating_sub(mine).saturating_add(amount);
            (amount <= mine || new <= cap).then_some(new)
        });
        if r.is_ok() {
            // Only this session writes its seat while it runs.
            seat.store(amount, Ordering::Release);
        }
        r.is_ok()
    }

    /// Sets this session's holding to `amount`, whatever the cap (what it
    /// holds after a request, already admitted by [`reserve`](Self::reserve)
    /// or smaller).
    pub fn settle(&self, amount: u64) {
        let seat = self.mem.seat(self.index);
        let mine = seat.load(Ordering::Relaxed);
        if mine == amount {
            return;
        }
        let total = self.mem.word(TOTAL);
        if amount > mine {
            total.fetch_add(amount - mine, Ordering::AcqRel);
        } else {
            total.fetch_sub(mine - amount, Ordering::AcqRel);
        }
        seat.store(amount, Ordering::Release);
    }

    /// The peer's total and cap.
    pub fn peer_total(&self) -> (u64, u64) {
        (self.mem.word(TOTAL).load(Ordering::Acquire), self.mem.cap())
    }

    /// What this session holds now.
    pub fn held(&self) -> u64 {
        self.mem.seat(self.index).load(Ordering::Acquire)
    }

    /// Notes that the session has a context on device `ordinal` (devices
    /// past 63 are not told apart).
    pub fn note_device(&self, ordinal: usize) {
        // A report for operators: no other memory is ordered by it.
        self.mem.devices(self.index).fetch_or(1 << ordinal.min(63), Ordering::Relaxed);
    }

    /// The devices the session has had contexts on, lowest first.
    pub fn devices(&self) -> Vec<usize> {
        let bits = self.mem.devices(self.index).load(Ordering::Relaxed);
        (0..64).filter(|n| bits & (1 << n) != 0).collect()
    }
}

/// One peer's ledger, as the supervisor holds it.
struct Ledger {
    mem: Arc<Mem>,
    fd: OwnedFd,
    taken: Mutex<Vec<bool>>,
}

/// A session's seat in its peer's ledger, held by the supervisor until the
/// session has ended; then what the seat holds leaves the peer's total.
pub struct Seat {
    ledger: Arc<Ledger>,
    index: usize,
}

impl Seat {
    /// The session's view, in this process.
    pub fn view(&self) -> LedgerView {
        LedgerView { mem: self.ledger.mem.clone(), index: self.index }
    }

    /// The ledger's descriptor, for a worker process to map.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ledger.fd.as_fd()
    }

    /// The seat's index.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let seat = self.ledger.mem.seat(self.index);
        // The session has ended: nothing else writes this seat now.
        let held = seat.swap(0, Ordering::AcqRel);
        self.ledger.mem.word(TOTAL).fetch_sub(held, Ordering::AcqRel);
        self.ledger.mem.devices(self.index).store(0, Ordering::Relaxed);
        if let Some(t) = self.ledger.taken.lock().unwrap_or_else(|p| p.into_inner()).get_mut(self.index) {
            *t = false;
        }
    }
}

/// Every peer's ledger, made on a peer's first session and gone with its
/// last.
pub struct Ledgers {
    cap: u64,
    seats: usize,
    by_peer: Mutex<HashMap<String, Weak<Ledger>>>,
}

impl Ledgers {
    /// Ledgers capping each peer at `cap` bytes over at most `seats`
    /// sessions at once.
    pub fn new(cap: u64, seats: usize) -> Ledgers {
        Ledgers { cap, seats: seats.max(1), by_peer: Mutex::new(HashMap::new()) }
    }

    /// A seat for a new session of `peer`.
    pub fn seat(&self, peer: &str) -> io::Result<Seat> {
        self.seat_capped(peer, self.cap)
    }

    /// A seat for a new session of `peer`, whose sessions together may
    /// hold `cap` bytes (a tenant's quota: it replaces the cap its live
    /// sessions had).
    pub fn seat_capped(&self, peer: &str, cap: u64) -> io::Result<Seat> {
        let mut by_peer = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        by_peer.retain(|_, l| l.strong_count() > 0);
        let ledger = match by_peer.get(peer).and_then(Weak::upgrade) {
            Some(l) => l,
            None => {
                let l = Arc::new(self.make()?);
                by_peer.insert(peer.to_string(), Arc::downgrade(&l));
                l
            }
        };
        // Sessions read the cap at each reservation; what they hold
        // already stays (a lower cap stops them growing).
        ledger.mem.word(CAP).store(cap, Ordering::Relaxed);
        let index = {
            let mut taken = ledger.taken.lock().unwrap_or_else(|p| p.into_inner());
            let i = taken.iter().position(|t| !t).ok_or_else(|| io::Error::other("every seat of the peer's ledger is taken"))?;
            taken[i] = true;
            i
        };
        Ok(Seat { ledger, index })
    }

    /// Sets the cap of `peer`'s sessions, if it has any now; says whether
    /// it had.
    pub fn set_cap(&self, peer: &str, cap: u64) -> bool {
        let by_peer = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(ledger) = by_peer.get(peer).and_then(Weak::upgrade) else { return false };
        ledger.mem.word(CAP).store(cap, Ordering::Relaxed);
        true
    }

    /// What `peer`'s sessions hold together now, and its cap.
    pub fn total(&self, peer: &str) -> Option<(u64, u64)> {
        let by_peer = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        let ledger = by_peer.get(peer).and_then(Weak::upgrade)?;
        Some((ledger.mem.word(TOTAL).load(Ordering::Acquire), ledger.mem.cap()))
    }

    fn make(&self) -> io::Result<Ledger> {
        use nix::sys::memfd::{MFdFlags, memfd_create};
        let fd = memfd_create(c"pvgpu-ledger", MFdFlags::MFD_CLOEXEC).map_err(io::Error::from)?;
        let file = std::fs::File::from(fd);
        file.set_len(len_for(self.seats) as u64)?;
        let map = memmap2::MmapOptions::new().len(len_for(self.seats)).map_raw(&file)?;
        let mem = Arc::new(Mem { map, seats: self.seats });
        mem.word(CAP).store(self.cap, Ordering::Relaxed);
        Ok(Ledger { mem, fd: OwnedFd::from(file), taken: Mutex::new(vec![false; self.seats]) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_sessions_share_one_cap() {
        let ledgers = Ledgers::new(100, 4);
        let (a, b) = (ledgers.seat("uid:1").unwrap(), ledgers.seat("uid:1").unwrap());
        let other = ledgers.seat("uid:2").unwrap();
        let (va, vb) = (a.view(), b.view());
        assert!(va.reserve(60));
        assert!(!vb.reserve(50), "two sessions together passed the peer's cap");
        assert!(vb.reserve(40));
        assert!(other.view().reserve(100), "another peer has its own cap");
        // Shrinking is always allowed; so is settling.
        assert!(va.reserve(10));
        assert!(vb.reserve(90));
        va.settle(0);
        assert_eq!(va.peer_total(), (90, 100));
        assert_eq!((va.held(), vb.held()), (0, 90));
        vb.note_device(1);
        vb.note_device(3);
        assert_eq!(vb.devices(), [1, 3]);
        assert!(va.devices().is_empty(), "a session's devices are its own");
        // A session that ends gives back what its seat held, even if it
        // never settled (a killed worker).
        drop(b);
        assert_eq!(va.peer_total(), (0, 100));
        assert!(va.reserve(100));
    }

    /// A worker maps the supervisor's memfd: the same counters.
    #[test]
    fn a_mapped_view_moves_the_same_total() {
        let ledgers = Ledgers::new(1 << 20, 2);
        let seat = ledgers.seat("tcp:10.0.0.1").unwrap();
        let dup = seat.fd().try_clone_to_owned().unwrap();
        let v = LedgerView::map(dup, seat.index()).unwrap();
        assert!(v.reserve(4096));
        assert_eq!(seat.view().peer_total(), (4096, 1 << 20));
        let bad = LedgerView::map(seat.fd().try_clone_to_owned().unwrap(), 2);
        assert!(bad.is_err());
        drop(seat);
        assert_eq!(v.peer_total(), (0, 1 << 20));
    }

    /// A tenant's quota changes under its live sessions: a lower cap stops
    /// them growing, a higher one lets them.
    #[test]
    fn a_cap_can_change_while_sessions_run() {
        let ledgers = Ledgers::new(u64::MAX, 4);
        let a = ledgers.seat_capped("tenant:a", 100).unwrap();
        assert!(a.view().reserve(80));
        assert!(ledgers.set_cap("tenant:a", 50));
        assert!(!a.view().reserve(90), "past the lowered cap");
        assert!(a.view().reserve(40), "shrinking is allowed");
        let b = ledgers.seat_capped("tenant:a", 200).unwrap();
        assert!(b.view().reserve(150));
        assert_eq!(ledgers.total("tenant:a"), Some((190, 200)));
        assert!(!ledgers.set_cap("tenant:nobody", 1));
    }

    #[test]
    fn seats_are_bounded_and_given_back() {
        let ledgers = Ledgers::new(1, 1);
        let s = ledgers.seat("xen:3").unwrap();
        assert!(ledgers.seat("xen:3").is_err());
        drop(s);
        ledgers.seat("xen:3").unwrap();
    }
}
