//! The shared region of the local transport: a sealed memfd, mapped by the
//! frontend that made it and by the backend that checked it (at the
//! frontend's address where that is free).

use super::{LocalError, ios, os};
use crate::layout::Geometry;
use crate::region::{Mapping, SharedRegion};
use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};
use std::fs::File;
use std::os::fd::OwnedFd;

/// A shared mapping of a memfd.
pub struct MemfdMapping {
    map: memmap2::MmapRaw,
    _file: File,
}

// SAFETY: the mapping stays at its address with its length until dropped
// (MmapRaw unmaps on drop); the memfd is sealed against shrinking, so every
// byte stays backed; the process reaches it only through raw pointers.
unsafe impl Mapping for MemfdMapping {
    fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Frontend side: a sealed, zeroed memfd of the geometry's size, mapped.
pub fn create_region(g: &Geometry) -> Result<(SharedRegion, OwnedFd), LocalError> {
    let fd = memfd_create(c"pvgpu-ring", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).map_err(os("memfd_create"))?;
    let file = File::from(fd);
    file.set_len(g.total_len() as u64).map_err(ios("sizing the shared memory"))?;
    fcntl(&file, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL))
        .map_err(os("sealing the shared memory"))?;
    let dup = file.try_clone().map_err(ios("duplicating the memfd"))?;
    if let Some(ptr) = map_in_window(&file, g.total_len()) {
        return Ok((SharedRegion::new(FixedMapping { ptr, len: g.total_len(), _file: file }), OwnedFd::from(dup)));
    }
    let map = memmap2::MmapOptions::new().len(g.total_len()).map_raw(&file).map_err(ios("mapping the shared memory"))?;
    Ok((SharedRegion::new(MemfdMapping { map, _file: file }), OwnedFd::from(dup)))
}

/// Where a frontend asks to map its region: a window the kernel leaves
/// alone (it places mappings top-down from below the stack, or, in a
/// worker's legacy layout, bottom-up from a third of the address space),
/// below the host test double's device addresses (`0x2000_0000_0000` and
/// up), private page-locked memory (`0x3000_0000_0000`) and placed device
/// memory (`0x4000_0000_0000`). A backend's worker maps the region at the
/// program's own addresses (unified addressing: kernels are handed host
/// pointers of page-locked memory); an address from the kernel's own
/// choice in the program was, about once in 40 sessions on the H100,
/// already taken by a mapping of the worker's.
const WINDOW: u64 = 0x1000_0000_0000;
/// Slots of the window, [`SLOT`] bytes apart, one picked per region.
const SLOTS: u64 = 256;
const SLOT: u64 = 16 << 30;

/// Maps `file` (`len` bytes) in a slot of [`WINDOW`] picked from the
/// process id and the time, if the kernel takes the hint.
fn map_in_window(file: &File, len: usize) -> Option<std::ptr::NonNull<u8>> {
    use nix::sys::mman::{MapFlags, ProtFlags, mmap};
    if len as u64 > SLOT {
        return None;
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos() as u64);
    let mix = (u64::from(std::process::id()) ^ nanos).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    let hint = std::num::NonZeroUsize::new((WINDOW + (mix % SLOTS) * SLOT) as usize)?;
    // SAFETY: a hint, never MAP_FIXED: the kernel picks another address
    // rather than replace a mapping, so no memory of this process changes
    // meaning.
    let p = unsafe {
        mmap(Some(hint), std::num::NonZeroUsize::new(len)?, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, file, 0)
    }
    .ok()?;
    Some(p.cast())
}

/// A shared mapping of a memfd at an address of the peer's choosing (the
/// backend), or in the frontend's window ([`create_region`]).
pub struct FixedMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    _file: File,
}

// SAFETY: as for `MemfdMapping`: mapped at `ptr` with `len` bytes until
// dropped (unmapped in `Drop`), backed by a memfd sealed against shrinking.
unsafe impl Mapping for FixedMapping {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the mapping is reached only through raw pointers, from any
// thread; nothing in it is tied to the thread that made it.
unsafe impl Send for FixedMapping {}
// SAFETY: as above.
unsafe impl Sync for FixedMapping {}

impl Drop for FixedMapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes at `ptr`, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.len) };
    }
}

/// Lowest address the backend maps a region at for the frontend: far
/// above the page at 0 (a privileged backend could otherwise be made to
/// map guest memory where a null pointer reads) and the program's image.
pub const MIN_SHARED_ADDRESS: usize = 1 << 32;

/// Maps `file` at exactly `addr`, if nothing is mapped there.
fn map_at(file: &File, addr: usize, len: usize) -> Option<std::ptr::NonNull<u8>> {
    use nix::sys::mman::{MapFlags, ProtFlags, mmap};
    let want = std::num::NonZeroUsize::new(addr)?;
    let len = std::num::NonZeroUsize::new(len)?;
    if addr % 4096 != 0 || addr < MIN_SHARED_ADDRESS || addr.checked_add(len.get()).is_none() {
        return None;
    }
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping (the
    // call fails instead), so no memory of this process changes meaning.
    let p = unsafe {
        mmap(Some(want), len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED | MapFlags::MAP_FIXED_NOREPLACE, file, 0)
    }
    .ok()?;
    if p.as_ptr() as usize != addr {
        // A kernel without MAP_FIXED_NOREPLACE took it as a hint.
        // SAFETY: the mapping just made, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(p, len.get()) };
        return None;
    }
    Some(p.cast())
}

/// Backend side: checks that `fd` is a memfd sealed against shrinking and
/// large enough for `g`, then maps it, at `at` if that address is free.
pub fn map_region(fd: OwnedFd, g: &Geometry, at: Option<usize>) -> Result<SharedRegion, LocalError> {
    let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(|_| LocalError::Memory("not a sealable memfd"))?;
    let seals = SealFlag::from_bits_truncate(seals);
    if !seals.contains(SealFlag::F_SEAL_SHRINK) {
        return Err(LocalError::Memory("memfd is not sealed against shrinking"));
    }
    let file = File::from(fd);
    let meta = file.metadata().map_err(ios("fstat of the memfd"))?;
    if !meta.is_file() || meta.len() < g.total_len() as u64 {
        return Err(LocalError::Memory("memfd is smaller than the geometry"));
    }
    if let Some(ptr) = at.and_then(|a| map_at(&file, a, g.total_len())) {
        return Ok(SharedRegion::new(FixedMapping { ptr, len: g.total_len(), _file: file }));
    }
    let map = memmap2::MmapOptions::new().len(g.total_len()).map_raw(&file).map_err(ios("mapping the shared memory"))?;
    Ok(SharedRegion::new(MemfdMapping { map, _file: file }))
}
