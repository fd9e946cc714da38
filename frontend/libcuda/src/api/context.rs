//! Contexts: each thread's context stack is kept here; contexts themselves
//! live in the backend.

use crate::state::{self, Res, handle, id, objects, put, run};
use pvgpu_frontend::Context;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_uint, c_void};

fn create(pctx: *mut *mut c_void, flags: c_uint, dev: c_int) -> Res {
    if pctx.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let c = state::client()?.ctx_create(dev, flags).map_err(state::cu)?;
    objects().ctx_device.insert(c.0, dev);
    state::push(c.0);
    // SAFETY: non-null and writable per the API.
    unsafe { put(pctx, handle(c.0)) }
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
    params: *mut c_void,
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

/// `cuCtxCreate_v4`: creation parameters (affinity, CIG) are not supported.
///
/// # Safety
/// `pctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v4(pctx: *mut *mut c_void, params: *mut c_void, flags: c_uint, dev: c_int) -> CuResult {
    run("cuCtxCreate_v4", || {
        if !params.is_null() {
            return Err(CuError::NOT_SUPPORTED);
        }
        create(pctx, flags, dev)
    })
}

fn destroy(ctx: *mut c_void) -> Res {
    let cid = id(ctx);
    if cid == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    state::client()?.ctx_destroy(Context(cid)).map_err(state::cu)?;
    objects().drop_ctx(cid);
    state::forget_ctx(cid);
    Ok(())
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
        unsafe { put(pctx, state::current_id().map_or(std::ptr::null_mut(), handle)) }
    })
}

/// `cuCtxSetCurrent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> CuResult {
    run("cuCtxSetCurrent", || {
        state::client()?;
        let cid = id(ctx);
        state::set_current((cid != 0).then_some(cid));
        Ok(())
    })
}

fn push(ctx: *mut c_void) -> Res {
    state::client()?;
    let cid = id(ctx);
    if cid == 0 {
        return Err(CuError::INVALID_CONTEXT);
    }
    state::push(cid);
    Ok(())
}

fn pop(pctx: *mut *mut c_void) -> Res {
    state::client()?;
    let cid = state::pop().ok_or(CuError::INVALID_CONTEXT)?;
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

/// `cuCtxGetDevice`.
///
/// # Safety
/// `device` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> CuResult {
    run("cuCtxGetDevice", || {
        let ctx = state::current()?;
        let dev = *objects().ctx_device.get(&ctx.0).ok_or(CuError::INVALID_CONTEXT)?;
        // SAFETY: writable per the API.
        unsafe { put(device, dev) }
    })
}

/// `cuCtxSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    run("cuCtxSynchronize", || state::client()?.ctx_synchronize(state::current()?).map_err(state::cu))
}

fn ctx_or_current(ctx: *mut c_void) -> Result<Context, CuError> {
    match id(ctx) {
        0 => state::current(),
        c => Ok(Context(c)),
    }
}

/// `cuCtxGetApiVersion`.
///
/// # Safety
/// `version` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: *mut c_void, version: *mut c_uint) -> CuResult {
    run("cuCtxGetApiVersion", || {
        let i = state::client()?.ctx_info(ctx_or_current(ctx)?).map_err(state::cu)?;
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
pub unsafe extern "C" fn cuCtxGetId(ctx: *mut c_void, ctx_id: *mut u64) -> CuResult {
    run("cuCtxGetId", || {
        let c = ctx_or_current(ctx)?;
        // SAFETY: writable per the API.
        unsafe { put(ctx_id, c.0) }
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
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_uint) -> CuResult {
    run("cuCtxGetLimit", || {
        let v = state::client()?.ctx_get_limit(state::current()?, limit).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(value, v as usize) }
    })
}

/// `cuCtxSetLimit`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetLimit(limit: c_uint, value: usize) -> CuResult {
    run("cuCtxSetLimit", || state::client()?.ctx_set_limit(state::current()?, limit, value as u64).map_err(state::cu))
}

/// `cuCtxGetCacheConfig`: the default preference (none).
///
/// # Safety
/// `config` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_int) -> CuResult {
    run("cuCtxGetCacheConfig", || {
        state::current()?;
        // SAFETY: writable per the API.
        unsafe { put(config, 0) }
    })
}

/// `cuCtxSetCacheConfig`: a preference the driver may ignore; accepted and
/// not forwarded.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCacheConfig(config: c_int) -> CuResult {
    run("cuCtxSetCacheConfig", || {
        state::current()?;
        if !(0..=3).contains(&config) {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(())
    })
}

fn primary_retain(pctx: *mut *mut c_void, dev: c_int) -> Res {
    if pctx.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let c = state::client()?.primary_ctx_retain(dev).map_err(state::cu)?;
    {
        let mut o = objects();
        o.ctx_device.insert(c.0, dev);
        let e = o.primary.entry(dev).or_insert((c.0, 0, 0));
        e.0 = c.0;
        e.1 += 1;
    }
    // SAFETY: non-null and writable per the API.
    unsafe { put(pctx, handle(c.0)) }
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
    state::client()?.primary_ctx_release(dev).map_err(state::cu)?;
    let mut o = objects();
    if let Some(e) = o.primary.get_mut(&dev) {
        e.1 = e.1.saturating_sub(1);
        if e.1 == 0 {
            let ctx = e.0;
            o.drop_ctx(ctx);
            drop(o);
            state::forget_ctx(ctx);
        }
    }
    Ok(())
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
    let refs = objects().primary.get(&dev).map_or(0, |e| e.1);
    for _ in 0..refs {
        primary_release(dev)?;
    }
    Ok(())
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
        state::client()?.device_props(dev).map_err(state::cu)?;
        let (f, a) = objects().primary.get(&dev).map_or((0, 0), |e| (e.2, (e.1 > 0) as c_int));
        // SAFETY: writable per the API.
        unsafe {
            put(flags, f)?;
            put(active, a)
        }
    })
}

fn primary_set_flags(dev: c_int, flags: c_uint) -> Res {
    state::client()?.device_props(dev).map_err(state::cu)?;
    // Scheduling flags only steer how the host thread waits, which happens
    // in the backend; they are recorded for cuDevicePrimaryCtxGetState.
    objects().primary.entry(dev).or_insert((0, 0, 0)).2 = flags;
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
