//! Stream-ordered allocation and memory pools.
//!
//! `cuMemAllocAsync`/`cuMemFreeAsync` run on the backend's stream from
//! the device's current pool: its default pool (the host test double
//! allocates plainly), or a pool of the program's own that
//! `cuDeviceSetMemPool` made current. A default pool's handle is the
//! library's own (`POOL_TAG | device`); a pool from `cuMemPoolCreate` is
//! the backend's (`OWN_TAG | id`), made in a context of its device (the
//! current one if it is there, else the device's primary context, which
//! the library then keeps retained). Attributes, other devices' access and
//! trims are the backend pool's. The current pool of a device is kept
//! here, per process, and never set in the backend's driver, whose
//! devices other sessions share. Pools shared between processes of the
//! guest (file descriptors) are in [`super::pool_ipc`].

use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, Res, ctx, handle, id, objects, put, run};
use pvgpu_frontend::{MemPool, Stream};
use pvgpu_ring::cuda::api::{
    CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_NONE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_LOCATION_TYPE_DEVICE,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationType, CUmemLocation, CUmemPool_attribute,
    CUmemPoolProps,
};
use pvgpu_ring::{CuError, CuResult};
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// Tag of default-pool handles: `POOL_TAG | device`.
const POOL_TAG: u64 = state::LOCAL_TAG | 0x4000_0000_0000_0000;

/// Tag of pools of the program's own: `OWN_TAG | backend id`.
const OWN_TAG: u64 = state::LOCAL_TAG | 0x2000_0000_0000_0000;

/// The program's pools, by backend id: their devices.
static OWN: Mutex<BTreeMap<u64, c_int>> = Mutex::new(BTreeMap::new());
/// Each device's current pool where it is one of the program's own.
static CURRENT: Mutex<BTreeMap<c_int, u64>> = Mutex::new(BTreeMap::new());

pub(super) fn own() -> std::sync::MutexGuard<'static, BTreeMap<u64, c_int>> {
    OWN.lock().unwrap_or_else(|p| p.into_inner())
}

fn current() -> std::sync::MutexGuard<'static, BTreeMap<c_int, u64>> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pool handle, as the program holds it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pool {
    /// A device's default pool.
    Default(c_int),
    /// A pool of the program's own, on a device.
    Own(MemPool, c_int),
}

impl Pool {
    pub(super) fn of(pool: *mut c_void) -> Result<Pool, CuError> {
        let h = id(pool);
        if h & POOL_TAG == POOL_TAG {
            return Ok(Pool::Default((h & 0xffff_ffff) as u32 as c_int));
        }
        if h & OWN_TAG == OWN_TAG {
            let backend = h & !OWN_TAG;
            if let Some(&dev) = own().get(&backend) {
                return Ok(Pool::Own(MemPool(backend), dev));
            }
        }
        Err(CuError::INVALID_VALUE)
    }

    pub(super) fn device(self) -> c_int {
        match self {
            Pool::Default(d) | Pool::Own(_, d) => d,
        }
    }

    pub(super) fn handle(self) -> *mut c_void {
        match self {
            Pool::Default(d) => handle(POOL_TAG | d as u32 as u64),
            Pool::Own(p, _) => handle(OWN_TAG | p.0),
        }
    }

    /// `dev`'s current pool.
    fn current(dev: c_int) -> Pool {
        match current().get(&dev) {
            Some(&p) => Pool::Own(MemPool(p), dev),
            None => Pool::Default(dev),
        }
    }
}

/// The context handle work on stream `s` runs in.
fn stream_ctx(s: *mut c_void) -> Result<u64, CuError> {
    match state::stream(s) {
        Stream::DEFAULT => state::current_handle().ok_or(CuError::INVALID_CONTEXT),
        st => objects().streams.get(&st.0).map(|i| i.ctx).ok_or(CuError::INVALID_HANDLE),
    }
}

/// Allocates on stream `s` from `pool`, or from the current pool of the
/// stream's device.
fn alloc_async(dptr: *mut u64, size: usize, s: *mut c_void, pool: Option<Pool>) -> Res {
    if dptr.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let h = stream_ctx(s)?;
    let graph = crate::api::capture::is_capturing(state::stream(s))?;
    let c = state::client_of_ctx(h)?;
    let p = match pool.unwrap_or(Pool::current(ctx::device_of(h)?)) {
        Pool::Default(_) => c.mem_alloc_async(ctx::backend(h)?, size as u64, state::ordered(s)),
        Pool::Own(p, _) => c.mem_alloc_from_pool(ctx::backend(h)?, p, size as u64, state::ordered(s)),
    }
    .map_err(state::cu)?;
    let kind = if graph { DevKind::Graph } else { DevKind::Alloc };
    if state::backends::clashes(p, size as u64, state::backends::backend_of_ctx(h)) {
        let _ = c.mem_free(p);
        return Err(CuError::OUT_OF_MEMORY);
    }
    objects().device.insert(p, DevAlloc::new(size as u64, h, kind));
    // SAFETY: non-null and writable per the API.
    unsafe { put(dptr, p) }
}

/// `cuMemAllocAsync`: from the current pool of the stream's device.
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, size: usize, s: *mut c_void) -> CuResult {
    run("cuMemAllocAsync", || alloc_async(dptr, size, s, None))
}

/// `cuMemAllocFromPoolAsync`.
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(dptr: *mut u64, size: usize, pool: *mut c_void, s: *mut c_void) -> CuResult {
    run("cuMemAllocFromPoolAsync", || alloc_async(dptr, size, s, Some(Pool::of(pool)?)))
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
        let c = state::client_of_pointer(dptr)?;
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

fn put_pool(out: *mut *mut c_void, dev: c_int, pool: impl FnOnce(c_int) -> Pool) -> Res {
    state::device_props(dev)?;
    // SAFETY: writable per the API.
    unsafe { put(out, pool(dev).handle()) }
}

/// `cuDeviceGetDefaultMemPool`.
///
/// # Safety
/// `pool` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut *mut c_void, dev: c_int) -> CuResult {
    run("cuDeviceGetDefaultMemPool", || put_pool(pool, dev, Pool::Default))
}

/// `cuDeviceGetMemPool`: the device's current pool.
///
/// # Safety
/// `pool` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut *mut c_void, dev: c_int) -> CuResult {
    run("cuDeviceGetMemPool", || put_pool(pool, dev, Pool::current))
}

/// `cuDeviceSetMemPool`: a pool of the device becomes its current one
/// (what `cuMemAllocAsync` allocates from in this process).
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceSetMemPool(dev: c_int, pool: *mut c_void) -> CuResult {
    run("cuDeviceSetMemPool", || set_current(dev, pool))
}

fn set_current(dev: c_int, pool: *mut c_void) -> Res {
    let pool = Pool::of(pool)?;
    if pool.device() != dev {
        return Err(CuError::INVALID_DEVICE);
    }
    match pool {
        Pool::Default(_) => current().remove(&dev),
        Pool::Own(p, _) => current().insert(dev, p.0),
    };
    Ok(())
}

/// The device a pool location of CUDA 13's location-based calls names:
/// device memory of a device. Host and managed pools are not offered
/// (`CUDA_ERROR_NOT_SUPPORTED`).
///
/// # Safety
/// `location` must be null or readable.
unsafe fn located(location: *const CUmemLocation, kind: CUmemAllocationType) -> Result<c_int, CuError> {
    // SAFETY: null or readable, per the caller.
    let l = unsafe { location.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
    if kind != CU_MEM_ALLOCATION_TYPE_PINNED || l.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CuError::NOT_SUPPORTED);
    }
    state::device_props(l.id).map_err(|_| CuError::INVALID_DEVICE)?;
    Ok(l.id)
}

/// `cuMemGetDefaultMemPool` (CUDA 13): a device's default pool.
///
/// # Safety
/// `pool` must be writable, `location` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetDefaultMemPool(
    pool: *mut *mut c_void,
    location: *mut CUmemLocation,
    kind: CUmemAllocationType,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuMemGetDefaultMemPool", || put_pool(pool, unsafe { located(location, kind) }?, Pool::Default))
}

/// `cuMemGetMemPool` (CUDA 13): a device's current pool.
///
/// # Safety
/// `pool` must be writable, `location` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetMemPool(pool: *mut *mut c_void, location: *mut CUmemLocation, kind: CUmemAllocationType) -> CuResult {
    // SAFETY: per the caller.
    run("cuMemGetMemPool", || put_pool(pool, unsafe { located(location, kind) }?, Pool::current))
}

/// `cuMemSetMemPool` (CUDA 13): a pool of a device becomes its current one.
///
/// # Safety
/// `location` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemSetMemPool(location: *mut CUmemLocation, kind: CUmemAllocationType, pool: *mut c_void) -> CuResult {
    // SAFETY: per the caller.
    run("cuMemSetMemPool", || set_current(unsafe { located(location, kind) }?, pool))
}

/// A context of device `dev` for what concerns its pools: the current one
/// if it is there, else the device's primary context (retained for the
/// life of the process, as the driver keeps a device's pools).
pub(super) fn device_ctx(dev: c_int) -> Result<pvgpu_frontend::Context, CuError> {
    match state::current_handle().filter(|&h| ctx::device_of(h).is_ok_and(|d| d == dev)) {
        Some(h) => ctx::backend(h),
        None => ctx::backend(ctx::primary_held(dev)?),
    }
}

/// `cuMemPoolCreate`: device memory of one device, without shareable
/// handle types (pools shared between processes are not supported).
///
/// # Safety
/// `pool` writable, `props` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut *mut c_void, props: *const CUmemPoolProps) -> CuResult {
    run("cuMemPoolCreate", || {
        // SAFETY: null or readable, per the API.
        let p = unsafe { props.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        if pool.is_null() || p.allocType != CU_MEM_ALLOCATION_TYPE_PINNED {
            return Err(CuError::INVALID_VALUE);
        }
        let shareable = match p.handleTypes {
            CU_MEM_HANDLE_TYPE_NONE => false,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR => true,
            _ => return Err(CuError::NOT_SUPPORTED),
        };
        if p.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE || p.usage != 0 {
            return Err(CuError::NOT_SUPPORTED);
        }
        let dev = p.location.id;
        state::device_props(dev).map_err(|_| CuError::INVALID_DEVICE)?;
        let c = state::device(dev)?.0;
        let made = if shareable {
            c.mem_pool_create_with(device_ctx(dev)?, p.maxSize as u64, pvgpu_ring::proto::MEM_SHAREABLE)
        } else {
            c.mem_pool_create(device_ctx(dev)?, p.maxSize as u64)
        }
        .map_err(state::cu)?;
        own().insert(made.0, dev);
        // SAFETY: non-null and writable per the API.
        unsafe { put(pool, Pool::Own(made, dev).handle()) }
    })
}

/// `cuMemPoolDestroy`: a pool of the program's own (a default pool cannot
/// be destroyed); a device whose current pool it was goes back to its
/// default pool. Its allocations stay valid until freed.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolDestroy(pool: *mut c_void) -> CuResult {
    run("cuMemPoolDestroy", || {
        let Pool::Own(p, dev) = Pool::of(pool)? else { return Err(CuError::INVALID_VALUE) };
        state::device(dev)?.0.mem_pool_destroy(p).map_err(state::cu)?;
        own().remove(&p.0);
        let mut cur = current();
        if cur.get(&dev) == Some(&p.0) {
            cur.remove(&dev);
        }
        Ok(())
    })
}

/// Attributes 1 to 3 are ints, the others 64-bit values.
fn is_wide(attr: CUmemPool_attribute) -> bool {
    attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
}

/// Gets (`set` `None`) or sets an attribute of a pool.
fn attribute(pool: *mut c_void, attr: CUmemPool_attribute, set: Option<u64>) -> Result<u64, CuError> {
    let pool = Pool::of(pool)?;
    let c = state::device(pool.device())?.0;
    match pool {
        Pool::Default(dev) => c.mem_pool_attribute(device_ctx(dev)?, attr.0, set),
        Pool::Own(p, _) => c.mem_pool_attribute_of(p, attr.0, set),
    }
    .map_err(state::cu)
}

/// `cuMemPoolGetAttribute`.
///
/// # Safety
/// `value` must point to storage of the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(pool: *mut c_void, attr: CUmemPool_attribute, value: *mut c_void) -> CuResult {
    run("cuMemPoolGetAttribute", || {
        if value.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let v = attribute(pool, attr, None)?;
        // SAFETY: storage of the attribute's type, per the API.
        unsafe { if is_wide(attr) { put(value.cast::<u64>(), v) } else { put(value.cast::<c_int>(), v as c_int) } }
    })
}

/// `cuMemPoolSetAttribute`.
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
        attribute(pool, attr, Some(v)).map(drop)
    })
}

/// A device's access to a pool: gets (`set` `None`) or sets it.
fn access(pool: Pool, dev: c_int, set: Option<u32>) -> Result<u32, CuError> {
    let c = state::device(pool.device())?.0;
    let (of_dev, dev) = state::device(dev)?;
    if !std::ptr::eq(c, of_dev) {
        // A device of another backend cannot reach the pool's memory.
        return Err(CuError::INVALID_DEVICE);
    }
    match pool {
        Pool::Default(d) => c.mem_pool_access(device_ctx(d)?, dev, set),
        Pool::Own(p, _) => c.mem_pool_access_of(p, dev, set),
    }
    .map_err(state::cu)
}

/// The device a location names.
fn location_device(l: &CUmemLocation) -> Result<c_int, CuError> {
    if l.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(l.id)
}

/// `cuMemPoolSetAccess`: each descriptor gives a device of the program
/// access (read and write) or takes it away; the backend's driver decides
/// which devices may have it.
///
/// # Safety
/// `map` must hold `count` readable descriptors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAccess(pool: *mut c_void, map: *const CUmemAccessDesc, count: usize) -> CuResult {
    run("cuMemPoolSetAccess", || {
        if map.is_null() && count > 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let pool = Pool::of(pool)?;
        // SAFETY: `count` readable descriptors, per the caller (none when
        // `count` is 0).
        let descs = if count == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(map, count) } };
        for d in descs {
            access(pool, location_device(&d.location)?, Some(d.flags.0))?;
        }
        Ok(())
    })
}

/// `cuMemPoolGetAccess` of a pool from a device.
///
/// # Safety
/// `flags` writable, `location` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAccess(flags: *mut CUmemAccess_flags, pool: *mut c_void, location: *mut CUmemLocation) -> CuResult {
    run("cuMemPoolGetAccess", || {
        // SAFETY: null or readable, per the API.
        let loc = unsafe { location.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        let f = access(Pool::of(pool)?, location_device(loc)?, None)?;
        // SAFETY: writable per the API.
        unsafe { put(flags, CUmemAccess_flags(f)) }
    })
}

/// `cuMemPoolTrimTo`: what the pool caches beyond `min_bytes_to_keep`
/// goes back to the device.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolTrimTo(pool: *mut c_void, min_bytes_to_keep: usize) -> CuResult {
    run("cuMemPoolTrimTo", || {
        let pool = Pool::of(pool)?;
        let own = match pool {
            Pool::Own(p, _) => Some(p),
            Pool::Default(_) => None,
        };
        state::device(pool.device())?.0.mem_pool_trim(device_ctx(pool.device())?, own, min_bytes_to_keep as u64).map_err(state::cu)
    })
}
