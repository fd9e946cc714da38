//! The context checks table, `263e8860-7cd2-6143-92f6-bbd5006dfa7e`:
//! 15 slots, 120 bytes, every slot set (as the driver's; cuBLAS fails to
//! start with a shorter table, per an open reimplementation's fix).
//!
//! - [2] `CUresult (CUcontext ctx, u32 *flag, void **inner, ...)`: whether
//!   a context wraps another. For every context the driver writes 0 to
//!   `*flag`, leaves `*inner` alone and succeeds (measured); the runtime
//!   calls it at context set-up and in `cudaDeviceReset`, cuBLAS often.
//! - [3] `u32 (void)`: 0 (measured); called once per copy of the runtime,
//!   just before it asks for the integrity table.
//! - the others: never called in our traces; unknown.

use super::{Table, size_slot, traced, unknown_slot};
use pvgpu_ring::CuResult;
use std::ffi::c_void;

pub(super) const UUID: super::Uuid = [0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e];

pub(super) static TABLE: Table<15> = Table([
    size_slot(15),
    unknown_slot as *const c_void,
    wrapped as *const c_void,
    zero as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
    unknown_slot as *const c_void,
]);

/// [2]: no context of this library wraps another.
unsafe extern "C" fn wrapped(_ctx: *mut c_void, flag: *mut u32, _inner: *mut *mut c_void) -> CuResult {
    if !flag.is_null() {
        // SAFETY: non-null and writable, per the table's contract.
        unsafe { flag.write_unaligned(0) };
    }
    traced("ctx-checks", 2, CuResult::SUCCESS)
}

/// [3]: 0.
extern "C" fn zero() -> u32 {
    traced("ctx-checks", 3, CuResult::SUCCESS);
    0
}
