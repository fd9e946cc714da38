//! Stream-ordered allocation and the default memory pool.
//!
//! `cuMemAllocAsync`/`cuMemFreeAsync` run on the backend's stream from
//! the device's default pool (the host test double allocates plainly).
//! Each device has one pool here, its default: its handle is the library's
//! own, `cuDeviceGetMemPool` returns it, its attributes and other devices'
//! access to it (`cuMemPoolSetAccess`) are the backend pool's. Pools of the
//! program's own (`cuMemPoolCreate`), and sharing them between processes,
//! are not supported.

use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, Res, ctx, handle, id, objects, put, run};
use pvgpu_frontend::Stream;
use pvgpu_ring::cuda::api::{
    CU_MEM_LOCATION_TYPE_DEVICE, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CUmemAccess_flags, CUmemAccessDesc, CUmemLocation, CUmemPool_attribute,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_void};

/// Tag of default-pool handles: `POOL_TAG | device`.
const POOL_TAG: u64 = state::LOCAL_TAG | 0x4000_0000_0000_0000;

fn pool_device(pool: *mut c_void) -> Result<c_int, CuError> {
    let h = id(pool);
    if h & POOL_TAG != POOL_TAG {
        return Err(CuError::NOT_SUPPORTED);
    }
    Ok((h & 0xffff_ffff) as u32 as c_int)
}

/// The context handle work on stream `s` runs in.
fn stream_ctx(s: *mut c_void) -> Result<u64, CuError> {
    match state::stream(s) {
        Stream::DEFAULT => state::current_handle().ok_or(CuError::INVALID_CONTEXT),
        st => objects().streams.get(&st.0).map(|i| i.ctx).ok_or(CuError::INVALID_HANDLE),
    }
}

fn alloc_async(dptr: *mut u64, size: usize, s: *mut c_void) -> Res {
    if dptr.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let h = stream_ctx(s)?;
    let graph = crate::api::capture::is_capturing(state::stream(s))?;
    let p = state::client()?.mem_alloc_async(ctx::backend(h)?, size as u64, state::ordered(s)).map_err(state::cu)?;
    let kind = if graph { DevKind::Graph } else { DevKind::Alloc };
    objects().device.insert(p, DevAlloc::new(size as u64, h, kind));
    // SAFETY: non-null and writable per the API.
    unsafe { put(dptr, p) }
}

/// `cuMemAllocAsync`.
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, size: usize, s: *mut c_void) -> CuResult {
    run("cuMemAllocAsync", || alloc_async(dptr, size, s))
}

/// `cuMemAllocFromPoolAsync`: from a device's default pool (the only pools
/// there are).
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(dptr: *mut u64, size: usize, pool: *mut c_void, s: *mut c_void) -> CuResult {
    run("cuMemAllocFromPoolAsync", || {
        pool_device(pool)?;
        alloc_async(dptr, size, s)
    })
}

/// `cuMemFreeAsync`: an address this process never allocated fails at the
/// call; graph memory keeps its address.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync(dptr: u64, s: *mut c_void) -> CuResult {
    run("cuMemFreeAsync", || {
        // As `cuMemFree`: nothing to free (cuSPARSE frees an ILU0 info's
        // absent buffer so).
        if dptr == 0 {
            return Ok(());
        }
        let c = state::client()?;
        let kind = objects().device.get(&dptr).map(|a| a.kind);
        if !matches!(kind, Some(DevKind::Alloc | DevKind::Graph)) {
            return Err(CuError::INVALID_VALUE);
        }
        c.mem_free_async(dptr, state::ordered(s)).map_err(state::cu)?;
        if kind == Some(DevKind::Alloc) {
            objects().device.remove(&dptr);
        }
        Ok(())
    })
}

fn default_pool(pool: *mut *mut c_void, dev: c_int) -> Res {
    state::client()?.device_props(dev).map_err(state::cu)?;
    // SAFETY: writable per the API.
    unsafe { put(pool, handle(POOL_TAG | dev as u32 as u64)) }
}

/// `cuDeviceGetDefaultMemPool`.
///
/// # Safety
/// `pool` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut *mut c_void, dev: c_int) -> CuResult {
    run("cuDeviceGetDefaultMemPool", || default_pool(pool, dev))
}

/// `cuDeviceGetMemPool`: the default pool.
///
/// # Safety
/// `pool` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut *mut c_void, dev: c_int) -> CuResult {
    run("cuDeviceGetMemPool", || default_pool(pool, dev))
}

/// `cuDeviceSetMemPool`: only a device's default pool can be its pool.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceSetMemPool(dev: c_int, pool: *mut c_void) -> CuResult {
    run("cuDeviceSetMemPool", || if pool_device(pool)? == dev { Ok(()) } else { Err(CuError::NOT_SUPPORTED) })
}

/// Attributes 1 to 3 are ints, the others 64-bit values.
fn is_wide(attr: CUmemPool_attribute) -> bool {
    attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
}

/// A context of the pool's device, for what concerns the device's pool as
/// a whole: the current one if it is there, else the device's primary
/// context (retained for the life of the process, as the driver keeps a
/// device's pools).
fn pool_ctx(pool: *mut c_void) -> Result<pvgpu_frontend::Context, CuError> {
    let dev = pool_device(pool)?;
    match state::current_handle().filter(|&h| ctx::device_of(h).is_ok_and(|d| d == dev)) {
        Some(h) => ctx::backend(h),
        None => ctx::backend(ctx::primary_held(dev)?),
    }
}

/// `cuMemPoolGetAttribute` of a default pool.
///
/// # Safety
/// `value` must point to storage of the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(pool: *mut c_void, attr: CUmemPool_attribute, value: *mut c_void) -> CuResult {
    run("cuMemPoolGetAttribute", || {
        let v = state::client()?.mem_pool_attribute(pool_ctx(pool)?, attr.0, None).map_err(state::cu)?;
        // SAFETY: storage of the attribute's type, per the API.
        unsafe { if is_wide(attr) { put(value.cast::<u64>(), v) } else { put(value.cast::<c_int>(), v as c_int) } }
    })
}

/// `cuMemPoolSetAttribute` of a default pool.
///
/// # Safety
/// `value` must point to a value of the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAttribute(pool: *mut c_void, attr: CUmemPool_attribute, value: *mut c_void) -> CuResult {
    run("cuMemPoolSetAttribute", || {
        if value.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: a value of the attribute's type, per the API.
        let v = unsafe { if is_wide(attr) { value.cast::<u64>().read_unaligned() } else { value.cast::<c_int>().read_unaligned() as u64 } };
        state::client()?.mem_pool_attribute(pool_ctx(pool)?, attr.0, Some(v)).map_err(state::cu)?;
        Ok(())
    })
}

/// The device a location names.
fn location_device(l: &CUmemLocation) -> Result<c_int, CuError> {
    if l.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(l.id)
}

/// `cuMemPoolSetAccess` of a default pool: each descriptor gives a device
/// of the program access (read and write) or takes it away; the backend's
/// driver decides which devices may have it.
///
/// # Safety
/// `map` must hold `count` readable descriptors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAccess(pool: *mut c_void, map: *const CUmemAccessDesc, count: usize) -> CuResult {
    run("cuMemPoolSetAccess", || {
        if map.is_null() && count > 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let c = pool_ctx(pool)?;
        // SAFETY: `count` readable descriptors, per the caller (none when
        // `count` is 0).
        let descs = if count == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(map, count) } };
        for d in descs {
            state::client()?.mem_pool_access(c, location_device(&d.location)?, Some(d.flags.0)).map_err(state::cu)?;
        }
        Ok(())
    })
}

/// `cuMemPoolGetAccess` of a default pool from a device.
///
/// # Safety
/// `flags` writable, `location` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAccess(flags: *mut CUmemAccess_flags, pool: *mut c_void, location: *mut CUmemLocation) -> CuResult {
    run("cuMemPoolGetAccess", || {
        // SAFETY: null or readable, per the API.
        let loc = unsafe { location.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        let f = state::client()?.mem_pool_access(pool_ctx(pool)?, location_device(loc)?, None).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(flags, CUmemAccess_flags(f)) }
    })
}

/// `cuMemPoolTrimTo`: a hint to return cached memory to the system; the
/// backend's pool keeps what its release threshold says, so nothing is
/// done and the program sees success.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolTrimTo(pool: *mut c_void, _min_bytes_to_keep: usize) -> CuResult {
    run("cuMemPoolTrimTo", || pool_device(pool).map(drop))
}
