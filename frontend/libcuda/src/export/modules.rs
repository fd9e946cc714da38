//! Kernels of a module, `6e163fbe-b958-444d-835c-e182aff1991e`: 99 slots,
//! 792 bytes on driver 580 (measured). cuFFT asks for it when it makes its
//! first plan and cannot plan without it (`CUFFT_INTERNAL_ERROR`); it
//! never calls `cuModuleGetFunction`, it finds the kernel of each module
//! it loads through this table.
//!
//! - [7] `int (CUcontext, CUmodule m, void (*visit)(void *user, CUfunction f,
//!   const char *name), void *user)`: calls `visit` for every kernel of
//!   `m` and returns how many there are; a null `visit` only counts them.
//!   Measured on the driver: its code ignores the context, walks the
//!   module's list of functions and returns -1 for a module its handle
//!   check refuses; with a module of three kernels and a device function
//!   it visited the three kernels in `cuModuleEnumerateFunctions`' order
//!   with the names `cuFuncGetName` gives (the same pointers), under
//!   eager and lazy loading alike. cuFFT passes a `visit` that stores the
//!   function in `*user`, once per module it loads (one kernel each).
//! - the others: never called in our traces; unknown.
//!
//! Here [7] answers from `cuModuleEnumerateFunctions` and `cuFuncGetName`
//! and returns -1 for a handle that is not a module of this process (the
//! driver reads through a null one).

use super::{Table, size_slot, unknown_slot};
use crate::api::library::{cuModuleEnumerateFunctions, cuModuleGetFunctionCount};
use crate::api::module::cuFuncGetName;
use pvgpu_ring::CuResult;
use std::ffi::{c_char, c_int, c_uint, c_void};

pub(super) const UUID: super::Uuid = [0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e];

const SLOTS: usize = 99;

pub(super) static TABLE: Table<SLOTS> = Table({
    let mut t = [unknown_slot as *const c_void; SLOTS];
    t[0] = size_slot(SLOTS);
    t[7] = each_kernel as *const c_void;
    t
});

/// What [7] calls for each kernel.
type Visit = unsafe extern "C" fn(user: *mut c_void, f: *mut c_void, name: *const c_char);

/// [7]: visits the kernels of `module`; their number, or -1.
unsafe extern "C" fn each_kernel(_ctx: *mut c_void, module: *mut c_void, visit: Option<Visit>, user: *mut c_void) -> c_int {
    // SAFETY: `visit` and `user` are the caller's, per the slot's contract.
    let r = unsafe { kernels(module, visit, user) };
    tracing::trace!(table = "modules", slot = 7, answer = ?r, "export table slot");
    r.map_or(-1, |n| n as c_int)
}

/// The kernels of `module`, each passed to `visit` (outside the library's
/// locks: the caller's code may call back into it).
///
/// # Safety
/// `visit`, if any, must be callable with `user`.
unsafe fn kernels(module: *mut c_void, visit: Option<Visit>, user: *mut c_void) -> Result<c_uint, CuResult> {
    let ok = |r: CuResult| if r == CuResult::SUCCESS { Ok(()) } else { Err(r) };
    let mut n: c_uint = 0;
    // SAFETY: `n` is writable.
    ok(unsafe { cuModuleGetFunctionCount(&mut n, module) })?;
    let Some(visit) = visit else { return Ok(n) };
    let mut fs = vec![std::ptr::null_mut(); n as usize];
    // SAFETY: `fs` holds `n` writable handles.
    ok(unsafe { cuModuleEnumerateFunctions(fs.as_mut_ptr(), n, module) })?;
    for f in fs {
        let mut name = std::ptr::null();
        // SAFETY: `name` is writable; the string lives as long as the module.
        ok(unsafe { cuFuncGetName(&mut name, f) })?;
        // SAFETY: per the caller.
        unsafe { visit(user, f, name) };
    }
    Ok(n)
}
