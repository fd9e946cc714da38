//! Interprocess handles (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle`,
//! `cuIpcGetEventHandle`, ...): memory and events shared between processes
//! of the same guest. The handle's 64 bytes are made by the backend and
//! open only in sessions of the same guest; another process of the guest
//! passes them on as it would a driver's handle.

use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, handle, id, objects, put, run};
use pvgpu_frontend::Event;
use pvgpu_ring::cuda::api::{CUipcEventHandle, CUipcMemHandle};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_uint, c_void};

fn bytes(reserved: &[std::ffi::c_char; 64]) -> [u8; 64] {
    reserved.map(|c| c as u8)
}

fn reserved(bytes: [u8; 64]) -> [std::ffi::c_char; 64] {
    bytes.map(|b| b as std::ffi::c_char)
}

/// `cuIpcGetMemHandle`.
///
/// # Safety
/// `h` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetMemHandle(h: *mut CUipcMemHandle, dptr: u64) -> CuResult {
    run("cuIpcGetMemHandle", || {
        if h.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let b = state::client()?.ipc_get_mem_handle(state::current()?, dptr).map_err(state::cu)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(h, CUipcMemHandle { reserved: reserved(b) }) }
    })
}

fn open(dptr: *mut u64, h: &CUipcMemHandle, flags: c_uint) -> state::Res {
    if dptr.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = state::current()?;
    let (p, size) = state::client()?.ipc_open_mem_handle(ctx, &bytes(&h.reserved), flags).map_err(state::cu)?;
    let owner = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    let mut o = objects();
    let a = o.device.entry(p).or_insert_with(|| DevAlloc::new(size, owner, DevKind::Opened(0)));
    if let DevKind::Opened(n) = &mut a.kind {
        *n += 1;
    }
    drop(o);
    // SAFETY: non-null and writable per the API.
    unsafe { put(dptr, p) }
}

/// `cuIpcOpenMemHandle_v2`.
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(dptr: *mut u64, h: CUipcMemHandle, flags: c_uint) -> CuResult {
    run("cuIpcOpenMemHandle_v2", || open(dptr, &h, flags))
}

/// `cuIpcOpenMemHandle` (the first version; the same call).
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle(dptr: *mut u64, h: CUipcMemHandle, flags: c_uint) -> CuResult {
    run("cuIpcOpenMemHandle", || open(dptr, &h, flags))
}

/// `cuIpcCloseMemHandle`.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcCloseMemHandle(dptr: u64) -> CuResult {
    run("cuIpcCloseMemHandle", || {
        let (owner, n) = match objects().device.get(&dptr) {
            Some(DevAlloc { ctx, kind: DevKind::Opened(n), .. }) => (*ctx, *n),
            _ => return Err(CuError::INVALID_VALUE),
        };
        state::client()?.ipc_close_mem_handle(state::ctx::backend(owner)?, dptr).map_err(state::cu)?;
        let mut o = objects();
        if n <= 1 {
            o.device.remove(&dptr);
        } else if let Some(DevAlloc { kind: DevKind::Opened(c), .. }) = o.device.get_mut(&dptr) {
            *c -= 1;
        }
        Ok(())
    })
}

/// `cuIpcGetEventHandle`.
///
/// # Safety
/// `h` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetEventHandle(h: *mut CUipcEventHandle, e: *mut c_void) -> CuResult {
    run("cuIpcGetEventHandle", || {
        if h.is_null() || e.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let b = state::client()?.ipc_get_event_handle(Event(id(e))).map_err(state::cu)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(h, CUipcEventHandle { reserved: reserved(b) }) }
    })
}

/// `cuIpcOpenEventHandle`.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenEventHandle(ph: *mut *mut c_void, h: CUipcEventHandle) -> CuResult {
    run("cuIpcOpenEventHandle", || {
        if ph.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let e = state::client()?.ipc_open_event_handle(state::current()?, &bytes(&h.reserved)).map_err(state::cu)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(ph, handle(e.0)) }
    })
}
