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
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

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

/// Where guest reservations go with `--device-memory placed` (a hint to
/// the driver, which gives a new process the very range it asks for if
/// nothing holds it): above the placed slots (`0x4000_0000_0000`, 16 TiB)
/// and below where Linux places executables and their heaps
/// (`0x5500_0000_0000`). The driver's own choice lies in its heap, beside
/// the process's other mappings, where a new process may hold it already
/// (XLA's first reservation at `0x304000000`, H100, driver 580).
const PLACED_VMM: u64 = 0x5000_0000_0000;
/// Addresses of that window.
const PLACED_VMM_LEN: u64 = 4 << 40;
/// Alignment of those hints (a 2 MiB granule, as on the H100, or more).
const PLACED_VMM_ALIGN: u64 = 2 << 20;
/// The next hint's offset in the window.
static PLACED_NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A hint for a reservation of `size` bytes aligned to `alignment`, or 0
/// (the driver's choice) once the window is used up.
fn placed_hint(size: u64, alignment: u64) -> u64 {
    use std::sync::atomic::Ordering;
    let align = alignment.max(PLACED_VMM_ALIGN);
    if !align.is_power_of_two() || size > PLACED_VMM_LEN {
        return 0;
    }
    // Relaxed: a counter of offsets; each caller gets its own range.
    let taken = PLACED_NEXT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |at| {
        let start = at.checked_next_multiple_of(align)?;
        let end = start.checked_add(size)?.checked_add(PLACED_VMM_ALIGN)?;
        (end <= PLACED_VMM_LEN).then_some(end)
    });
    match taken {
        Ok(at) => at.checked_next_multiple_of(align).map_or(0, |start| PLACED_VMM + start),
        Err(_) => 0,
    }
}

impl CudaContext {
    pub(super) fn reserve(&mut self, size: u64, alignment: u64, addr: u64) -> CuRes<u64> {
        // Where sessions may leave their process, a reservation without a
        // place of its own goes where another process can have it back.
        let addr = if addr == 0 && self.placed.is_some() { placed_hint(size, alignment) } else { addr };
        let mut p = 0u64;
        let call = entry(self.drv.cuMemAddressReserve)?;
        // SAFETY: valid out-pointer; the driver checks sizes; the address is
        // a hint the driver ignores when it is taken.
        ok(unsafe { call(&mut p, size as usize, alignment as usize, addr, 0) })?;
        Ok(p)
    }

    pub(super) fn address_free(&mut self, ptr: u64, size: u64) -> CuRes<()> {
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
        let mut fd: i32 = -1;
        // SAFETY: a POSIX descriptor is an int, written to `fd`; a handle of
        // this session made shareable (the session checked).
        ok(unsafe {
            entry(self.drv.cuMemExportToShareableHandle)?((&raw mut fd).cast(), handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
        })?;
        if fd < 0 {
            return Err(pvgpu_ring::CuError::UNKNOWN);
        }
        // SAFETY: the driver just opened this descriptor for us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(IpcObject { bytes: [0; 64], fd: Some(Arc::new(fd)) })
    }

    /// Physical memory another session exported: its handle here.
    pub(super) fn import(&mut self, o: &IpcObject) -> CuRes<u64> {
        use std::os::fd::AsRawFd;
        let fd = o.fd.as_ref().ok_or(pvgpu_ring::CuError::INVALID_VALUE)?;
        let mut h = 0u64;
        // SAFETY: valid out-pointer; a POSIX handle is the descriptor as a
        // pointer-sized value; the descriptor is one the driver made in
        // another session's worker (the registry's, never the guest's), and
        // stays open during the call (the driver takes its own reference).
        ok(unsafe {
            entry(self.drv.cuMemImportFromShareableHandle)?(
                &mut h,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        })?;
        Ok(h)
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
