//! Shared regions: a mapping both sides can write (a memfd, Xen grant pages,
//! or plain heap memory in tests), carved into channels and a data area.
//!
//! Nothing here hands out a `&T` or `&[u8]` into the region: the peer may
//! write it at any time. Indices are read and written as atomics; bytes are
//! copied in and out with raw-pointer copies, bounds-checked against the
//! region's length, which is fixed when the region is mapped.

use crate::channel::ChannelMemory;
use crate::sync::{AtomicU32, AtomicU64};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

/// A mapping of shared memory. Implementors keep the memory mapped, at the
/// same address and length, for as long as they live.
///
/// # Safety
/// `as_ptr()` must point to `len()` bytes that stay readable and writable
/// (and mapped at that address) until the value is dropped, and that the
/// process does not otherwise access through Rust references.
pub unsafe trait Mapping: Send + Sync {
    /// Base address.
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a region could not be carved as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// A range falls outside the region.
    #[error("Range {offset:#x}+{len:#x} is outside the {region_len:#x}-byte shared region")]
    OutOfBounds {
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Region length.
        region_len: usize,
    },
    /// An offset is not suitably aligned.
    #[error("Offset {0:#x} is not aligned")]
    Misaligned(usize),
}

/// A cheaply clonable handle to a mapped region.
#[derive(Clone)]
pub struct SharedRegion {
    map: Arc<dyn Mapping>,
}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedRegion({:p}, {} bytes)", self.map.as_ptr(), self.map.len())
    }
}

/// Page-aligned, zeroed heap memory standing in for a shared mapping.
pub struct HeapMapping {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl HeapMapping {
    /// Allocates `len` zeroed bytes aligned to 4096.
    pub fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("region length overflows");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        HeapMapping { ptr, layout }
    }
}

impl Drop for HeapMapping {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: the allocation lives as long as the value and is only reached
// through raw pointers.
unsafe impl Mapping for HeapMapping {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}

// SAFETY: the memory is plain bytes reached through raw pointers only.
unsafe impl Send for HeapMapping {}
// SAFETY: as above; concurrent access goes through atomics or is validated.
unsafe impl Sync for HeapMapping {}

fn check(offset: u64, len: u64, region_len: usize) -> Result<usize, RegionError> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len as u64 => Ok(offset as usize),
        _ => Err(RegionError::OutOfBounds { offset, len, region_len }),
    }
}

impl SharedRegion {
    /// Wraps a mapping.
    pub fn new(map: impl Mapping + 'static) -> Self {
        SharedRegion { map: Arc::new(map) }
    }

    /// Zeroed heap memory of `len` bytes (tests, and regions only this
    /// process uses).
    pub fn heap(len: usize) -> Self {
        SharedRegion::new(HeapMapping::new(len))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Base address (for registering the region with a driver).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// The channel whose four indices sit at `idx_offset`, each on a cache
    /// line of its own (256 bytes: `prod`, `cons`, `prod_event`,
    /// `cons_event`), and whose buffer of `cap` bytes starts at
    /// `buf_offset`. Apart, an index one side writes on every record never
    /// shares a line with one the other side reads on every record, so a
    /// round trip moves only the lines it must.
    pub fn channel(&self, idx_offset: usize, buf_offset: usize, cap: u32) -> Result<RegionChannel, RegionError> {
        if idx_offset % 64 != 0 {
            return Err(RegionError::Misaligned(idx_offset));
        }
        if buf_offset % 8 != 0 {
            return Err(RegionError::Misaligned(buf_offset));
        }
        check(idx_offset as u64, CHANNEL_INDICES as u64, self.len())?;
        check(buf_offset as u64, cap as u64, self.len())?;
        Ok(RegionChannel { base: self.as_ptr(), region: self.clone(), idx: idx_offset, buf: buf_offset, cap })
    }

    /// The data area of `len` bytes at `offset`.
    pub fn area(&self, offset: usize, len: usize) -> Result<DataArea, RegionError> {
        check(offset as u64, len as u64, self.len())?;
        Ok(DataArea { region: self.clone(), offset, len })
    }

    /// Writes a little-endian u64 at `offset` (control-page fields written
    /// before the peer attaches).
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<(), RegionError> {
        let o = check(offset as u64, 8, self.len())?;
        // SAFETY: in bounds; unaligned write of plain bytes.
        unsafe { std::ptr::write_unaligned(self.map.as_ptr().add(o) as *mut u64, v.to_le()) };
        Ok(())
    }

    /// Zeroes `len` bytes at `offset` (memory the peer does not use yet).
    pub fn zero(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        let o = check(offset as u64, len as u64, self.len())?;
        // SAFETY: in bounds; plain bytes.
        unsafe { std::ptr::write_bytes(self.map.as_ptr().add(o), 0, len) };
        Ok(())
    }

    /// Reads the byte at `offset` (a liveness flag the peer's kernel may
    /// clear at any time).
    pub fn read_byte(&self, offset: usize) -> Result<u8, RegionError> {
        let o = check(offset as u64, 1, self.len())?;
        // SAFETY: in bounds; a volatile read, since another party (the
        // peer, or its kernel) writes it concurrently.
        Ok(unsafe { std::ptr::read_volatile(self.map.as_ptr().add(o)) })
    }

    /// Writes the byte at `offset`.
    pub fn write_byte(&self, offset: usize, v: u8) -> Result<(), RegionError> {
        let o = check(offset as u64, 1, self.len())?;
        // SAFETY: in bounds; a volatile write of a flag the peer reads.
        unsafe { std::ptr::write_volatile(self.map.as_ptr().add(o), v) };
        Ok(())
    }

    /// Reads a little-endian u64 at `offset`.
    pub fn read_u64(&self, offset: usize) -> Result<u64, RegionError> {
        let o = check(offset as u64, 8, self.len())?;
        // SAFETY: in bounds; unaligned read of plain bytes (validated by the
        // caller).
        Ok(u64::from_le(unsafe { std::ptr::read_unaligned(self.map.as_ptr().add(o) as *const u64) }))
    }
}

/// Bytes of a channel's indices in the control page: four cache lines.
pub const CHANNEL_INDICES: usize = 256;

/// A channel's indices and buffer inside a [`SharedRegion`].
pub struct RegionChannel {
    /// The region's base address, kept so that an index costs no call
    /// through the mapping (fixed while `region` lives).
    base: *mut u8,
    region: SharedRegion,
    idx: usize,
    buf: usize,
    cap: u32,
}

// `base` points into the mapping `region` keeps alive.
// SAFETY: that memory is reached only through atomics and bounds-checked
// raw copies, from any thread alike.
unsafe impl Send for RegionChannel {}
// SAFETY: as above.
unsafe impl Sync for RegionChannel {}

impl RegionChannel {
    #[inline]
    fn index(&self, line: usize) -> &AtomicU32 {
        let offset = self.idx + line * 64;
        debug_assert!(offset + 4 <= self.region.len());
        // `idx` is 64-aligned and the four lines lie in the region (checked
        // when the channel was made); the mapping outlives `self`.
        // SAFETY: in bounds and aligned (above); both sides access these
        // bytes only atomically, and AtomicU32 has the layout of u32.
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }
}

impl ChannelMemory for RegionChannel {
    #[inline]
    fn prod(&self) -> &AtomicU32 {
        self.index(0)
    }
    #[inline]
    fn cons(&self) -> &AtomicU32 {
        self.index(1)
    }
    #[inline]
    fn prod_event(&self) -> &AtomicU32 {
        self.index(2)
    }
    #[inline]
    fn cons_event(&self) -> &AtomicU32 {
        self.index(3)
    }
    #[inline]
    fn header(&self, pos: u32) -> &AtomicU64 {
        debug_assert!(pos % 8 == 0 && pos + 8 <= self.cap);
        let pos = (pos & !7).min(self.cap - 8) as usize;
        // `buf` is 8-aligned and `pos + 8 <= cap` (clamped just above), so
        // the word lies in the buffer, which lies in the region.
        // SAFETY: in bounds and aligned (above); both sides access a header
        // word only atomically, and AtomicU64 has the layout of u64.
        unsafe { &*(self.base.add(self.buf + pos) as *const AtomicU64) }
    }
    fn capacity(&self) -> u32 {
        self.cap
    }
    unsafe fn write(&self, pos: u32, src: &[u8]) {
        debug_assert!(pos as usize + src.len() <= self.cap as usize);
        // SAFETY: the caller keeps pos + len within the buffer, which lies in
        // the region (checked when the channel was made).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(self.buf + pos as usize), src.len()) }
    }
    unsafe fn read(&self, pos: u32, dst: &mut [u8]) {
        debug_assert!(pos as usize + dst.len() <= self.cap as usize);
        // SAFETY: as for write; a racing peer only makes the copy garbage,
        // which the caller validates.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(self.buf + pos as usize), dst.as_mut_ptr(), dst.len()) }
    }
}

/// The bulk-data area of a region. Every access is bounds-checked.
#[derive(Clone)]
pub struct DataArea {
    region: SharedRegion,
    offset: usize,
    len: usize,
}

impl DataArea {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the area is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Checks that `[off, off+len)` lies in the area; returns it as a usize.
    pub fn check(&self, off: u64, len: u64) -> Result<usize, RegionError> {
        check(off, len, self.len)
    }

    /// Copies `dst.len()` bytes at `off` out of the area.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), RegionError> {
        let o = self.check(off, dst.len() as u64)?;
        // SAFETY: in bounds; copying out of peer-writable memory yields at
        // worst bytes the peer chose.
        unsafe { std::ptr::copy_nonoverlapping(self.region.as_ptr().add(self.offset + o), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the area at `off`.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), RegionError> {
        let o = self.check(off, src.len() as u64)?;
        // SAFETY: in bounds.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.region.as_ptr().add(self.offset + o), src.len()) };
        Ok(())
    }

    /// A raw pointer to `[off, off+len)`, for handing to a DMA engine or a
    /// copy routine that reads or writes it directly. The pointer is valid
    /// while this area (or a clone) is alive.
    pub fn ptr(&self, off: u64, len: u64) -> Result<*mut u8, RegionError> {
        let o = self.check(off, len)?;
        // SAFETY: in bounds of the mapping.
        Ok(unsafe { self.region.as_ptr().add(self.offset + o) })
    }

    /// Base address of the area.
    pub fn base(&self) -> *mut u8 {
        // SAFETY: offset is within the mapping (checked at construction).
        unsafe { self.region.as_ptr().add(self.offset) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let r = SharedRegion::heap(8192);
        assert!(r.channel(0, 4096, 4096).is_ok());
        assert!(r.channel(0, 4096, 8192).is_err());
        assert!(r.channel(8, 4096, 64).is_err());
        let a = r.area(4096, 4096).unwrap();
        a.write(4090, &[1; 6]).unwrap();
        assert!(a.write(4091, &[1; 6]).is_err());
        assert!(a.read(u64::MAX, &mut [0; 2]).is_err());
        assert!(a.ptr(0, 4097).is_err());
        let mut b = [0u8; 6];
        a.read(4090, &mut b).unwrap();
        assert_eq!(b, [1; 6]);
    }
}
