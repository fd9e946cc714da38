//! Virtual memory management on the GPU: reservations, physical
//! allocations, mappings and access, for the session's own context and
//! device. Physical memory is plain device memory of the context's device,
//! with no shareable handle (nothing leaves the session).

use super::ext::ExtFns;
use super::{CudaContext, ck_raw};
use crate::exec::CuRes;
use cudarc::driver::sys;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
const TYPE_PINNED: u32 = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;

/// `CUmemAllocationProp` (32 bytes), enums as integers.
#[repr(C)]
pub(super) struct RawProp {
    kind: u32,
    handle_types: u32,
    location_type: u32,
    location_id: i32,
    win32_metadata: *mut std::ffi::c_void,
    alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc` (12 bytes).
#[repr(C)]
pub(super) struct RawAccess {
    location_type: u32,
    location_id: i32,
    flags: u32,
}

/// Device memory of `dev`, no shareable handle.
fn prop(dev: sys::CUdevice) -> RawProp {
    RawProp {
        kind: TYPE_PINNED,
        handle_types: 0,
        location_type: LOCATION_DEVICE,
        location_id: dev,
        win32_metadata: std::ptr::null_mut(),
        alloc_flags: [0; 8],
    }
}

/// The allocation granularity of device memory on `dev`.
pub(super) fn granularity(ext: &ExtFns, dev: sys::CUdevice, option: u32) -> CuRes<u64> {
    let mut g = 0usize;
    let prop = prop(dev);
    // SAFETY: valid out-pointer and property; option 0 or 1 (decoded).
    ck_raw(unsafe { (ext.granularity)(&mut g, &prop, option) })?;
    Ok(g as u64)
}

impl CudaContext {
    pub(super) fn reserve(&mut self, size: u64, alignment: u64, addr: u64) -> CuRes<u64> {
        let mut p = 0u64;
        // SAFETY: valid out-pointer; the driver checks sizes; the address is
        // a hint the driver ignores when it is taken.
        ck_raw(unsafe { (self.ext.address_reserve)(&mut p, size as usize, alignment as usize, addr, 0) })?;
        Ok(p)
    }

    pub(super) fn address_free(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        // SAFETY: a whole reservation of this session without mappings
        // (the session checked).
        ck_raw(unsafe { (self.ext.address_free)(ptr, size as usize) })
    }

    pub(super) fn create(&mut self, size: u64) -> CuRes<u64> {
        let mut h = 0u64;
        let prop = prop(self.dev);
        // SAFETY: valid out-pointer and property.
        ck_raw(unsafe { (self.ext.create)(&mut h, size as usize, &prop, 0) })?;
        Ok(h)
    }

    pub(super) fn release(&mut self, handle: u64) -> CuRes<()> {
        // SAFETY: a handle this session created and has not released.
        ck_raw(unsafe { (self.ext.release)(handle) })
    }

    pub(super) fn map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuRes<()> {
        // SAFETY: the range lies in a reservation of this session and
        // overlaps none of its mappings; the handle is the session's, the
        // driver checks offset and size against it.
        ck_raw(unsafe { (self.ext.map)(ptr, size as usize, offset as usize, handle, 0) })
    }

    pub(super) fn unmap(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        // SAFETY: one whole mapping of this session.
        ck_raw(unsafe { (self.ext.unmap)(ptr, size as usize) })
    }

    pub(super) fn set_access(&mut self, ptr: u64, size: u64, flags: u32) -> CuRes<()> {
        let desc = RawAccess { location_type: LOCATION_DEVICE, location_id: self.dev, flags };
        // SAFETY: one whole mapping of this session; flags 0, 1 or 3
        // (decoded).
        ck_raw(unsafe { (self.ext.set_access)(ptr, size as usize, &desc, 1) })
    }
}
