//! The host test double's virtual memory management: reservations are
//! address ranges of the context's span, physical allocations are buffers,
//! and mapping one moves its buffer to the mapped address (unmapping moves
//! it back, so its contents survive a remap, as on a GPU).
//!
//! Simpler than a GPU: a physical allocation is mapped whole, at one
//! address at a time (`CUDA_ERROR_NOT_SUPPORTED` otherwise), and access
//! flags are not enforced.

use super::HostContext;
use crate::exec::CuRes;
use pvgpu_ring::CuError;
use std::sync::atomic::Ordering;

/// Granularity of reservations and physical allocations (a GPU's is
/// 2 MiB).
pub const GRANULARITY: u64 = 2 << 20;

/// One physical allocation.
pub struct Phys {
    size: u64,
    /// The bytes, while not mapped.
    bytes: Option<super::ipc::Buf>,
    /// Released while mapped: freed at unmap.
    released: bool,
    /// Another session's (imported): not counted in this context's use.
    imported: bool,
}

impl Phys {
    /// Another session's memory, imported.
    pub(super) fn imported(size: u64, bytes: super::ipc::Buf) -> Phys {
        Phys { size, bytes: Some(bytes), released: false, imported: true }
    }

    /// The bytes, while not mapped.
    pub(super) fn bytes_mut(&mut self) -> Option<&mut super::ipc::Buf> {
        self.bytes.as_mut()
    }
}

impl HostContext {
    /// Reserves `size` bytes at `hint` if nothing holds them, else where
    /// the next free ones are (as the driver takes its hint).
    pub(super) fn reserve(&mut self, size: u64, alignment: u64, hint: u64) -> CuRes<u64> {
        self.ok()?;
        let align = alignment.max(GRANULARITY);
        if size == 0 || size % GRANULARITY != 0 || !align.is_power_of_two() {
            return Err(CuError::INVALID_VALUE);
        }
        if hint != 0 && hint % align == 0 && self.mem.reserve_at(hint, size) {
            return Ok(hint);
        }
        let addr = self.mem.next.checked_next_multiple_of(align).ok_or(CuError::OUT_OF_MEMORY)?;
        let next = addr.checked_add(size).and_then(|e| e.checked_add(super::GUARD)).ok_or(CuError::OUT_OF_MEMORY)?;
        if next > self.mem.end {
            return Err(CuError::OUT_OF_MEMORY);
        }
        self.mem.next = next;
        self.mem.reserved.insert(addr, next);
        Ok(addr)
    }

    /// Frees a whole reservation.
    pub(super) fn unreserve(&mut self, addr: u64) -> CuRes<()> {
        self.ok()?;
        self.mem.reserved.remove(&addr).map(|_| ()).ok_or(CuError::INVALID_VALUE)
    }

    pub(super) fn create(&mut self, size: u64) -> CuRes<u64> {
        self.ok()?;
        if size == 0 || size % GRANULARITY != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        if size > self.free_bytes() {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let len = usize::try_from(size).map_err(|_| CuError::OUT_OF_MEMORY)?;
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| CuError::OUT_OF_MEMORY)?;
        v.resize(len, 0);
        self.used.fetch_add(size, Ordering::Relaxed);
        self.held += size;
        let h = self.handle();
        self.phys.insert(h, Phys { size, bytes: Some(v.into()), released: false, imported: false });
        Ok(h)
    }

    fn forget(&mut self, handle: u64) {
        if let Some(p) = self.phys.remove(&handle)
            && !p.imported
        {
            self.used.fetch_sub(p.size, Ordering::Relaxed);
            self.held -= p.size;
        }
    }

    pub(super) fn release(&mut self, handle: u64) -> CuRes<()> {
        let p = self.phys.get_mut(&handle).ok_or(CuError::INVALID_VALUE)?;
        if p.bytes.is_some() {
            self.forget(handle);
        } else {
            p.released = true;
        }
        Ok(())
    }

    pub(super) fn map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuRes<()> {
        self.ok()?;
        let p = self.phys.get_mut(&handle).ok_or(CuError::INVALID_VALUE)?;
        if offset != 0 || size != p.size {
            return Err(CuError::NOT_SUPPORTED);
        }
        let bytes = p.bytes.take().ok_or(CuError::NOT_SUPPORTED)?;
        self.mem.allocs.insert(ptr, bytes);
        self.mapped.insert(ptr, handle);
        Ok(())
    }

    pub(super) fn unmap(&mut self, ptr: u64) -> CuRes<()> {
        let handle = self.mapped.remove(&ptr).ok_or(CuError::INVALID_VALUE)?;
        let bytes = self.mem.allocs.remove(&ptr).ok_or(CuError::INVALID_VALUE)?;
        match self.phys.get_mut(&handle) {
            Some(p) if p.released => self.forget(handle),
            Some(p) => p.bytes = Some(bytes),
            None => {}
        }
        Ok(())
    }
}
