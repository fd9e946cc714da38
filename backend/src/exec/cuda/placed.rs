//! A context's device memory in its [`Arena`] (`--device-memory placed`):
//! the driver calls behind the arena's [`Backing`], and what `cuMemAlloc`,
//! `cuMemFree` and their stream-ordered forms do in this mode.
//!
//! - A free waits for the context's work first, as `cuMemFree` does, since
//!   unmapping memory a kernel still reads would fault the context.
//! - A stream-ordered allocation is ready at once (the stream's order is
//!   kept trivially); a stream-ordered free records an event on the stream
//!   and gives the memory back once the event has completed, looked at
//!   whenever the context allocates or frees. On a stream that is being
//!   captured both stay the driver's (they become the graph's memory
//!   nodes), and so does freeing what a graph allocated.
//! - While a stream of the process is being captured, an allocation or a
//!   free first asks the driver's own `cuMemAlloc` whether such a call may
//!   run now (a global capture refuses it and is invalidated, as natively;
//!   a relaxed one lets it through); a free let through then waits until
//!   no capture is left, since the context cannot be synchronised during
//!   one.
//! - The memory is accessible from the context's device and every device
//!   that can reach it peer to peer, as `cuMemAlloc` memory is once peer
//!   access is enabled.
//! - Pools of the program's own that are not shareable give their
//!   allocations from the arena too, so that they go with the session;
//!   the pool keeps its size limit and answers its usage attributes from
//!   here (reserved bytes are the bytes in use: the arena caches nothing
//!   per pool). Shareable pools stay the driver's.

use super::arena::{Arena, Backing};
use super::driver::{entry, ok};
use super::{CudaStream, ck, raw_stream};
use crate::exec::CuRes;
use cudarc::driver::sys;
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::{
    CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_LOCATION_TYPE_DEVICE, CUmemAccess_flags,
    CUmemAccessDesc, CUmemAllocationProp, CUmemLocation, Driver,
};
use std::collections::{BTreeSet, HashMap};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Streams of this process being captured (raw handles).
static CAPTURING: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

impl super::CudaContext {
    /// `s` began a capture (kept only where memory is placed).
    pub(super) fn capture_began(&self, s: CudaStream) {
        if self.placed.is_some() {
            CAPTURING.lock().unwrap_or_else(|p| p.into_inner()).insert(raw_stream(Some(s)) as usize);
        }
    }

    /// `s`'s capture ended (or never began), or `s` goes.
    pub(super) fn capture_ended(&self, s: CudaStream) {
        if self.placed.is_some() {
            CAPTURING.lock().unwrap_or_else(|p| p.into_inner()).remove(&(raw_stream(Some(s)) as usize));
        }
    }
}

fn any_capturing() -> bool {
    !CAPTURING.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
}

/// What the driver answers a `cuMemAlloc` now: refused during a global
/// capture (which that invalidates, as the program's own call would have).
fn may_manage_memory() -> CuRes<()> {
    let mut p = 0;
    // SAFETY: valid out-pointer; one byte of the current context's memory.
    ck(unsafe { sys::cuMemAlloc_v2(&mut p, 1) })?;
    // SAFETY: the allocation just made.
    ck(unsafe { sys::cuMemFree_v2(p) })
}

/// The driver side of an arena: one device's memory, mapped for it and
/// its peers.
pub(super) struct Vmm {
    drv: &'static Driver,
    dev: sys::CUdevice,
    /// The device first, then every device that can reach its memory.
    access: Vec<sys::CUdevice>,
    /// Whether memory is made exportable as a file descriptor (so that a
    /// migration on this GPU hands it over in place); cleared if the
    /// driver refuses that.
    exportable: bool,
    /// Memory handed over in place, by address: its bytes and the handle
    /// imported here, taken by the mapping made at that address.
    imports: HashMap<u64, (u64, u64)>,
}

impl Vmm {
    fn prop(&self) -> CUmemAllocationProp {
        // SAFETY: CUmemAllocationProp is plain integers, flags and a
        // pointer; zero is "none" for each.
        let mut p: CUmemAllocationProp = unsafe { std::mem::zeroed() };
        p.type_ = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: self.dev };
        if self.exportable {
            p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        p
    }

    /// `len` bytes of new physical memory (exportable where the driver
    /// allows it).
    fn create(&mut self, len: u64) -> CuRes<u64> {
        let mut h = 0u64;
        let prop = self.prop();
        // SAFETY: valid out-pointer and property.
        let made = ok(unsafe { entry(self.drv.cuMemCreate)?(&mut h, len as usize, &prop, 0) });
        match made {
            Err(e) if self.exportable && e != CuError::OUT_OF_MEMORY => {
                tracing::info!(status = ?e, "the driver makes no exportable device memory; migrations on this GPU copy it");
                self.exportable = false;
                self.create(len)
            }
            r => r.map(|()| h),
        }
    }

    /// The descriptor of `handle`, for another process of this GPU.
    fn export(&self, handle: u64) -> CuRes<OwnedFd> {
        super::vmm::export_fd(self.drv, handle)
    }

    /// The handle, in this process, of memory another process exported
    /// (the backend that handed the memory over).
    fn import(&self, fd: &OwnedFd) -> CuRes<u64> {
        super::vmm::import_fd(self.drv, fd)
    }

    fn release(&self, handle: u64) {
        // SAFETY: a handle of this arena, mapped nowhere now, released once.
        let _ = entry(self.drv.cuMemRelease).map(|f| unsafe { f(handle) });
    }

    /// Releases imported memory no mapping took.
    fn drop_imports(&mut self) {
        for (_, (_, h)) in std::mem::take(&mut self.imports) {
            self.release(h);
        }
    }

    fn descs(&self, all: bool) -> Vec<CUmemAccessDesc> {
        let n = if all { self.access.len() } else { 1 };
        self.access[..n]
            .iter()
            .map(|&d| CUmemAccessDesc {
                location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: d },
                // Read and write.
                flags: CUmemAccess_flags(3),
            })
            .collect()
    }
}

impl Backing for Vmm {
    fn reserve_at(&mut self, addr: u64, len: u64) -> CuRes<()> {
        let mut got = 0u64;
        // SAFETY: valid out-pointer; the address is a hint the driver
        // ignores when the range is taken.
        ok(unsafe { entry(self.drv.cuMemAddressReserve)?(&mut got, len as usize, 0, addr, 0) })?;
        if got == addr {
            return Ok(());
        }
        self.unreserve(got, len);
        Err(CuError::ALREADY_MAPPED)
    }

    fn unreserve(&mut self, addr: u64, len: u64) {
        // SAFETY: a whole reservation of this arena, its mappings gone.
        if let Err(e) = entry(self.drv.cuMemAddressFree).and_then(|f| ok(unsafe { f(addr, len as usize) })) {
            tracing::warn!(error = %e, addr, "cuMemAddressFree failed");
        }
    }

    fn map(&mut self, addr: u64, len: u64) -> CuRes<u64> {
        let h = match self.imports.remove(&addr) {
            Some((l, h)) if l == len => h,
            Some(other) => {
                self.imports.insert(addr, other);
                return Err(CuError::INVALID_VALUE);
            }
            None => self.create(len)?,
        };
        // SAFETY: `addr..addr+len` lies in this arena's reservation, clear of
        // its mappings (its bookkeeping); `h` has `len` bytes (made or taken so).
        let mapped = ok(unsafe { entry(self.drv.cuMemMap)?(addr, len as usize, 0, h, 0) });
        let access = mapped.and_then(|()| {
            let set = entry(self.drv.cuMemSetAccess)?;
            let all = self.descs(true);
            // SAFETY: the whole mapping just made; descriptors of devices
            // of this driver.
            ok(unsafe { set(addr, len as usize, all.as_ptr(), all.len()) }).or_else(|_| {
                let own = self.descs(false);
                // SAFETY: as above, the context's device only.
                ok(unsafe { set(addr, len as usize, own.as_ptr(), 1) })
            })
        });
        if let Err(e) = access {
            if mapped.is_ok() {
                // SAFETY: the mapping made above.
                let _ = entry(self.drv.cuMemUnmap).map(|f| unsafe { f(addr, len as usize) });
            }
            self.release(h);
            return Err(e);
        }
        Ok(h)
    }

    fn unmap(&mut self, addr: u64, len: u64, handle: u64) {
        // SAFETY: a whole mapping of this arena (its bookkeeping), which no
        // work of the context uses any more (the caller synchronised).
        let r = entry(self.drv.cuMemUnmap).and_then(|f| ok(unsafe { f(addr, len as usize) }));
        // SAFETY: the handle of that mapping, released once.
        let r = r.and_then(|()| entry(self.drv.cuMemRelease).and_then(|f| ok(unsafe { f(handle) })));
        if let Err(e) = r {
            tracing::warn!(error = %e, addr, "cannot give placed device memory back");
        }
    }
}

/// A context's placed memory.
pub(super) struct Placed {
    arena: Arena,
    vmm: Vmm,
    /// Stream-ordered frees waiting for their event.
    deferred: Vec<(u64, sys::CUevent)>,
    /// Frees waiting for the end of every capture.
    after_capture: Vec<u64>,
    /// Pools of the program's own whose allocations come from the arena,
    /// by the driver's pool.
    pools: HashMap<u64, PlacedPool>,
}

/// What a pool of the program's own holds in the arena: the driver's pool
/// gives none of it, so its size limit and its usage attributes are kept
/// here.
#[derive(Default)]
struct PlacedPool {
    max_size: u64,
    /// Live allocations: address and bytes.
    allocs: HashMap<u64, u64>,
    /// Their bytes.
    used: u64,
    /// Most bytes in use since made or reset.
    high: u64,
}

/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` to `..._USED_MEM_HIGH`: what a
/// placed pool answers itself.
const USAGE_ATTRS: std::ops::RangeInclusive<u32> = 5..=8;

impl Placed {
    /// Placed memory of `dev`, reachable from the devices in `peers` too.
    pub(super) fn new(drv: &'static Driver, dev: sys::CUdevice, peers: Vec<sys::CUdevice>, space: u16) -> CuRes<Placed> {
        let granule = super::vmm::granularity(drv, dev, 0)?;
        if !granule.is_power_of_two() {
            return Err(CuError::NOT_SUPPORTED);
        }
        super::vmm::reserve_window(drv);
        let mut access = vec![dev];
        access.extend(peers);
        Ok(Placed {
            arena: Arena::in_space(granule, space),
            vmm: Vmm { drv, dev, access, exportable: true, imports: HashMap::new() },
            deferred: Vec::new(),
            after_capture: Vec::new(),
            pools: HashMap::new(),
        })
    }

    /// Pool `pool` (not shareable) gives its allocations from the arena.
    pub(super) fn pool_made(&mut self, pool: u64, max_size: u64) {
        self.pools.insert(pool, PlacedPool { max_size, ..PlacedPool::default() });
    }

    /// Whether `pool` gives its allocations from the arena.
    pub(super) fn has_pool(&self, pool: u64) -> bool {
        self.pools.contains_key(&pool)
    }

    /// The pool is destroyed; its allocations stay until freed.
    pub(super) fn pool_gone(&mut self, pool: u64) {
        self.pools.remove(&pool);
    }

    /// An allocation of `pool` (ready at once), within its size limit.
    pub(super) fn pool_alloc(&mut self, pool: u64, size: u64) -> CuRes<u64> {
        let p = self.pools.get(&pool).ok_or(CuError::INVALID_VALUE)?;
        if p.max_size != 0 && p.used.saturating_add(size) > p.max_size {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let dptr = self.alloc(size)?;
        self.pool_adopt(pool, dptr, size)?;
        Ok(dptr)
    }

    /// Counts `dptr` as `pool`'s.
    pub(super) fn pool_adopt(&mut self, pool: u64, dptr: u64, size: u64) -> CuRes<()> {
        let p = self.pools.get_mut(&pool).ok_or(CuError::INVALID_VALUE)?;
        if let Some(was) = p.allocs.insert(dptr, size) {
            p.used -= was;
        }
        p.used += size;
        p.high = p.high.max(p.used);
        Ok(())
    }

    /// A usage attribute of `pool` (its bytes reserved and in use, which
    /// are the same here, and their high-water marks; a high-water mark is
    /// reset by setting it), or `None` for an attribute the driver's pool
    /// answers.
    pub(super) fn pool_attribute(&mut self, pool: u64, attr: u32, set: Option<u64>) -> Option<CuRes<u64>> {
        let p = self.pools.get_mut(&pool)?;
        if !USAGE_ATTRS.contains(&attr) {
            return None;
        }
        Some(match (attr, set) {
            (5 | 7, None) => Ok(p.used),
            (6 | 8, None) => Ok(p.high),
            (6 | 8, Some(0)) => {
                p.high = p.used;
                Ok(0)
            }
            _ => Err(CuError::INVALID_VALUE),
        })
    }

    /// Forgets `dptr` in the pool that gave it, if one did.
    fn pool_free(&mut self, dptr: u64) {
        for p in self.pools.values_mut() {
            if let Some(size) = p.allocs.remove(&dptr) {
                p.used -= size;
                return;
            }
        }
    }

    /// Whether `dptr` is placed memory of this context (else the driver's:
    /// a graph's allocation).
    pub(super) fn owns(&self, dptr: u64) -> bool {
        self.arena.owns(dptr)
    }

    /// Stream-ordered allocation (ready at once).
    pub(super) fn alloc(&mut self, size: u64) -> CuRes<u64> {
        self.reap();
        self.arena.alloc(&mut self.vmm, size)
    }

    /// `cuMemAlloc` (the context is current).
    pub(super) fn alloc_now(&mut self, size: u64) -> CuRes<u64> {
        if any_capturing() {
            may_manage_memory()?;
        }
        self.alloc(size)
    }

    /// Frees `dptr`, an address this arena [`Placed::owns`], once the
    /// context's work is done (the context is current).
    pub(super) fn free(&mut self, dptr: u64) -> CuRes<()> {
        self.pool_free(dptr);
        if any_capturing() {
            may_manage_memory()?;
            self.after_capture.push(dptr);
            return Ok(());
        }
        // SAFETY: no arguments; acts on the current context, this one.
        ck(unsafe { sys::cuCtxSynchronize() })?;
        self.reap();
        self.arena.free(&mut self.vmm, dptr)
    }

    /// Frees `dptr` once the work queued on `stream` so far is done.
    pub(super) fn free_async(&mut self, dptr: u64, stream: Option<CudaStream>) -> CuRes<()> {
        self.pool_free(dptr);
        let mut ev = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        ck(unsafe { sys::cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) })?;
        // SAFETY: a live event and a stream of this context.
        if let Err(e) = ck(unsafe { sys::cuEventRecord(ev, raw_stream(stream)) }) {
            // SAFETY: the event made above.
            unsafe { sys::cuEventDestroy_v2(ev) };
            return Err(e);
        }
        self.deferred.push((dptr, ev));
        self.reap();
        Ok(())
    }

    /// Gives back what stream-ordered frees left once their events are
    /// done, and what frees during a capture left once none is left.
    fn reap(&mut self) {
        if !self.after_capture.is_empty() && !any_capturing() {
            // SAFETY: no arguments; acts on the current context, this one.
            if ck(unsafe { sys::cuCtxSynchronize() }).is_ok() {
                for dptr in std::mem::take(&mut self.after_capture) {
                    if let Err(e) = self.arena.free(&mut self.vmm, dptr) {
                        tracing::warn!(status = ?e, dptr, "a free of placed memory made during a capture failed");
                    }
                }
            }
        }
        let mut i = 0;
        while i < self.deferred.len() {
            let (dptr, ev) = self.deferred[i];
            // SAFETY: a live event of this context.
            if unsafe { sys::cuEventQuery(ev) } == sys::cudaError_enum::CUDA_ERROR_NOT_READY {
                i += 1;
                continue;
            }
            self.deferred.swap_remove(i);
            // SAFETY: the event is done with (recorded and complete).
            unsafe { sys::cuEventDestroy_v2(ev) };
            if let Err(e) = self.arena.free(&mut self.vmm, dptr) {
                tracing::warn!(status = ?e, dptr, "a stream-ordered free of placed memory failed");
            }
        }
    }

    /// Places each (address, length) of a checkpoint where it was, in
    /// the memory `handed` over in place where it lies there; all or
    /// nothing, and every piece handed over taken.
    pub(super) fn restore(&mut self, ranges: &[(u64, u64)], handed: Vec<crate::exec::HandedPiece>) -> CuRes<()> {
        let r = self.import_all(handed).and_then(|()| {
            for (i, &(addr, len)) in ranges.iter().enumerate() {
                if let Err(e) = self.arena.alloc_at(&mut self.vmm, addr, len) {
                    for &(a, _) in &ranges[..i] {
                        let _ = self.arena.free(&mut self.vmm, a);
                    }
                    return Err(e);
                }
            }
            if self.vmm.imports.is_empty() {
                return Ok(());
            }
            tracing::warn!(left = self.vmm.imports.len(), "memory handed over in place holds no allocation of the snapshot");
            for &(a, _) in ranges {
                let _ = self.arena.free(&mut self.vmm, a);
            }
            Err(CuError::INVALID_VALUE)
        });
        self.vmm.drop_imports();
        r
    }

    fn import_all(&mut self, handed: Vec<crate::exec::HandedPiece>) -> CuRes<()> {
        for p in handed {
            let h = self.vmm.import(&p.fd)?;
            if let Some((_, twice)) = self.vmm.imports.insert(p.address, (p.length, h)) {
                self.vmm.release(twice);
                return Err(CuError::INVALID_VALUE);
            }
        }
        Ok(())
    }

    /// The memory behind `ranges` as descriptors of the driver's, for a
    /// process of this GPU to map in place.
    pub(super) fn hand_over(&mut self, ranges: &[(u64, u64)]) -> CuRes<Vec<crate::exec::HandedPiece>> {
        if !self.vmm.exportable {
            return Err(CuError::NOT_SUPPORTED);
        }
        let maps = self.arena.mappings_of(ranges).ok_or(CuError::INVALID_VALUE)?;
        maps.into_iter()
            .map(|(address, length, handle)| Ok(crate::exec::HandedPiece { address, length, fd: self.vmm.export(handle)? }))
            .collect()
    }

    /// Gives everything back; the context's work is done (the caller
    /// synchronised it).
    pub(super) fn release(&mut self) {
        for (_, ev) in self.deferred.drain(..) {
            // SAFETY: a live event of this context, destroyed once.
            unsafe { sys::cuEventDestroy_v2(ev) };
        }
        self.arena.release(&mut self.vmm);
    }
}
