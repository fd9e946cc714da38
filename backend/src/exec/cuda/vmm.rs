//! Virtual memory management on the GPU: reservations, physical
//! allocations, mappings and access, for the session's own context and
//! device. Physical memory is device memory of the context's device,
//! compressible where asked and the device gives it, and with a file
//! descriptor as its shareable handle where asked: the descriptor goes to
//! the supervisor's registry, never to a guest ([`crate::ipc`]).

use super::CudaContext;
use super::driver::{entry, ok};
use crate::exec::CuRes;
use crate::ipc::IpcObject;
use cudarc::driver::sys;
use pvgpu_ring::cuda::api::{
    CU_MEM_ALLOCATION_COMP_GENERIC, CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_LOCATION_TYPE_DEVICE,
    CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationGranularity_flags, CUmemAllocationProp, CUmemLocation, Driver,
};
use pvgpu_ring::proto::{MEM_COMPRESSIBLE, MEM_SHAREABLE};
use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Device memory of `dev`, no shareable handle.
fn prop(dev: sys::CUdevice) -> CUmemAllocationProp {
    // SAFETY: CUmemAllocationProp is plain integers, flags and a pointer;
    // zero is "none" for each.
    let mut p: CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: dev };
    p
}

/// The allocation granularity of device memory on `dev`.
pub(super) fn granularity(drv: &Driver, dev: sys::CUdevice, option: u32) -> CuRes<u64> {
    let mut g = 0usize;
    let prop = prop(dev);
    let call = entry(drv.cuMemGetAllocationGranularity)?;
    // SAFETY: valid out-pointer and property; option 0 or 1 (decoded).
    ok(unsafe { call(&mut g, &prop, CUmemAllocationGranularity_flags(option)) })?;
    Ok(g as u64)
}

/// Where guest reservations go with `--device-memory placed`: a window
/// the process reserves whole with its first context (before any module
/// is loaded) and carves reservations from, so that another process can
/// have them back. The driver's own choice lies in its heap, where a new
/// process may hold it already (XLA's first reservation at `0x304000000`,
/// H100, driver 580); and a reservation of a hint of our own leaves the
/// rest of the driver's block around it to the driver, which then put a
/// module's globals there (cuBLAS's `deviceConstants` at
/// `0x500000800000`, between two of XLA's reservations), elsewhere in the
/// new process. Above the placed slots (`0x4000_0000_0000`, 16 TiB) and
/// below where Linux places executables and their heaps
/// (`0x5500_0000_0000`).
const WINDOW: u64 = 0x5000_0000_0000;
/// Its length.
const WINDOW_LEN: u64 = 1 << 40;
/// Least alignment of what is carved (a 2 MiB granule, as on the H100).
const CARVE_ALIGN: u64 = 2 << 20;

/// The window's free ranges (start to length), once reserved.
static CARVER: Mutex<Option<BTreeMap<u64, u64>>> = Mutex::new(None);

fn carver() -> std::sync::MutexGuard<'static, Option<BTreeMap<u64, u64>>> {
    CARVER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reserves the window, once per process (a placed context's first
/// step); without it reservations are the driver's.
pub(super) fn reserve_window(drv: &Driver) {
    let mut c = carver();
    if c.is_some() {
        return;
    }
    let mut got = 0u64;
    let Ok(call) = entry(drv.cuMemAddressReserve) else { return };
    // SAFETY: valid out-pointer; the address is a hint the driver ignores
    // when the range is taken.
    if ok(unsafe { call(&mut got, WINDOW_LEN as usize, 0, WINDOW, 0) }).is_err() {
        return;
    }
    if got != WINDOW {
        // SAFETY: the reservation just made, freed once.
        let _ = entry(drv.cuMemAddressFree).map(|f| unsafe { f(got, WINDOW_LEN as usize) });
        tracing::warn!(got, "the window for guest reservations is taken; reservations stay where the driver puts them");
        return;
    }
    *c = Some(BTreeMap::from([(WINDOW, WINDOW_LEN)]));
}

/// Carves `size` bytes aligned to `alignment` from the window: at `hint`
/// if that range is free, else the first that fits, looking first in the
/// sixteenth of the window of address space `space` and above (so that
/// the backends of one program hand out different addresses). `None`: no
/// window, or no room.
fn carve(size: u64, alignment: u64, hint: u64, space: u16) -> Option<u64> {
    let mut g = carver();
    let free = g.as_mut()?;
    if hint == 0 && space > 0 {
        let from = WINDOW + u64::from(space) * (WINDOW_LEN / u64::from(pvgpu_ring::proto::MAX_SPACES));
        let align = alignment.max(CARVE_ALIGN);
        let at = free.iter().find_map(|(&s, &l)| {
            let at = s.max(from).checked_next_multiple_of(align)?;
            at.checked_add(size).is_some_and(|e| e <= s + l).then_some(at)
        });
        if let Some(p) = at.and_then(|at| carve_in(free, size, alignment, at)) {
            return Some(p);
        }
    }
    carve_in(free, size, alignment, hint)
}

/// [`carve`] from the free ranges `free`.
fn carve_in(free: &mut BTreeMap<u64, u64>, size: u64, alignment: u64, hint: u64) -> Option<u64> {
    let align = alignment.max(CARVE_ALIGN);
    if size == 0 || !align.is_power_of_two() {
        return None;
    }
    let fits = |start: u64, len: u64, at: u64| at >= start && at.checked_add(size).is_some_and(|e| e <= start + len);
    let exact = (hint != 0 && hint % align == 0)
        .then(|| free.range(..=hint).next_back().filter(|(s, l)| fits(**s, **l, hint)).map(|(&s, &l)| (s, l, hint)))
        .flatten();
    let (start, len, at) = exact
        .or_else(|| free.iter().find_map(|(&s, &l)| s.checked_next_multiple_of(align).filter(|&at| fits(s, l, at)).map(|at| (s, l, at))))?;
    free.remove(&start);
    if at > start {
        free.insert(start, at - start);
    }
    if at + size < start + len {
        free.insert(at + size, start + len - at - size);
    }
    Some(at)
}

/// Gives a carved range back; false if `ptr` is not in the window.
fn uncarve(ptr: u64, size: u64) -> bool {
    carver().as_mut().is_some_and(|free| uncarve_in(free, ptr, size))
}

/// [`uncarve`] into the free ranges `free`.
fn uncarve_in(free: &mut BTreeMap<u64, u64>, ptr: u64, size: u64) -> bool {
    if ptr < WINDOW || ptr.saturating_add(size) > WINDOW + WINDOW_LEN {
        return false;
    }
    let (mut start, mut len) = (ptr, size);
    if let Some((&s, &l)) = free.range(..ptr).next_back().filter(|(s, l)| **s + **l == ptr) {
        free.remove(&s);
        (start, len) = (s, l + len);
    }
    if let Some(l) = free.remove(&(ptr + size)) {
        len += l;
    }
    free.insert(start, len);
    true
}

impl CudaContext {
    pub(super) fn reserve(&mut self, size: u64, alignment: u64, addr: u64) -> CuRes<u64> {
        // Where sessions may leave their process, reservations are carved
        // from the window, where another process can have them back.
        if self.placed.is_some() {
            if let Some(p) = carve(size, alignment, addr, self.space) {
                return Ok(p);
            }
        }
        let mut p = 0u64;
        let call = entry(self.drv.cuMemAddressReserve)?;
        // SAFETY: valid out-pointer; the driver checks sizes; the address is
        // a hint the driver ignores when it is taken.
        ok(unsafe { call(&mut p, size as usize, alignment as usize, addr, 0) })?;
        Ok(p)
    }

    pub(super) fn address_free(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        if uncarve(ptr, size) {
            return Ok(());
        }
        // SAFETY: a whole reservation of this session without mappings
        // (the session checked).
        ok(unsafe { entry(self.drv.cuMemAddressFree)?(ptr, size as usize) })
    }

    /// Physical memory with `flags` (`MEM_COMPRESSIBLE`, `MEM_SHAREABLE`):
    /// its handle and the flags it has (the driver may give memory that is
    /// not compressible).
    pub(super) fn create(&mut self, size: u64, flags: u32) -> CuRes<(u64, u32)> {
        let mut h = 0u64;
        let mut prop = prop(self.dev);
        if flags & MEM_COMPRESSIBLE != 0 {
            prop.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC.0 as u8;
        }
        if flags & MEM_SHAREABLE != 0 {
            prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        // SAFETY: valid out-pointer and property.
        ok(unsafe { entry(self.drv.cuMemCreate)?(&mut h, size as usize, &prop, 0) })?;
        if flags & MEM_COMPRESSIBLE == 0 {
            return Ok((h, flags));
        }
        let mut got = prop;
        // SAFETY: valid out-pointer; a handle just made.
        ok(unsafe { entry(self.drv.cuMemGetAllocationPropertiesFromHandle)?(&mut got, h) })?;
        let compressed = got.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC.0 as u8;
        Ok((h, if compressed { flags } else { flags & !MEM_COMPRESSIBLE }))
    }

    /// The file descriptor of shareable physical memory.
    pub(super) fn export(&mut self, handle: u64) -> CuRes<IpcObject> {
        // A handle of this session made shareable (the session checked).
        let fd = export_fd(self.drv, handle)?;
        Ok(IpcObject { bytes: [0; 64], fd: Some(Arc::new(fd)) })
    }

    /// Physical memory another session exported: its handle here (the
    /// descriptor is one the driver made in another session's worker, the
    /// registry's, never the guest's).
    pub(super) fn import(&mut self, o: &IpcObject) -> CuRes<u64> {
        import_fd(self.drv, o.fd.as_ref().ok_or(pvgpu_ring::CuError::INVALID_VALUE)?)
    }

    pub(super) fn release(&mut self, handle: u64) -> CuRes<()> {
        // SAFETY: a handle this session created and has not released.
        ok(unsafe { entry(self.drv.cuMemRelease)?(handle) })
    }

    pub(super) fn map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuRes<()> {
        // SAFETY: the range lies in a reservation of this session and
        // overlaps none of its mappings; the handle is the session's, the
        // driver checks offset and size against it.
        ok(unsafe { entry(self.drv.cuMemMap)?(ptr, size as usize, offset as usize, handle, 0) })
    }

    pub(super) fn unmap(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        // SAFETY: one whole mapping of this session.
        ok(unsafe { entry(self.drv.cuMemUnmap)?(ptr, size as usize) })
    }

    pub(super) fn set_access(&mut self, ptr: u64, size: u64, flags: u32) -> CuRes<()> {
        let desc = CUmemAccessDesc {
            location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: self.dev },
            flags: CUmemAccess_flags(flags),
        };
        // SAFETY: one whole mapping of this session; flags 0, 1 or 3
        // (decoded).
        ok(unsafe { entry(self.drv.cuMemSetAccess)?(ptr, size as usize, &desc, 1) })
    }
}

/// The driver's file descriptor of physical memory `handle`, made
/// exportable as one.
pub(super) fn export_fd(drv: &Driver, handle: u64) -> CuRes<OwnedFd> {
    let mut fd: i32 = -1;
    // SAFETY: a POSIX descriptor is an int, written to `fd`; a live handle
    // of this process.
    ok(unsafe { entry(drv.cuMemExportToShareableHandle)?((&raw mut fd).cast(), handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) })?;
    if fd < 0 {
        return Err(pvgpu_ring::CuError::UNKNOWN);
    }
    // SAFETY: the driver just opened this descriptor for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The handle, in this process, of physical memory another process
/// exported as `fd` (one of the backend's own processes, never a guest's;
/// the driver takes its own reference).
pub(super) fn import_fd(drv: &Driver, fd: &OwnedFd) -> CuRes<u64> {
    use std::os::fd::AsRawFd;
    let mut h = 0u64;
    // SAFETY: valid out-pointer; a POSIX handle is the descriptor as a
    // pointer-sized value, open during the call.
    ok(unsafe {
        entry(drv.cuMemImportFromShareableHandle)?(
            &mut h,
            fd.as_raw_fd() as usize as *mut std::ffi::c_void,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
    })?;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = CARVE_ALIGN;

    #[test]
    fn carving_takes_hints_aligns_and_coalesces_what_is_given_back() {
        let mut free = BTreeMap::from([(WINDOW, WINDOW_LEN)]);
        let a = carve_in(&mut free, 3 * G, 0, 0).unwrap();
        assert_eq!(a, WINDOW);
        let b = carve_in(&mut free, G, 8 * G, 0).unwrap();
        assert_eq!(b % (8 * G), 0);
        assert!(b >= a + 3 * G);
        // A hint inside a free range is had exactly; a taken one is not.
        let at = WINDOW + 100 * G;
        assert_eq!(carve_in(&mut free, 2 * G, 0, at), Some(at));
        let other = carve_in(&mut free, 2 * G, 0, at).unwrap();
        assert_ne!(other, at);
        for (p, n) in [(a, 3 * G), (b, G), (at, 2 * G), (other, 2 * G)] {
            assert!(uncarve_in(&mut free, p, n));
        }
        assert_eq!(free, BTreeMap::from([(WINDOW, WINDOW_LEN)]), "everything coalesced back");
        assert!(!uncarve_in(&mut free, 0x7000, G), "outside the window");
        assert_eq!(carve_in(&mut free, WINDOW_LEN + G, 0, 0), None);
        assert_eq!(carve_in(&mut free, G, 3 * G, 0), None, "not a power of two");
    }

    #[test]
    fn a_restore_has_every_range_back_in_any_order() {
        let mut free = BTreeMap::from([(WINDOW, WINDOW_LEN)]);
        let ranges: Vec<(u64, u64)> = (0..20u64).map(|i| (carve_in(&mut free, (i % 3 + 1) * G, 0, 0).unwrap(), (i % 3 + 1) * G)).collect();
        let mut again = BTreeMap::from([(WINDOW, WINDOW_LEN)]);
        for &(p, n) in ranges.iter().rev() {
            assert_eq!(carve_in(&mut again, n, 0, p), Some(p));
        }
        assert_eq!(again, free);
    }
}
