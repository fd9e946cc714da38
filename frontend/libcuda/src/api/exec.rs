//! Streams and events. Event records and stream waits are sent without
//! waiting for the backend; their errors come back at the next
//! synchronising call. Each goes to the backend that made the stream or
//! event (a program may use several, [`crate::state::backends`]).

use crate::state::{self, Res, StreamInfo, handle, id, objects, put, run, stream};
use pvgpu_frontend::{Event, Stream};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_float, c_int, c_uint, c_void};

fn stream_create(ph: *mut *mut c_void, flags: c_uint, priority: c_int) -> Res {
    if ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = state::current()?;
    let s = state::client()?.stream_create(ctx, flags, priority).map_err(state::cu)?;
    let ctx_handle = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    objects().streams.insert(s.0, StreamInfo { ctx: ctx_handle, flags, priority });
    // SAFETY: non-null and writable per the API.
    unsafe { put(ph, handle(s.0)) }
}

/// `cuStreamCreate`.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut *mut c_void, flags: c_uint) -> CuResult {
    run("cuStreamCreate", || stream_create(ph, flags, 0))
}

/// `cuStreamCreateWithPriority`.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(ph: *mut *mut c_void, flags: c_uint, priority: c_int) -> CuResult {
    run("cuStreamCreateWithPriority", || stream_create(ph, flags, priority))
}

fn stream_destroy(s: *mut c_void) -> Res {
    let sid = id(s);
    if objects().streams.remove(&sid).is_none() {
        return Err(CuError::INVALID_HANDLE);
    }
    state::client_of(sid)?.stream_destroy(Stream(sid)).map_err(state::cu)
}

/// `cuStreamDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(s: *mut c_void) -> CuResult {
    run("cuStreamDestroy_v2", || stream_destroy(s))
}

/// `cuStreamDestroy` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy(s: *mut c_void) -> CuResult {
    run("cuStreamDestroy", || stream_destroy(s))
}

fn stream_sync(s: *mut c_void) -> Res {
    let c = state::client_of_stream(s)?;
    match state::ordered(s) {
        Stream::DEFAULT => c.ctx_synchronize(state::current()?),
        st => c.stream_synchronize(st),
    }
    .map_err(state::cu)
}

/// `cuStreamSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(s: *mut c_void) -> CuResult {
    run("cuStreamSynchronize", || stream_sync(s))
}

fn stream_query(s: *mut c_void) -> Res {
    let c = state::client_of_stream(s)?;
    if crate::callback::busy(stream(s)) {
        return Err(CuError::NOT_READY);
    }
    let idle = match stream(s) {
        Stream::DEFAULT => c.ctx_synchronize(state::current()?).map(|_| true),
        st => c.stream_query(st),
    }
    .map_err(state::cu)?;
    if idle { Ok(()) } else { Err(CuError::NOT_READY) }
}

/// `cuStreamQuery`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery(s: *mut c_void) -> CuResult {
    run("cuStreamQuery", || stream_query(s))
}

fn stream_wait(s: *mut c_void, e: *mut c_void) -> Res {
    let (c, of_event) = (state::client_of_stream(s)?, state::client_of(id(e))?);
    if !std::ptr::eq(c, of_event) {
        // An event of another backend: the stream's later work follows it
        // once it has happened, so wait for it here.
        return of_event.event_synchronize(Event(id(e))).map_err(state::cu);
    }
    c.stream_wait_event(state::ordered(s), Event(id(e))).map_err(state::cu)
}

/// `cuStreamWaitEvent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(s: *mut c_void, e: *mut c_void, _flags: c_uint) -> CuResult {
    run("cuStreamWaitEvent", || stream_wait(s, e))
}

pub(crate) fn stream_info(s: *mut c_void) -> Result<Option<StreamInfo>, CuError> {
    match stream(s) {
        Stream::DEFAULT => Ok(None),
        st => objects().streams.get(&st.0).copied().map(Some).ok_or(CuError::INVALID_HANDLE),
    }
}

/// `cuStreamGetCtx`.
///
/// # Safety
/// `pctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCtx(s: *mut c_void, pctx: *mut *mut c_void) -> CuResult {
    run("cuStreamGetCtx", || {
        let ctx = match stream_info(s)? {
            Some(i) => i.ctx,
            None => state::current()?.0,
        };
        // SAFETY: writable per the API.
        unsafe { put(pctx, handle(ctx)) }
    })
}

/// `cuStreamGetCtx_v2`: the stream's context; green contexts are not
/// supported, so that one is always null.
///
/// # Safety
/// `pctx` must be writable; `green` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCtx_v2(s: *mut c_void, pctx: *mut *mut c_void, green: *mut *mut c_void) -> CuResult {
    // SAFETY: the same contract for `pctx`.
    let r = unsafe { cuStreamGetCtx(s, pctx) };
    if r.is_success() && !green.is_null() {
        // SAFETY: non-null and writable per the API.
        unsafe { green.write(std::ptr::null_mut()) };
    }
    r
}

/// `cuStreamGetFlags`.
///
/// # Safety
/// `flags` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetFlags(s: *mut c_void, flags: *mut c_uint) -> CuResult {
    run("cuStreamGetFlags", || {
        let f = stream_info(s)?.map_or(0, |i| i.flags);
        // SAFETY: writable per the API.
        unsafe { put(flags, f) }
    })
}

/// `cuStreamGetPriority`.
///
/// # Safety
/// `priority` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetPriority(s: *mut c_void, priority: *mut c_int) -> CuResult {
    run("cuStreamGetPriority", || {
        let p = stream_info(s)?.map_or(0, |i| i.priority);
        // SAFETY: writable per the API.
        unsafe { put(priority, p) }
    })
}

/// `cuStreamGetId`.
///
/// # Safety
/// `stream_id` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetId(s: *mut c_void, stream_id: *mut u64) -> CuResult {
    run("cuStreamGetId", || {
        stream_info(s)?;
        // SAFETY: writable per the API.
        unsafe { put(stream_id, stream(s).0) }
    })
}

/// `cuEventCreate`.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(ph: *mut *mut c_void, flags: c_uint) -> CuResult {
    run("cuEventCreate", || {
        if ph.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let e = state::client()?.event_create(state::current()?, flags).map_err(state::cu)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(ph, handle(e.0)) }
    })
}

fn record(e: *mut c_void, s: *mut c_void) -> Res {
    state::client_of(id(e))?.event_record(Event(id(e)), state::ordered(s)).map_err(state::cu)
}

/// `cuEventRecord`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(e: *mut c_void, s: *mut c_void) -> CuResult {
    run("cuEventRecord", || record(e, s))
}

/// `cuEventRecordWithFlags`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecordWithFlags(e: *mut c_void, s: *mut c_void, _flags: c_uint) -> CuResult {
    run("cuEventRecordWithFlags", || record(e, s))
}

/// `cuEventQuery`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(e: *mut c_void) -> CuResult {
    run("cuEventQuery", || {
        if state::client_of(id(e))?.event_query(Event(id(e))).map_err(state::cu)? { Ok(()) } else { Err(CuError::NOT_READY) }
    })
}

/// `cuEventSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(e: *mut c_void) -> CuResult {
    run("cuEventSynchronize", || state::client_of(id(e))?.event_synchronize(Event(id(e))).map_err(state::cu))
}

fn elapsed(ms: *mut c_float, a: *mut c_void, b: *mut c_void) -> Res {
    let v = state::client_of(id(a))?.event_elapsed(Event(id(a)), Event(id(b))).map_err(state::cu)?;
    // SAFETY: writable per the API.
    unsafe { put(ms, v) }
}

/// `cuEventElapsedTime_v2`.
///
/// # Safety
/// `ms` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut c_float, a: *mut c_void, b: *mut c_void) -> CuResult {
    run("cuEventElapsedTime_v2", || elapsed(ms, a, b))
}

/// `cuEventElapsedTime` (same signature as `_v2`).
///
/// # Safety
/// `ms` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut c_float, a: *mut c_void, b: *mut c_void) -> CuResult {
    run("cuEventElapsedTime", || elapsed(ms, a, b))
}

fn event_destroy(e: *mut c_void) -> Res {
    state::client_of(id(e))?.event_destroy(Event(id(e))).map_err(state::cu)
}

/// `cuEventDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(e: *mut c_void) -> CuResult {
    run("cuEventDestroy_v2", || event_destroy(e))
}

/// `cuEventDestroy` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy(e: *mut c_void) -> CuResult {
    run("cuEventDestroy", || event_destroy(e))
}
