//! The runtime interface table, `6bd5fb6c-5bf4-e74a-8987-d93912fd9df9`:
//! 13 slots, 104 bytes, slot 10 null (as the driver's).
//!
//! - [2] `CUresult (CUcontext *out, CUdevice dev)`: the device's primary
//!   context **without retaining it**. The only slot CUDA 13.0's runtime
//!   and cuBLAS call (once per device per copy of the runtime, at
//!   start-up). Measured: afterwards the primary context is still inactive,
//!   the runtime makes the handle current, then retains it and expects the
//!   same handle back from `cuDevicePrimaryCtxRetain`.
//! - [1] `(CUmodule *out, const fatbin wrapper *w)`, [6] `(CUmodule *out,
//!   wrapper, void *, void *, u32)`, [8] `(const fatbin header *, CUmodule
//!   *out, void *, void *, u32)`: load a fatbin as a module of the current
//!   context. Older runtimes' path (the open reimplementations); CUDA 13's
//!   runtime loads through `cuLibraryLoadData` instead. Implemented as
//!   `cuModuleLoadData`, refusing the extra arguments unless null.
//! - [7] `void (size_t)`: does nothing (the driver's does nothing either,
//!   per the reimplementations).
//! - [12] `CUresult (void)`: "load the compilers" (PTX JIT, done by the
//!   backend's driver): success.
//! - [3], [4], [5], [9], [11]: not called by CUDA 13.0's runtime; unknown.

use super::{Table, size_slot, traced, unknown_slot};
use crate::state::{self, put, run};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_uint, c_void};

pub(super) const UUID: super::Uuid = [0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9];

pub(super) static TABLE: Table<13> = Table([
    size_slot(13),
    load_wrapper as *const c_void,
    primary_context as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    load_wrapper_ex as *const c_void,
    nothing as *const c_void,
    load_fatbin_ex as *const c_void,
    unknown_slot as *const c_void,
    std::ptr::null(),
    unknown_slot as *const c_void,
    load_compilers as *const c_void,
]);

/// [2]: the primary context's handle, not retained.
unsafe extern "C" fn primary_context(out: *mut *mut c_void, dev: c_int) -> CuResult {
    traced(
        "cudart",
        2,
        run("cudart[2]", || {
            state::device_props(dev)?;
            // SAFETY: writable, per the table's contract.
            unsafe { put(out, state::handle(state::ctx::primary_handle(dev))) }
        }),
    )
}

/// [1]: `cuModuleLoadData` of a fatbin wrapper.
unsafe extern "C" fn load_wrapper(out: *mut *mut c_void, wrapper: *const c_void) -> CuResult {
    // SAFETY: the module contract of cuModuleLoadData, passed on.
    traced("cudart", 1, unsafe { crate::api::module::cuModuleLoadData(out, wrapper) })
}

/// [6]: [1] with arguments CUDA 13 never passes.
unsafe extern "C" fn load_wrapper_ex(out: *mut *mut c_void, wrapper: *const c_void, a: *mut c_void, b: *mut c_void, c: c_uint) -> CuResult {
    if !a.is_null() || !b.is_null() || c != 0 {
        return traced("cudart", 6, CuError::NOT_SUPPORTED.into());
    }
    // SAFETY: as [1].
    traced("cudart", 6, unsafe { crate::api::module::cuModuleLoadData(out, wrapper) })
}

/// [8]: [6] with the fatbin itself first.
unsafe extern "C" fn load_fatbin_ex(fatbin: *const c_void, out: *mut *mut c_void, a: *mut c_void, b: *mut c_void, c: c_uint) -> CuResult {
    if !a.is_null() || !b.is_null() || c != 0 {
        return traced("cudart", 8, CuError::NOT_SUPPORTED.into());
    }
    // SAFETY: as [1].
    traced("cudart", 8, unsafe { crate::api::module::cuModuleLoadData(out, fatbin) })
}

/// [7]: nothing.
extern "C" fn nothing(_: usize) {}

/// [12]: the compilers are the backend driver's; nothing to load here.
extern "C" fn load_compilers() -> CuResult {
    traced("cudart", 12, CuResult::SUCCESS)
}
