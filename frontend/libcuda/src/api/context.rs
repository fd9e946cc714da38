//! Contexts: each thread's context stack is kept here; contexts themselves
//! live in the backend.

use crate::state::ctx;
use crate::state::{self, Res, handle, id, put, run};
use pvgpu_ring::cuda::api::{
    CU_FUNC_CACHE_PREFER_EQUAL, CU_FUNC_CACHE_PREFER_NONE, CUctxCreateParams, CUexecAffinityParam, CUfunc_cache, CUlimit,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_uint, c_void};

fn create(pctx: *mut *mut c_void, flags: c_uint, dev: c_int) -> Res {
    if pctx.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    state::client()?;
    let h = ctx::create(dev, flags)?;
    // SAFETY: non-null and writable per the API.
    unsafe { put(pctx, handle(h)) }
}

/// `cuCtxCreate_v2`: the new context becomes current.
///
/// # Safety
/// `pctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut *mut c_void, flags: c_uint, dev: c_int) -> CuResult {
    run("cuCtxCreate_v2", || create(pctx, flags, dev))
}

/// `cuCtxCreate` (same signature as `_v2`).
///
/// # Safety
/// `pctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate(pctx: *mut *mut c_void, flags: c_uint, dev: c_int) -> CuResult {
    run("cuCtxCreate", || create(pctx, flags, dev))
}

/// `cuCtxCreate_v3`: execution-affinity parameters are not supported.
///
/// # Safety
/// `pctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut *mut c_void,
    params: *mut CUexecAffinityParam,
    num_params: c_int,
    flags: c_uint,
    dev: c_int,
) -> CuResult {
    run("cuCtxCreate_v3", || {
        if !params.is_null() && num_params > 0 {
            return Err(CuError::NOT_SUPPORTED);
        }
        create(pctx, flags, dev)
    })
}

/// `cuCtxCreate_v4` (CUDA 13's `cuCtxCreate`): null or zeroed creation
/// parameters make a plain context, as they do for the driver; execution
/// affinity and CIG (graphics interop) are not supported.
///
/// # Safety
/// `pctx` must be writable; `params` null or a `CUctxCreateParams`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v4(pctx: *mut *mut c_void, params: *mut CUctxCreateParams, flags: c_uint, dev: c_int) -> CuResult {
    run("cuCtxCreate_v4", || {
        if !params.is_null() {
            // SAFETY: a readable CUctxCreateParams, per the API.
            let p = unsafe { params.read_unaligned() };
            if (!p.execAffinityParams.is_null() && p.numExecAffinityParams > 0) || !p.cigParams.is_null() {
                return Err(CuError::NOT_SUPPORTED);
            }
        }
        create(pctx, flags, dev)
    })
}

fn destroy(c: *mut c_void) -> Res {
    let h = id(c);
    if h == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    state::client()?;
    ctx::destroy(h)
}

/// `cuCtxDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy_v2(ctx: *mut c_void) -> CuResult {
    run("cuCtxDestroy_v2", || destroy(ctx))
}

/// `cuCtxDestroy` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy(ctx: *mut c_void) -> CuResult {
    run("cuCtxDestroy", || destroy(ctx))
}

/// `cuCtxGetCurrent`.
///
/// # Safety
/// `pctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut *mut c_void) -> CuResult {
    run("cuCtxGetCurrent", || {
        state::client()?;
        // SAFETY: writable per the API.
        unsafe { put(pctx, state::current_handle().map_or(std::ptr::null_mut(), handle)) }
    })
}

/// `cuCtxSetCurrent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(c: *mut c_void) -> CuResult {
    run("cuCtxSetCurrent", || {
        state::client()?;
        let h = id(c);
        ctx::set_current((h != 0).then_some(h));
        Ok(())
    })
}

fn push(c: *mut c_void) -> Res {
    state::client()?;
    let h = id(c);
    if h == 0 {
        return Err(CuError::INVALID_CONTEXT);
    }
    ctx::push(h);
    Ok(())
}

fn pop(pctx: *mut *mut c_void) -> Res {
    state::client()?;
    let cid = ctx::pop().ok_or(CuError::INVALID_CONTEXT)?;
    if !pctx.is_null() {
        // SAFETY: non-null and writable per the API.
        unsafe { put(pctx, handle(cid))? };
    }
    Ok(())
}

/// `cuCtxPushCurrent_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: *mut c_void) -> CuResult {
    run("cuCtxPushCurrent_v2", || push(ctx))
}

/// `cuCtxPushCurrent` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent(ctx: *mut c_void) -> CuResult {
    run("cuCtxPushCurrent", || push(ctx))
}

/// `cuCtxPopCurrent_v2`.
///
/// # Safety
/// `pctx` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut *mut c_void) -> CuResult {
    run("cuCtxPopCurrent_v2", || pop(pctx))
}

/// `cuCtxPopCurrent` (same signature as `_v2`).
///
/// # Safety
/// `pctx` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent(pctx: *mut *mut c_void) -> CuResult {
    run("cuCtxPopCurrent", || pop(pctx))
}

fn get_device(device: *mut c_int, c: *mut c_void) -> Res {
    state::client()?;
    let dev = ctx::device_of(ctx::or_current(id(c))?)?;
    // SAFETY: writable per the API.
    unsafe { put(device, dev) }
}

/// `cuCtxGetDevice`.
///
/// # Safety
/// `device` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> CuResult {
    run("cuCtxGetDevice", || get_device(device, std::ptr::null_mut()))
}

/// `cuCtxGetDevice_v2` (CUDA 13): the device of `ctx`, or of the current
/// context for null.
///
/// # Safety
/// `device` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice_v2(device: *mut c_int, c: *mut c_void) -> CuResult {
    run("cuCtxGetDevice_v2", || get_device(device, c))
}

fn synchronize(c: *mut c_void) -> Res {
    state::client()?;
    let h = ctx::or_current(id(c))?;
    state::client_of_ctx(h)?.ctx_synchronize(ctx::backend(h)?).map_err(state::cu)?;
    crate::callback::wait_all()
}

fn peer(peer_ctx: *mut c_void, enable: bool, flags: u32) -> Res {
    let me = ctx::current()?;
    let peer = ctx::backend(id(peer_ctx)).map_err(|_| CuError::INVALID_HANDLE)?;
    let c = state::client()?;
    if !std::ptr::eq(c, state::client_of_ctx(id(peer_ctx))?) {
        // Devices of two backends have no peer link.
        return Err(CuError::PEER_ACCESS_UNSUPPORTED);
    }
    c.peer_access(me, peer, enable, flags).map_err(state::cu)
}

/// `cuCtxEnablePeerAccess`: the current context reaches `peer_ctx`'s
/// memory (contexts of the same backend on different devices).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxEnablePeerAccess(peer_ctx: *mut c_void, flags: c_uint) -> CuResult {
    run("cuCtxEnablePeerAccess", || peer(peer_ctx, true, flags))
}

/// `cuCtxDisablePeerAccess`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDisablePeerAccess(peer_ctx: *mut c_void) -> CuResult {
    run("cuCtxDisablePeerAccess", || peer(peer_ctx, false, 0))
}

/// `cuCtxSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    run("cuCtxSynchronize", || synchronize(std::ptr::null_mut()))
}

/// `cuCtxSynchronize_v2` (CUDA 13): waits for `ctx`, or the current
/// context for null.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize_v2(c: *mut c_void) -> CuResult {
    run("cuCtxSynchronize_v2", || synchronize(c))
}

fn ctx_or_current(c: *mut c_void) -> Result<pvgpu_frontend::Context, CuError> {
    ctx::backend(ctx::or_current(id(c))?)
}

/// `cuCtxGetApiVersion`.
///
/// # Safety
/// `version` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetApiVersion(c: *mut c_void, version: *mut c_uint) -> CuResult {
    run("cuCtxGetApiVersion", || {
        let i = state::client_of_ctx(ctx::or_current(id(c))?)?.ctx_info(ctx_or_current(c)?).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(version, i.api_version) }
    })
}

/// `cuCtxGetFlags`.
///
/// # Safety
/// `flags` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CuResult {
    run("cuCtxGetFlags", || {
        let i = state::client()?.ctx_info(state::current()?).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(flags, i.flags) }
    })
}

/// `cuCtxGetId`: the context's id in the session.
///
/// # Safety
/// `ctx_id` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetId(c: *mut c_void, ctx_id: *mut u64) -> CuResult {
    run("cuCtxGetId", || {
        let b = ctx_or_current(c)?;
        // SAFETY: writable per the API.
        unsafe { put(ctx_id, b.0) }
    })
}

/// `cuCtxGetStreamPriorityRange`.
///
/// # Safety
/// Each pointer must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CuResult {
    run("cuCtxGetStreamPriorityRange", || {
        let i = state::client()?.ctx_info(state::current()?).map_err(state::cu)?;
        if !least.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(least, i.least_priority)? };
        }
        if !greatest.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(greatest, i.greatest_priority)? };
        }
        Ok(())
    })
}

/// `cuCtxGetLimit`.
///
/// # Safety
/// `value` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: CUlimit) -> CuResult {
    run("cuCtxGetLimit", || {
        let v = state::client()?.ctx_get_limit(state::current()?, limit.0).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(value, v as usize) }
    })
}

/// `cuCtxSetLimit`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetLimit(limit: CUlimit, value: usize) -> CuResult {
    run("cuCtxSetLimit", || state::client()?.ctx_set_limit(state::current()?, limit.0, value as u64).map_err(state::cu))
}

/// `cuCtxGetCacheConfig`: the default preference (none).
///
/// # Safety
/// `config` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut CUfunc_cache) -> CuResult {
    run("cuCtxGetCacheConfig", || {
        state::current()?;
        // SAFETY: writable per the API.
        unsafe { put(config, CU_FUNC_CACHE_PREFER_NONE) }
    })
}

/// `cuCtxSetCacheConfig`: a preference the driver may ignore; accepted and
/// not forwarded.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCacheConfig(config: CUfunc_cache) -> CuResult {
    run("cuCtxSetCacheConfig", || {
        state::current()?;
        if config > CU_FUNC_CACHE_PREFER_EQUAL {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(())
    })
}

fn primary_retain(pctx: *mut *mut c_void, dev: c_int) -> Res {
    if pctx.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    state::client()?;
    let h = ctx::primary_retain(dev)?;
    // SAFETY: non-null and writable per the API.
    unsafe { put(pctx, handle(h)) }
}

/// `cuDevicePrimaryCtxRetain`.
///
/// # Safety
/// `pctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut *mut c_void, dev: c_int) -> CuResult {
    run("cuDevicePrimaryCtxRetain", || primary_retain(pctx, dev))
}

fn primary_release(dev: c_int) -> Res {
    state::client()?;
    ctx::primary_release(dev)
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CuResult {
    run("cuDevicePrimaryCtxRelease_v2", || primary_release(dev))
}

/// `cuDevicePrimaryCtxRelease` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease(dev: c_int) -> CuResult {
    run("cuDevicePrimaryCtxRelease", || primary_release(dev))
}

fn primary_reset(dev: c_int) -> Res {
    state::client()?;
    crate::callback::wait_all()?;
    ctx::primary_reset(dev)
}

/// `cuDevicePrimaryCtxReset_v2`: releases every reference this process
/// holds, which destroys the context and everything in it.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(dev: c_int) -> CuResult {
    run("cuDevicePrimaryCtxReset_v2", || primary_reset(dev))
}

/// `cuDevicePrimaryCtxReset` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset(dev: c_int) -> CuResult {
    run("cuDevicePrimaryCtxReset", || primary_reset(dev))
}

/// `cuDevicePrimaryCtxGetState`.
///
/// # Safety
/// `flags` and `active` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: c_int, flags: *mut c_uint, active: *mut c_int) -> CuResult {
    run("cuDevicePrimaryCtxGetState", || {
        state::device_props(dev)?;
        let (f, a) = ctx::primary_state(dev);
        let a = a as c_int;
        // SAFETY: writable per the API.
        unsafe {
            put(flags, f)?;
            put(active, a)
        }
    })
}

fn primary_set_flags(dev: c_int, flags: c_uint) -> Res {
    state::device_props(dev)?;
    ctx::primary_set_flags(dev, flags);
    Ok(())
}

/// `cuDevicePrimaryCtxSetFlags_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: c_int, flags: c_uint) -> CuResult {
    run("cuDevicePrimaryCtxSetFlags_v2", || primary_set_flags(dev, flags))
}

/// `cuDevicePrimaryCtxSetFlags` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(dev: c_int, flags: c_uint) -> CuResult {
    run("cuDevicePrimaryCtxSetFlags", || primary_set_flags(dev, flags))
}
