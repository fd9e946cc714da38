//! The ring transport: request and response channels in a shared region,
//! bulk data through the region's data area, a doorbell to wake a sleeping
//! peer. Used by the local transport (memfd + eventfds) and, with grant
//! pages and an event channel, by Xen.
//!
//! Staging: bulk data of a request is copied into the data area, in a FIFO
//! of regions. A region is free again once the backend has published a
//! consumer position past the request that named it (the backend releases a
//! request only after it has finished with its data), and, for regions the
//! backend writes into (device-to-host copies), once the frontend has copied
//! the bytes out.

use super::{Staged, Transport};
use crate::error::{ProtocolError, StagingError, TransportError};
use pvgpu_ring::channel::{Consumer, Producer, Sent};
use pvgpu_ring::layout::{Geometry, MAX_RING_RECORD, init_region};
use pvgpu_ring::notify::{Notifier, NotifyError, Step, WaitError, Waiter};
use pvgpu_ring::proto::{DataRef, HEADER_LEN, Header};
use pvgpu_ring::region::{DataArea, RegionChannel, SharedRegion};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};
use zerocopy::IntoBytes;

#[derive(Debug)]
struct Entry {
    start: u64,
    /// Request-channel position after the request that uses it.
    pos: Option<u32>,
    /// Waiting for the frontend to copy it out.
    held: bool,
}

/// FIFO allocator over the staging part of the data area.
#[derive(Debug)]
pub(crate) struct Staging {
    cap: u64,
    head: u64,
    entries: VecDeque<Entry>,
}

fn reached(cons: u32, pos: u32) -> bool {
    (cons.wrapping_sub(pos) as i32) >= 0
}

impl Staging {
    pub(crate) fn new(cap: u64) -> Self {
        Staging { cap, head: 0, entries: VecDeque::new() }
    }

    /// Frees regions the backend is done with.
    pub(crate) fn reclaim(&mut self, cons: u32) {
        while let Some(e) = self.entries.front() {
            match e.pos {
                Some(p) if !e.held && reached(cons, p) => {
                    self.entries.pop_front();
                }
                _ => break,
            }
        }
        if self.entries.is_empty() {
            self.head = 0;
        }
    }

    /// A contiguous region of `len` bytes, if free.
    pub(crate) fn alloc(&mut self, len: u64, held: bool) -> Option<u64> {
        if len > self.cap {
            return None;
        }
        let start = match self.entries.front() {
            None => 0,
            Some(front) => {
                let tail = front.start;
                if self.head >= tail {
                    if self.cap - self.head >= len {
                        self.head
                    } else if len < tail {
                        0
                    } else {
                        return None;
                    }
                } else if self.head + len < tail {
                    self.head
                } else {
                    return None;
                }
            }
        };
        self.head = start + len;
        self.entries.push_back(Entry { start, pos: None, held });
        Some(start)
    }

    /// Records the request position of every region placed since the last
    /// request was sent.
    pub(crate) fn assign(&mut self, pos: u32) {
        for e in self.entries.iter_mut().rev() {
            if e.pos.is_some() {
                break;
            }
            e.pos = Some(pos);
        }
    }

    /// Ends the hold on the region starting at `start`.
    pub(crate) fn unhold(&mut self, start: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.start == start && e.held) {
            e.held = false;
        }
    }

    fn front_held(&self) -> bool {
        self.entries.front().is_some_and(|e| e.held || e.pos.is_none())
    }
}

/// Page-granular first-fit allocator over the pinned part of the data area.
#[derive(Debug, Default)]
pub(crate) struct Heap {
    free: BTreeMap<u64, u64>,
    used: BTreeMap<u64, u64>,
}

const PAGE: u64 = 4096;

impl Heap {
    pub(crate) fn new(start: u64, len: u64) -> Self {
        let mut h = Heap::default();
        if len >= PAGE {
            h.free.insert(start, len / PAGE * PAGE);
        }
        h
    }

    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        let need = len.max(1).checked_next_multiple_of(PAGE)?;
        let (&at, &size) = self.free.iter().find(|&(_, &size)| size >= need)?;
        self.free.remove(&at);
        if size > need {
            self.free.insert(at + need, size - need);
        }
        self.used.insert(at, need);
        Some(at)
    }

    pub(crate) fn free(&mut self, at: u64) -> bool {
        let Some(size) = self.used.remove(&at) else { return false };
        let (mut start, mut end) = (at, at + size);
        if let Some((&prev, &psize)) = self.free.range(..at).next_back() {
            if prev + psize == at {
                self.free.remove(&prev);
                start = prev;
            }
        }
        if let Some(nsize) = self.free.remove(&end) {
            end += nsize;
        }
        self.free.insert(start, end - start);
        true
    }

    /// The allocation containing `[off, off+len)`.
    pub(crate) fn containing(&self, off: u64, len: u64) -> Option<u64> {
        let (&at, &size) = self.used.range(..=off).next_back()?;
        (off.checked_add(len)? <= at + size).then_some(at)
    }
}

/// A connection over a shared region.
pub struct RingTransport {
    req: Producer<RegionChannel>,
    rsp: Consumer<RegionChannel>,
    area: DataArea,
    staging: Staging,
    heap: Heap,
    notifier: Box<dyn Notifier>,
    spin: Duration,
    /// See [`pvgpu_ring::notify::yield_after`].
    yield_after: Duration,
    timeout: Option<Duration>,
    kind: &'static str,
    region: SharedRegion,
    /// Whatever must live as long as the connection (Xen: the device claim
    /// and the reference directory); dropped last.
    keepalive: Vec<Box<dyn Send>>,
    /// Run before the doorbell goes in [`Transport::retire`].
    on_retire: Option<Box<dyn FnOnce() + Send>>,
}

/// The doorbell of a retired connection: nobody answers.
struct Retired;

impl Notifier for Retired {
    fn notify(&self) -> Result<(), NotifyError> {
        Err(NotifyError::PeerGone)
    }

    fn wait(&self, _: Option<Duration>) -> Result<pvgpu_ring::notify::Wake, NotifyError> {
        Err(NotifyError::PeerGone)
    }
}

/// A waiter on `notifier` with the connection's spin and timeout.
fn waiter(notifier: &dyn Notifier, spin: Duration, yield_after: Duration, timeout: Option<Duration>) -> Waiter<'_> {
    let mut w = Waiter::new(notifier, spin);
    w.yield_after = yield_after;
    w.deadline = timeout.map(|t| Instant::now() + t);
    w
}

fn wait_err(e: WaitError<TransportError>) -> TransportError {
    match e {
        WaitError::Check(e) => e,
        WaitError::Notify(NotifyError::PeerGone) => TransportError::BackendGone,
        WaitError::Notify(NotifyError::Io(e)) => TransportError::Io(e),
        WaitError::TimedOut => TransportError::Timeout,
    }
}

impl RingTransport {
    /// Builds the frontend end over a region, writing its control page. The
    /// first `staging` bytes of the data area stage copies; the rest is for
    /// page-locked host allocations.
    pub fn new(
        region: SharedRegion,
        g: &Geometry,
        staging: u64,
        notifier: Box<dyn Notifier>,
        spin: Duration,
        timeout: Option<Duration>,
        kind: &'static str,
    ) -> Result<Self, TransportError> {
        let ep = init_region(&region, g)?;
        let total = ep.data.len() as u64;
        let cap = staging.min(total) / PAGE * PAGE;
        Ok(RingTransport {
            req: Producer::new(ep.req, MAX_RING_RECORD),
            rsp: Consumer::new(ep.rsp, MAX_RING_RECORD),
            area: ep.data,
            staging: Staging::new(cap),
            heap: Heap::new(cap, total - cap),
            notifier,
            spin,
            yield_after: pvgpu_ring::notify::yield_after(spin),
            timeout,
            kind,
            region,
            keepalive: Vec::new(),
            on_retire: None,
        })
    }

    /// Runs `f` when the connection is retired, before its doorbell goes.
    pub fn on_retire(mut self, f: Box<dyn FnOnce() + Send>) -> Self {
        self.on_retire = Some(f);
        self
    }

    /// Keeps `k` alive as long as the transport, dropping it after the ring.
    pub fn with_keepalive(mut self, k: Box<dyn Send>) -> Self {
        self.keepalive.push(k);
        self
    }

    fn place(&mut self, len: usize, held: bool) -> Result<u64, TransportError> {
        let len = len as u64;
        if len > self.staging.cap {
            return Err(StagingError::TooLarge { len, cap: self.staging.cap }.into());
        }
        let cons = self.req.consumed()?;
        self.staging.reclaim(cons);
        if let Some(at) = self.staging.alloc(len, held) {
            return Ok(at);
        }
        let (req, staging, notifier) = (&mut self.req, &mut self.staging, &*self.notifier);
        waiter(notifier, self.spin, self.yield_after, self.timeout)
            .wait_until(|step| -> Result<Option<u64>, TransportError> {
                match step {
                    Step::Check | Step::Tick => {
                        let cons = req.consumed()?;
                        staging.reclaim(cons);
                        if let Some(at) = staging.alloc(len, held) {
                            return Ok(Some(at));
                        }
                        if staging.front_held() {
                            return Err(StagingError::Exhausted.into());
                        }
                        Ok(None)
                    }
                    Step::Arm => {
                        req.prepare_wait_for_space()?;
                        Ok(None)
                    }
                }
            })
            .map_err(wait_err)
    }
}

impl Transport for RingTransport {
    fn send(&mut self, h: &Header, parts: &[&[u8]]) -> Result<(), TransportError> {
        // The header and the parts, without an allocation for the common
        // case of at most three parts.
        let mut small: [&[u8]; 4] = [&[]; 4];
        let big: Vec<&[u8]>;
        let all: &[&[u8]] = if parts.len() < small.len() {
            small[0] = h.as_bytes();
            small[1..=parts.len()].copy_from_slice(parts);
            &small[..=parts.len()]
        } else {
            big = std::iter::once(h.as_bytes()).chain(parts.iter().copied()).collect();
            &big
        };
        let notify = match self.req.try_send(all)? {
            Sent::Yes { notify } => notify,
            Sent::Full => {
                let (req, notifier) = (&mut self.req, &*self.notifier);
                waiter(notifier, self.spin, self.yield_after, self.timeout)
                    .wait_until(|step| -> Result<Option<bool>, TransportError> {
                        match step {
                            Step::Check | Step::Tick => Ok(match req.try_send(all)? {
                                Sent::Yes { notify } => Some(notify),
                                Sent::Full => None,
                            }),
                            Step::Arm => {
                                req.prepare_wait_for_space()?;
                                Ok(None)
                            }
                        }
                    })
                    .map_err(wait_err)?
            }
        };
        self.staging.assign(self.req.position());
        if notify {
            self.notifier.notify().map_err(|e| wait_err(WaitError::Notify(e)))?;
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Header, TransportError> {
        self.recv_spinning(buf, self.spin)
    }

    fn recv_spinning(&mut self, buf: &mut Vec<u8>, spin: Duration) -> Result<Header, TransportError> {
        if !self.rsp.try_recv(buf)? {
            let (rsp, notifier) = (&mut self.rsp, &*self.notifier);
            let spin = spin.max(self.spin);
            waiter(notifier, spin, self.yield_after.min(spin), self.timeout)
                .wait_until(|step| -> Result<Option<()>, TransportError> {
                    match step {
                        Step::Check | Step::Tick => Ok(rsp.try_recv(buf)?.then_some(())),
                        Step::Arm => {
                            rsp.prepare_wait()?;
                            Ok(None)
                        }
                    }
                })
                .map_err(wait_err)?;
        }
        if self.rsp.release() {
            self.notifier.notify().map_err(|e| wait_err(WaitError::Notify(e)))?;
        }
        let h = Header::parse(buf)?;
        if buf.len() != HEADER_LEN + h.payload_len.get() as usize {
            return Err(ProtocolError::ReplyLength.into());
        }
        buf.drain(..HEADER_LEN);
        Ok(h)
    }

    fn max_chunk(&self) -> usize {
        // Small enough that copying one chunk into the area overlaps the
        // DMA of the one before it.
        ((self.staging.cap / 4) as usize).clamp(4096, 4 << 20)
    }

    fn pipeline_depth(&self) -> usize {
        3
    }

    fn max_inline(&self) -> usize {
        (self.req.max_record() as usize).saturating_sub(pvgpu_ring::proto::HEADER_LEN)
    }

    fn stage(&mut self, data: &[u8]) -> Result<Staged, TransportError> {
        if data.is_empty() {
            return Ok(Staged { dref: DataRef::area(0, 0), inline: false });
        }
        let at = self.place(data.len(), false)?;
        let p = self.area.ptr(at, data.len() as u64)?;
        // `p` is `data.len()` bytes of the data area (bounds-checked by `ptr`).
        // SAFETY: placed for this request alone; `data` is a live slice of
        // the program's memory, which is not in the area.
        unsafe { crate::bulk::copy(p, data.as_ptr(), data.len()) };
        Ok(Staged { dref: DataRef::area(at, data.len()), inline: false })
    }

    fn reserve(&mut self, len: usize) -> Result<Staged, TransportError> {
        if len == 0 {
            return Ok(Staged { dref: DataRef::area(0, 0), inline: false });
        }
        let at = self.place(len, true)?;
        Ok(Staged { dref: DataRef::area(at, len), inline: false })
    }

    fn fetch(&mut self, s: &Staged, _reply_tail: &[u8], dst: &mut [u8]) -> Result<(), TransportError> {
        let at = s.dref.offset.get();
        if !dst.is_empty() {
            let p = self.area.ptr(at, dst.len() as u64)?;
            // `p` is `dst.len()` bytes of the data area (bounds-checked).
            // SAFETY: the backend finished writing it before it replied;
            // `dst` is the program's memory, exclusively borrowed.
            unsafe { crate::bulk::copy(dst.as_mut_ptr(), p, dst.len()) };
            self.staging.unhold(at);
        }
        Ok(())
    }

    fn discard(&mut self, s: &Staged) {
        self.staging.unhold(s.dref.offset.get());
    }

    fn area_staging(&self) -> Option<u64> {
        Some(self.staging.cap)
    }

    fn host_alloc(&mut self, len: usize) -> Option<*mut u8> {
        let at = self.heap.alloc(len as u64)?;
        self.area.ptr(at, len as u64).ok()
    }

    fn host_free(&mut self, ptr: *mut u8) -> bool {
        let base = self.area.base() as usize;
        match (ptr as usize).checked_sub(base) {
            Some(off) => self.heap.free(off as u64),
            None => false,
        }
    }

    fn pinned(&self, ptr: *const u8, len: usize) -> Option<DataRef> {
        let off = (ptr as usize).checked_sub(self.area.base() as usize)? as u64;
        self.heap.containing(off, len as u64)?;
        Some(DataRef::area(off, len))
    }

    fn leave_wanted(&mut self) -> bool {
        let wanted = self.region.read_byte(pvgpu_ring::layout::LEAVE_WANTED).is_ok_and(|b| b == 1);
        if wanted {
            let _ = self.region.write_byte(pvgpu_ring::layout::LEAVE_WANTED, 0);
        }
        wanted
    }

    fn can_be_asked_to_leave(&self) -> bool {
        true
    }

    fn retire(&mut self) {
        if let Some(f) = self.on_retire.take() {
            f();
        }
        self.notifier = Box::new(Retired);
    }

    fn kind(&self) -> &'static str {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_is_fifo_and_reclaims_by_position() {
        let mut s = Staging::new(100);
        assert_eq!(s.alloc(40, false), Some(0));
        s.assign(10);
        assert_eq!(s.alloc(40, false), Some(40));
        s.assign(20);
        // 20 left at the end; 30 does not fit anywhere until the first frees.
        assert_eq!(s.alloc(30, false), None);
        s.reclaim(10);
        // Wraps to the start (30 < 40, the tail).
        assert_eq!(s.alloc(30, false), Some(0));
        s.assign(30);
        assert_eq!(s.alloc(10, false), None, "must not run into the tail at 40");
        s.reclaim(30);
        assert!(s.entries.is_empty());
        assert_eq!(s.alloc(100, false), Some(0));
        assert_eq!(s.alloc(101, false), None);
    }

    #[test]
    fn held_regions_wait_for_fetch() {
        let mut s = Staging::new(100);
        assert_eq!(s.alloc(60, true), Some(0));
        s.assign(5);
        s.reclaim(5);
        assert_eq!(s.entries.len(), 1, "held until fetched");
        s.unhold(0);
        s.reclaim(5);
        assert!(s.entries.is_empty());
    }

    #[test]
    fn heap_allocates_pages_and_coalesces() {
        let mut h = Heap::new(8192, 5 * 4096);
        let a = h.alloc(1).unwrap();
        let b = h.alloc(4097).unwrap();
        let c = h.alloc(4096).unwrap();
        assert_eq!((a, b, c), (8192, 8192 + 4096, 8192 + 3 * 4096));
        assert_eq!(h.alloc(2 * 4096), None);
        assert_eq!(h.containing(b + 10, 4000), Some(b));
        assert_eq!(h.containing(b + 10, 9000), None);
        assert!(h.free(b));
        assert!(!h.free(b), "double free");
        assert!(h.free(a));
        // a and b merged: three pages in a row again.
        assert_eq!(h.alloc(3 * 4096), Some(8192));
        assert!(h.free(c));
        assert_eq!(h.alloc(4096), Some(8192 + 3 * 4096));
    }

    #[test]
    fn positions_wrap() {
        assert!(reached(5, u32::MAX - 2));
        assert!(!reached(u32::MAX - 2, 5));
    }
}

#[cfg(test)]
mod retire_tests {
    use super::*;
    use crate::transport::Transport;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A doorbell that never rings back, counting what it is asked.
    struct Silent(Arc<AtomicUsize>);

    impl Notifier for Silent {
        fn notify(&self) -> Result<(), NotifyError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }

        fn wait(&self, _: Option<Duration>) -> Result<pvgpu_ring::notify::Wake, NotifyError> {
            Ok(pvgpu_ring::notify::Wake::TimedOut)
        }
    }

    #[test]
    fn a_retired_connection_lets_go_of_its_doorbell_once() {
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 8192 };
        let region = SharedRegion::heap(g.pages() * 4096);
        let (rung, hooks) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let h2 = hooks.clone();
        let mut t =
            RingTransport::new(region, &g, 4096, Box::new(Silent(rung.clone())), Duration::ZERO, Some(Duration::from_secs(2)), "test")
                .unwrap()
                .on_retire(Box::new(move || {
                    h2.fetch_add(1, Ordering::Relaxed);
                }));
        t.retire();
        t.retire();
        assert_eq!(hooks.load(Ordering::Relaxed), 1, "the hook runs once");
        // Nothing answers a retired connection: a wait ends at once, not at
        // the connection's timeout.
        let mut buf = Vec::new();
        assert!(matches!(t.recv(&mut buf), Err(TransportError::BackendGone)));
        assert_eq!(rung.load(Ordering::Relaxed), 0, "the old doorbell is not rung");
    }
}
