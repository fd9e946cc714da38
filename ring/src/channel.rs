//! A single-producer/single-consumer channel of variable-length records over
//! shared memory, with Xen-style event indices.
//!
//! Each channel has a power-of-two byte buffer and four 32-bit indices, all
//! free-running (they wrap at 2^32; positions are taken modulo the buffer
//! size):
//!
//! | index        | written by | meaning                                        |
//! |--------------|------------|------------------------------------------------|
//! | `prod`       | producer   | end of the last published record               |
//! | `cons`       | consumer   | end of the last record the consumer is done with |
//! | `prod_event` | consumer   | "notify me when `prod` passes this" (consumer sleeping) |
//! | `cons_event` | producer   | "notify me when `cons` passes this" (producer waiting for space) |
//!
//! A record is an 8-byte record header (`len: u32`, `magic: u32`) and `len`
//! bytes, padded to a multiple of 8; records may wrap around the end of the
//! buffer. A header never wraps: it starts on a multiple of 8 and the
//! buffer's size is one.
//!
//! The header word is the record's publication: the producer writes the
//! payload, zeroes the word where the record after it will start, then
//! stores the header as one 64-bit atomic word (release), then `prod`. The
//! consumer looks at the header word where the next record starts, not at
//! `prod`: a waiting consumer then gets a small record and its publication
//! in one cache-line transfer instead of two in a row (`prod`'s line, then
//! the record's). Zero means "nothing yet": the buffers start zeroed, and
//! each record zeroes the slot of the next before it is published, so
//! bytes left from the last lap around the buffer are never taken for a
//! header. That slot must be free, so the producer keeps 8 bytes of the
//! buffer unused. `prod` still says how far the producer has written, for
//! the wake-up rule below.
//!
//! The consumer copies every record out of shared memory before it looks at
//! it, and treats any impossible state as a broken peer: a bad record
//! magic, a record longer than the limit, a consumer position ahead of the
//! producer's. A broken channel stays broken; the session that owns it
//! ends.
//!
//! Notification follows `xen/include/public/io/ring.h`: after publishing
//! `prod`, the producer notifies iff `prod_event` lies in `(old, new]`; a
//! consumer about to sleep sets `prod_event = read_pos + 1` and re-checks
//! the header word at `read_pos` before it blocks, so no wake-up is lost.
//! The same rule runs the other way for a producer waiting for space.

use crate::sync::{AtomicU32, AtomicU64, Ordering, fence};

/// Bytes of record header.
pub const RECORD_HEADER: u32 = 8;
/// Magic in every record header ("PVGR").
pub const RECORD_MAGIC: u32 = 0x5247_5650;

/// The header word of a record of `len` bytes, as stored (little-endian
/// `len`, then the magic).
pub const fn header_word(len: u32) -> u64 {
    (len as u64) | ((RECORD_MAGIC as u64) << 32)
}

/// Rounds up to the record alignment (8).
pub const fn record_size(payload: u32) -> u32 {
    (RECORD_HEADER + payload + 7) & !7
}

/// Why a channel operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// The peer published an index that cannot happen.
    #[error("Peer published an impossible index: {what} (prod {prod}, cons {cons}, capacity {capacity})")]
    BadIndex {
        /// Which check failed.
        what: &'static str,
        /// Producer index seen.
        prod: u32,
        /// Consumer index seen.
        cons: u32,
        /// Buffer size.
        capacity: u32,
    },
    /// A record header is corrupt.
    #[error("Corrupt record at position {pos}: {what}")]
    BadRecord {
        /// Position of the record.
        pos: u32,
        /// What is wrong with it.
        what: &'static str,
    },
    /// The record is larger than this channel accepts.
    #[error("Record of {len} bytes is larger than the channel limit of {max}")]
    TooLarge {
        /// Record payload length.
        len: usize,
        /// Largest payload the channel accepts.
        max: u32,
    },
}

/// The memory a channel lives in: four indices and a power-of-two buffer.
///
/// Implemented over raw shared memory by [`crate::region`], and over loom's
/// model types in the loom tests.
pub trait ChannelMemory {
    /// Producer-written end of published records.
    fn prod(&self) -> &AtomicU32;
    /// Consumer-written end of consumed records.
    fn cons(&self) -> &AtomicU32;
    /// Consumer-written wake-up threshold for `prod`.
    fn prod_event(&self) -> &AtomicU32;
    /// Producer-written wake-up threshold for `cons`.
    fn cons_event(&self) -> &AtomicU32;
    /// The 8 bytes at `pos` (a multiple of 8 below `capacity()`) as one
    /// atomic word: a record's header.
    fn header(&self, pos: u32) -> &AtomicU64;
    /// Buffer size in bytes: a power of two, at least 64, fixed for the
    /// channel's life (from the local copy of the geometry, never re-read
    /// from shared memory).
    fn capacity(&self) -> u32;
    /// Copies `src` into the buffer at `pos`.
    ///
    /// # Safety
    /// `pos + src.len() <= capacity()`, and by the index protocol the peer
    /// does not read these bytes concurrently.
    unsafe fn write(&self, pos: u32, src: &[u8]);
    /// Copies bytes at `pos` into `dst`.
    ///
    /// # Safety
    /// `pos + dst.len() <= capacity()`. The peer may write concurrently only
    /// if it is broken; the copy is then garbage, which the caller validates.
    unsafe fn read(&self, pos: u32, dst: &mut [u8]);
}

/// Whether the peer must be notified after moving an index from `old` to
/// `new` while the peer's wake-up threshold is `event` (ring.h's rule).
#[inline]
pub fn need_notify(old: u32, new: u32, event: u32) -> bool {
    new.wrapping_sub(event) < new.wrapping_sub(old)
}

fn write_wrapped<M: ChannelMemory>(m: &M, pos: u32, mut src: &[u8]) {
    let cap = m.capacity();
    let mut at = pos & (cap - 1);
    while !src.is_empty() {
        let n = ((cap - at) as usize).min(src.len());
        // SAFETY: at < cap and n <= cap - at, so the range is in bounds; the
        // producer owns [prod, cons + cap) by the index protocol.
        unsafe { m.write(at, &src[..n]) };
        src = &src[n..];
        at = 0;
    }
}

fn read_wrapped<M: ChannelMemory>(m: &M, pos: u32, mut dst: &mut [u8]) {
    let cap = m.capacity();
    let mut at = pos & (cap - 1);
    while !dst.is_empty() {
        let n = ((cap - at) as usize).min(dst.len());
        let (head, rest) = dst.split_at_mut(n);
        // SAFETY: at < cap and n <= cap - at, so the range is in bounds.
        unsafe { m.read(at, head) };
        dst = rest;
        at = 0;
    }
}

/// Producer end of a channel.
pub struct Producer<M: ChannelMemory> {
    mem: M,
    prod: u32,
    /// The consumer's position when last read. Space up to it is known
    /// free, so a send reads `cons` (a cache line the consumer writes on
    /// every record) only when that space runs short.
    cons_seen: u32,
    max_record: u32,
    broken: Option<ChannelError>,
}

/// Result of [`Producer::try_send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Published; `notify` says whether the consumer asked to be woken.
    Yes {
        /// Whether to signal the peer.
        notify: bool,
    },
    /// Not enough free space now.
    Full,
}

impl<M: ChannelMemory> Producer<M> {
    /// A producer over a fresh channel (all indices zero) or one whose
    /// `prod` this side wrote earlier.
    pub fn new(mem: M, max_record: u32) -> Self {
        let cap = mem.capacity();
        assert!(cap.is_power_of_two() && cap >= 64, "channel capacity must be a power of two >= 64");
        let max_record = max_record.min(cap - 2 * RECORD_HEADER);
        let prod = mem.prod().load(Ordering::Relaxed);
        Producer { mem, prod, cons_seen: prod, max_record, broken: None }
    }

    /// Largest record payload accepted.
    pub fn max_record(&self) -> u32 {
        self.max_record
    }

    /// Position after the last record published.
    pub fn position(&self) -> u32 {
        self.prod
    }

    /// The consumer's published position, checked for sanity.
    pub fn consumed(&mut self) -> Result<u32, ChannelError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        // SYNC POINT: pairs with the Release store of `cons` in
        // Consumer::release; once we see it, the consumer has finished
        // reading (and executing) every record before it.
        let cons = self.mem.cons().load(Ordering::Acquire);
        let used = self.prod.wrapping_sub(cons);
        if used > self.mem.capacity() {
            let e = ChannelError::BadIndex { what: "cons ahead of prod", prod: self.prod, cons, capacity: self.mem.capacity() };
            self.broken = Some(e);
            return Err(e);
        }
        self.cons_seen = cons;
        Ok(cons)
    }

    /// Free bytes now.
    pub fn free(&mut self) -> Result<u32, ChannelError> {
        let cons = self.consumed()?;
        Ok(self.mem.capacity() - self.prod.wrapping_sub(cons))
    }

    /// Publishes one record made of `parts`, if there is room.
    pub fn try_send(&mut self, parts: &[&[u8]]) -> Result<Sent, ChannelError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_record as usize {
            return Err(ChannelError::TooLarge { len, max: self.max_record });
        }
        let size = record_size(len as u32);
        if let Some(e) = self.broken {
            return Err(e);
        }
        // The record and the next record's header slot. Known free space
        // first; the consumer's index only when short.
        let need = size + RECORD_HEADER;
        if self.mem.capacity() - self.prod.wrapping_sub(self.cons_seen) < need && self.free()? < need {
            return Ok(Sent::Full);
        }
        let old = self.prod;
        let mut at = old.wrapping_add(RECORD_HEADER);
        for p in parts {
            write_wrapped(&self.mem, at, p);
            at = at.wrapping_add(p.len() as u32);
        }
        let mask = self.mem.capacity() - 1;
        self.mem.header(old.wrapping_add(size) & mask).store(0, Ordering::Relaxed);
        // SYNC POINT: pairs with the Acquire load of the header word in
        // Consumer::try_recv: the payload and the zeroed slot after it are
        // visible before the header that publishes them.
        self.mem.header(old & mask).store(header_word(len as u32), Ordering::Release);
        self.prod = old.wrapping_add(size);
        // No reader acquires `prod` (records are published by their header
        // word); it is ordered for the wake-up rule by the fence below.
        self.mem.prod().store(self.prod, Ordering::Relaxed);
        // SYNC POINT: pairs with the SeqCst fence in Consumer::prepare_wait,
        // between its store of `prod_event` and its re-read of the header
        // word: either we see its new event here, or it sees our header.
        fence(Ordering::SeqCst);
        let event = self.mem.prod_event().load(Ordering::Relaxed);
        Ok(Sent::Yes { notify: need_notify(old, self.prod, event) })
    }

    /// Asks to be notified when the consumer frees space, then re-checks.
    /// Returns the free space after arming: if it is still less than
    /// needed, the caller may block on its notifier.
    pub fn prepare_wait_for_space(&mut self) -> Result<u32, ChannelError> {
        let cons = self.consumed()?;
        self.mem.cons_event().store(cons.wrapping_add(1), Ordering::Relaxed);
        // SYNC POINT: pairs with the SeqCst fence in Consumer::release,
        // between its store of `cons` and its read of `cons_event`.
        fence(Ordering::SeqCst);
        self.free()
    }
}

/// Consumer end of a channel.
pub struct Consumer<M: ChannelMemory> {
    mem: M,
    /// End of the records copied out so far.
    read_pos: u32,
    /// End of the records released (published as `cons`).
    cons: u32,
    max_record: u32,
    broken: Option<ChannelError>,
}

impl<M: ChannelMemory> Consumer<M> {
    /// A consumer over a fresh channel.
    pub fn new(mem: M, max_record: u32) -> Self {
        let cap = mem.capacity();
        assert!(cap.is_power_of_two() && cap >= 64, "channel capacity must be a power of two >= 64");
        let max_record = max_record.min(cap - 2 * RECORD_HEADER);
        let cons = mem.cons().load(Ordering::Relaxed);
        Consumer { mem, read_pos: cons, cons, max_record, broken: None }
    }

    fn fail(&mut self, e: ChannelError) -> ChannelError {
        self.broken = Some(e);
        e
    }

    /// Position after the last record copied out.
    pub fn position(&self) -> u32 {
        self.read_pos
    }

    /// Whether the producer has published anything not yet copied out.
    pub fn has_pending(&mut self) -> Result<bool, ChannelError> {
        Ok(self.next_header()? != 0)
    }

    /// The header word where the next record starts (zero: none yet).
    fn next_header(&mut self) -> Result<u64, ChannelError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        // SYNC POINT: pairs with the Release store of the header word in
        // Producer::try_send: the payload is visible once we see it.
        Ok(self.mem.header(self.read_pos & (self.mem.capacity() - 1)).load(Ordering::Acquire))
    }

    /// Copies the next record into `out` (replacing its contents). Returns
    /// `false` when there is none. The record stays reserved until
    /// [`Consumer::release`].
    pub fn try_recv(&mut self, out: &mut Vec<u8>) -> Result<bool, ChannelError> {
        let word = self.next_header()?;
        if word == 0 {
            return Ok(false);
        }
        let pos = self.read_pos;
        let (len, magic) = (word as u32, (word >> 32) as u32);
        if magic != RECORD_MAGIC {
            return Err(self.fail(ChannelError::BadRecord { pos, what: "bad magic" }));
        }
        if len > self.max_record {
            return Err(self.fail(ChannelError::BadRecord { pos, what: "longer than the channel limit" }));
        }
        out.clear();
        out.resize(len as usize, 0);
        read_wrapped(&self.mem, pos.wrapping_add(RECORD_HEADER), out);
        self.read_pos = pos.wrapping_add(record_size(len));
        Ok(true)
    }

    /// Publishes that every record copied out so far is done with: the
    /// producer may reuse its bytes (and any data-area bytes it named).
    /// Returns whether the producer asked to be woken.
    pub fn release(&mut self) -> bool {
        if self.cons == self.read_pos {
            return false;
        }
        let old = self.cons;
        self.cons = self.read_pos;
        // SYNC POINT: pairs with the Acquire load of `cons` in
        // Producer::consumed: our reads of the records (and of the data
        // they named) happen before the producer reuses their bytes.
        self.mem.cons().store(self.cons, Ordering::Release);
        // SYNC POINT: pairs with the SeqCst fence in
        // Producer::prepare_wait_for_space.
        fence(Ordering::SeqCst);
        let event = self.mem.cons_event().load(Ordering::Relaxed);
        need_notify(old, self.cons, event)
    }

    /// Asks to be notified when the producer publishes more, then re-checks.
    /// Returns `true` if something is pending (do not sleep).
    pub fn prepare_wait(&mut self) -> Result<bool, ChannelError> {
        if self.has_pending()? {
            return Ok(true);
        }
        self.mem.prod_event().store(self.read_pos.wrapping_add(1), Ordering::Relaxed);
        // SYNC POINT: pairs with the SeqCst fence in Producer::try_send,
        // between its store of the header word and its read of
        // `prod_event`.
        fence(Ordering::SeqCst);
        self.has_pending()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::{RegionChannel, SharedRegion};

    fn pair(cap: u32) -> (Producer<RegionChannel>, Consumer<RegionChannel>, SharedRegion) {
        let r = SharedRegion::heap(4096 + cap as usize);
        let p = Producer::new(r.channel(0, 4096, cap).unwrap(), u32::MAX);
        let c = Consumer::new(r.channel(0, 4096, cap).unwrap(), u32::MAX);
        (p, c, r)
    }

    #[test]
    fn records_round_trip_and_wrap() {
        let (mut p, mut c, _r) = pair(64);
        let mut out = Vec::new();
        for i in 0..100u32 {
            let body: Vec<u8> = (0..(i % 40)).map(|b| (b as u8) ^ (i as u8)).collect();
            assert_eq!(p.try_send(&[&body[..body.len() / 2], &body[body.len() / 2..]]).unwrap(), Sent::Yes { notify: false });
            assert!(c.try_recv(&mut out).unwrap());
            assert_eq!(out, body);
            assert!(!c.try_recv(&mut out).unwrap());
            c.release();
        }
    }

    #[test]
    fn full_until_released() {
        let (mut p, mut c, _r) = pair(64);
        // 24 + 24 bytes of records, and 8 kept for the next header slot.
        assert!(matches!(p.try_send(&[&[1; 16]]).unwrap(), Sent::Yes { .. }));
        assert!(matches!(p.try_send(&[&[2; 16]]).unwrap(), Sent::Yes { .. }));
        assert_eq!(p.try_send(&[&[3; 1]]).unwrap(), Sent::Full);
        let mut out = Vec::new();
        assert!(c.try_recv(&mut out).unwrap());
        // Copied out but not released: still full.
        assert_eq!(p.try_send(&[&[3; 1]]).unwrap(), Sent::Full);
        c.release();
        assert!(matches!(p.try_send(&[&[3; 1]]).unwrap(), Sent::Yes { .. }));
    }

    #[test]
    fn too_large_is_refused() {
        let (mut p, _c, _r) = pair(64);
        assert!(matches!(p.try_send(&[&[0; 49]]), Err(ChannelError::TooLarge { .. })));
        assert!(matches!(p.try_send(&[&[0; 48]]), Ok(Sent::Yes { .. })));
    }

    #[test]
    fn event_indices_drive_notification() {
        let (mut p, mut c, _r) = pair(256);
        // Consumer not waiting: no notification.
        assert_eq!(p.try_send(&[b"a"]).unwrap(), Sent::Yes { notify: false });
        let mut out = Vec::new();
        assert!(c.try_recv(&mut out).unwrap());
        // Consumer arms and finds nothing pending: the next send notifies once.
        assert!(!c.prepare_wait().unwrap());
        assert_eq!(p.try_send(&[b"b"]).unwrap(), Sent::Yes { notify: true });
        assert_eq!(p.try_send(&[b"c"]).unwrap(), Sent::Yes { notify: false });
        // A producer waiting for space is woken by the release.
        assert!(p.prepare_wait_for_space().unwrap() > 0);
        assert!(c.try_recv(&mut out).unwrap());
        assert!(c.release());
        assert!(!c.release());
    }

    #[test]
    fn arming_with_data_pending_says_so() {
        let (mut p, mut c, _r) = pair(256);
        p.try_send(&[b"x"]).unwrap();
        assert!(c.prepare_wait().unwrap());
    }

    #[test]
    fn need_notify_matches_ring_h() {
        assert!(need_notify(10, 11, 11));
        assert!(need_notify(10, 20, 11));
        assert!(need_notify(10, 20, 20));
        assert!(!need_notify(10, 20, 21));
        assert!(!need_notify(10, 20, 10));
        assert!(need_notify(u32::MAX - 1, 3, 0));
    }
}
