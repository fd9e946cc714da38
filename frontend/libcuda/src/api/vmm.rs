//! Virtual memory management (`cuMemAddressReserve`, `cuMemCreate`,
//! `cuMemMap`, `cuMemSetAccess`, ...), as XLA and PyTorch's expandable
//! segments use it.
//!
//! Physical memory is device memory of the current context's device; the
//! backend ties each reservation, allocation and mapping to that context.
//! Compressible memory and file-descriptor shareable handles are in
//! [`super::shareable`]. Mappings are recorded here as device memory, so
//! `cuMemcpy` and pointer queries know them.

use crate::state::objects::Objects;
use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, ctx, objects, put, run};
use pvgpu_frontend::{Access, PhysMem};
use pvgpu_ring::cuda::api::{
    CU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
    CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE, CUmemAccessDesc, CUmemAllocationGranularity_flags, CUmemAllocationProp,
    CUmemLocation,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::c_int;

/// The device `prop` names (device memory of one device is all there is).
///
/// # Safety
/// `prop` must be null or readable.
unsafe fn device_of(prop: *const CUmemAllocationProp) -> Result<c_int, CuError> {
    // SAFETY: null or readable, per the caller.
    let p = unsafe { prop.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
    if p.type_ != CU_MEM_ALLOCATION_TYPE_PINNED || p.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(p.location.id)
}

/// The context physical memory of `dev` is made in: the current context
/// if it is on `dev`, else the device's primary context, retained for the
/// process's virtual memory if no one holds it (the driver needs no
/// context; the backend ties memory to one).
fn context_on(dev: c_int) -> Result<u64, CuError> {
    if let Some(h) = state::current_handle().filter(|&h| ctx::device_of(h).is_ok_and(|d| d == dev)) {
        return Ok(h);
    }
    match ctx::primary_state(dev) {
        (_, true) => Ok(ctx::primary_handle(dev)),
        _ => ctx::primary_held(dev),
    }
}

/// The context an address reservation is made in: the current one, else
/// the first device's primary context if it is active.
pub(super) fn any_context() -> Result<u64, CuError> {
    state::current_handle().map_or_else(|| context_on(0), Ok)
}

/// `cuMemGetAllocationGranularity`.
///
/// # Safety
/// `granularity` writable, `prop` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    option: CUmemAllocationGranularity_flags,
) -> CuResult {
    run("cuMemGetAllocationGranularity", || {
        // SAFETY: per the caller.
        let dev = unsafe { device_of(prop) }?;
        if option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED {
            return Err(CuError::INVALID_VALUE);
        }
        let (c, local) = state::device(dev)?;
        let g = c.mem_granularity(local, option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(granularity, g as usize) }
    })
}

/// `cuMemAddressReserve` in the current context.
///
/// # Safety
/// `ptr` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressReserve(ptr: *mut u64, size: usize, alignment: usize, addr: u64, flags: u64) -> CuResult {
    run("cuMemAddressReserve", || {
        if flags != 0 || ptr.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let h = any_context()?;
        let p = state::client_of_ctx(h)?.mem_address_reserve(ctx::backend(h)?, size as u64, alignment as u64, addr).map_err(state::cu)?;
        reservations().insert(p, (size as u64, h));
        tracing::debug!(size, alignment, addr, ptr = p, "cuMemAddressReserve");
        // SAFETY: non-null and writable per the API.
        unsafe { put(ptr, p) }
    })
}

/// Reservations by address: size and the context they were made in.
fn reservations() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<u64, (u64, u64)>> {
    static R: std::sync::Mutex<std::collections::BTreeMap<u64, (u64, u64)>> = std::sync::Mutex::new(std::collections::BTreeMap::new());
    R.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `[ptr, ptr+size)` lies in a reservation whose context was
/// destroyed. The backend unmapped and freed it with its context; the
/// driver keeps virtual memory past a context, so a program may unmap and
/// free it afterwards (NVIDIA's memMapIPCDrv does), and that succeeds.
fn gone_with_context(ptr: u64, size: u64) -> bool {
    let r = reservations();
    let found = r.range(..=ptr).next_back().filter(|(p, (n, _))| ptr.saturating_add(size) <= *p + *n);
    found.is_some_and(|(_, (_, h))| !ctx::is_live(*h))
}

/// `cuMemAddressFree`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> CuResult {
    run("cuMemAddressFree", || {
        let owner = reservations().get(&ptr).map(|r| r.1);
        let c = owner.map_or_else(state::client, state::client_of_ctx)?;
        let r = c.mem_address_free(ptr, size as u64).map_err(state::cu);
        if r.is_err() && !gone_with_context(ptr, size as u64) {
            return r;
        }
        reservations().remove(&ptr);
        Ok(())
    })
}

/// `cuMemCreate` on the current context's device.
///
/// # Safety
/// `handle` writable, `prop` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(handle: *mut u64, size: usize, prop: *const CUmemAllocationProp, flags: u64) -> CuResult {
    run("cuMemCreate", || {
        // SAFETY: per the caller.
        let dev = unsafe { device_of(prop) }?;
        let h = context_on(dev)?;
        if flags != 0 || handle.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: `device_of` read it: non-null and readable.
        let wanted = super::shareable::flags_of(unsafe { &*prop })?;
        let c = state::client_of_ctx(h)?;
        let p = if wanted == 0 {
            let mem = c.mem_create(ctx::backend(h)?, size as u64).map_err(state::cu)?;
            pvgpu_frontend::PhysInfo { mem, size: size as u64, flags: 0 }
        } else {
            c.mem_create_with(ctx::backend(h)?, size as u64, wanted).map_err(state::cu)?
        };
        super::shareable::made(&p, dev);
        tracing::debug!(size, handle = p.mem.0, flags = p.flags, "cuMemCreate");
        // SAFETY: non-null and writable per the API.
        unsafe { put(handle, p.mem.0) }
    })
}

/// `cuMemRelease`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemRelease(handle: u64) -> CuResult {
    run("cuMemRelease", || {
        state::client_of(handle)?.mem_release(PhysMem(handle)).map_err(state::cu)?;
        super::shareable::released(handle);
        Ok(())
    })
}

/// `cuMemMap`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) -> CuResult {
    run("cuMemMap", || {
        if flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let h = any_context()?;
        tracing::debug!(ptr, size, offset, handle, "cuMemMap");
        state::client_of(handle)?.mem_map(ptr, size as u64, offset as u64, PhysMem(handle)).map_err(state::cu)?;
        objects().device.insert(ptr, DevAlloc::new(size as u64, h, DevKind::Mapped(0)));
        Ok(())
    })
}

/// The mappings recorded in `[ptr, ptr+size)`.
fn mappings_in(o: &Objects, ptr: u64, size: usize) -> Vec<u64> {
    let end = ptr.saturating_add(size as u64);
    o.device.range(ptr..end).filter(|(_, a)| matches!(a.kind, DevKind::Mapped(_))).map(|(&p, _)| p).collect()
}

/// `cuMemUnmap`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> CuResult {
    run("cuMemUnmap", || {
        tracing::debug!(ptr, size, "cuMemUnmap");
        let r = state::client_of_pointer(ptr)?.mem_unmap(ptr, size as u64).map_err(state::cu);
        if r.is_err() && !gone_with_context(ptr, size as u64) {
            return r;
        }
        let mut o = objects();
        for p in mappings_in(&o, ptr, size) {
            o.device.remove(&p);
        }
        Ok(())
    })
}

/// `cuMemSetAccess`: one descriptor for the mappings' device; others name
/// devices this session does not have.
///
/// # Safety
/// `desc` must hold `count` readable descriptors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemSetAccess(ptr: u64, size: usize, desc: *const CUmemAccessDesc, count: usize) -> CuResult {
    run("cuMemSetAccess", || {
        if desc.is_null() || count == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: `count` readable descriptors, per the caller.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let owner = objects().device.get(&ptr).filter(|a| matches!(a.kind, DevKind::Mapped(_))).map(|a| a.ctx);
        let dev = ctx::device_of(owner.ok_or(CuError::INVALID_VALUE)?)?;
        let mut flags = None;
        for d in descs {
            if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE || d.location.id != dev {
                return Err(CuError::INVALID_DEVICE);
            }
            flags = Some(d.flags);
        }
        let access = match flags {
            Some(CU_MEM_ACCESS_FLAGS_PROT_NONE) => Access::None,
            Some(CU_MEM_ACCESS_FLAGS_PROT_READ) => Access::Read,
            Some(CU_MEM_ACCESS_FLAGS_PROT_READWRITE) => Access::ReadWrite,
            _ => return Err(CuError::INVALID_VALUE),
        };
        tracing::debug!(ptr, size, ?access, "cuMemSetAccess");
        state::client_of_pointer(ptr)?.mem_set_access(ptr, size as u64, access).map_err(state::cu)?;
        let mut o = objects();
        for p in mappings_in(&o, ptr, size) {
            if let Some(a) = o.device.get_mut(&p) {
                a.kind = DevKind::Mapped(access as u32);
            }
        }
        Ok(())
    })
}

/// `cuMemGetAccess`: the flags last set on the mapping holding `ptr`.
///
/// # Safety
/// `flags` writable, `location` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAccess(flags: *mut u64, location: *const CUmemLocation, ptr: u64) -> CuResult {
    run("cuMemGetAccess", || {
        // SAFETY: null or readable per the API.
        let loc = unsafe { location.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        let (_, a) = objects().device_range(ptr, 1).ok_or(CuError::INVALID_VALUE)?;
        let DevKind::Mapped(access) = a.kind else { return Err(CuError::INVALID_VALUE) };
        let mine = loc.type_ == CU_MEM_LOCATION_TYPE_DEVICE && ctx::device_of(a.ctx).is_ok_and(|d| d == loc.id);
        // SAFETY: writable per the API.
        unsafe { put(flags, if mine { access as u64 } else { 0 }) }
    })
}
