//! Context-local storage, `c693336e-1121-df11-a8c3-68f355d89593`: four
//! slots and no size header (slot 3 null), as the driver's.
//!
//! - [0] `CUresult put(CUcontext ctx, void *key, void *value, void
//!   (*dtor)(CUcontext, void *key, void *value))`
//! - [1] `CUresult delete(CUcontext ctx, void *key)`
//! - [2] `CUresult get(void **value, CUcontext ctx, void *key)`
//!
//! Semantics measured against the driver (every copy of the runtime keeps
//! its per-context state here, under its own key, and reads it on every
//! call): a null context is the calling thread's current one, and none, or
//! an inactive primary context, is `CUDA_ERROR_INVALID_CONTEXT` (the
//! runtime relies on it to retain the primary context); a missing key is
//! `CUDA_ERROR_INVALID_HANDLE` (the runtime relies on it to create its
//! state); `put` of a present key is `CUDA_ERROR_INVALID_HANDLE` and keeps
//! the old value; `delete` does not run the destructor. The destructors run
//! when the context goes ([`crate::state::ctx`]); `cudaDeviceReset`
//! depends on that. The runtime deletes its entry again at exit, when the
//! driver may be gone: answered like any other call.

use super::{Table, traced};
use crate::state::ctx::{self, ClsDtor};
use crate::state::{put, quiet};
use pvgpu_ring::CuResult;
use std::ffi::c_void;

pub(super) const UUID: super::Uuid = [0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93];

pub(super) static TABLE: Table<4> = Table([put_value as *const c_void, delete as *const c_void, get as *const c_void, std::ptr::null()]);

/// `(CUcontext)-1` is taken for the current context too (an open
/// reimplementation's finding; the driver's runtime never passes it).
fn context(c: *mut c_void) -> *mut c_void {
    if c as isize == -1 { std::ptr::null_mut() } else { c }
}

/// [0].
unsafe extern "C" fn put_value(c: *mut c_void, key: *mut c_void, value: *mut c_void, dtor: ClsDtor) -> CuResult {
    traced("cls", 0, quiet(|| ctx::cls_put(context(c), key, value, dtor)))
}

/// [1].
unsafe extern "C" fn delete(c: *mut c_void, key: *mut c_void) -> CuResult {
    traced("cls", 1, quiet(|| ctx::cls_delete(context(c), key)))
}

/// [2].
unsafe extern "C" fn get(out: *mut *mut c_void, c: *mut c_void, key: *mut c_void) -> CuResult {
    let r = quiet(|| {
        let v = ctx::cls_get(context(c), key)?;
        // SAFETY: writable, per the table's contract.
        unsafe { put(out, v) }
    });
    traced("cls", 2, r)
}
