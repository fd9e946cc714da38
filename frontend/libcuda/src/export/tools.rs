//! The tools tables.
//!
//! Callback hooks, `a094798c-2e74-2e74-93f2-0800200c0a66`: 7 slots, 56 bytes.
//! - [2] and [6] `void (void **buf, size_t *count)`: called once per copy of
//!   the runtime at start-up; the driver hands back its own zeroed arrays of
//!   1024 and 14 entries (measured), which mean "no tool attached". Here:
//!   zeroed arrays of 8-byte entries, in writable memory.
//! - [1], [3], [4], [5]: never called in our traces; do nothing, succeed.
//!
//! Thread state, `42d85a81-23f6-cb47-8298-f6e78a3aecdc`: 3 slots, 24 bytes.
//! - [2] `CUresult (CUcontext *out)`: the calling thread's current context
//!   (measured: the value equals `cuCtxGetCurrent`'s). cuBLAS and cuBLASLt
//!   call it per GEMM.
//! - [1]: never called; unknown.

use super::{Table, size_slot, traced, unknown_slot};
use crate::state;
use pvgpu_ring::{CuError, CuResult};
use std::cell::UnsafeCell;
use std::ffi::c_void;

pub(super) const HOOKS_UUID: super::Uuid = [0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66];
pub(super) const TLS_UUID: super::Uuid = [0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc];

pub(super) static HOOKS: Table<7> = Table([
    size_slot(7),
    no_op as *const c_void,
    hook_buffer_a as *const c_void,
    no_op as *const c_void,
    no_op as *const c_void,
    no_op as *const c_void,
    hook_buffer_b as *const c_void,
]);

pub(super) static TLS: Table<3> = Table([size_slot(3), unknown_slot as *const c_void, current_context as *const c_void]);

/// Zeroed memory the runtime may read (and, as with the driver's, write).
struct HookBuffer<const N: usize>(UnsafeCell<[u64; N]>);

// SAFETY: this library never reads or writes the buffers; it only hands
// their address to the runtime, which owns their use.
unsafe impl<const N: usize> Sync for HookBuffer<N> {}

static BUFFER_A: HookBuffer<1024> = HookBuffer(UnsafeCell::new([0; 1024]));
static BUFFER_B: HookBuffer<14> = HookBuffer(UnsafeCell::new([0; 14]));

/// Writes a hook buffer's address and length.
fn hand_out<const N: usize>(b: &'static HookBuffer<N>, buf: *mut *mut c_void, count: *mut usize) {
    if !buf.is_null() {
        // SAFETY: non-null and writable, per the table's contract.
        unsafe { buf.write(b.0.get().cast()) };
    }
    if !count.is_null() {
        // SAFETY: non-null and writable, per the table's contract.
        unsafe { count.write(N) };
    }
}

/// Hooks [2].
extern "C" fn hook_buffer_a(buf: *mut *mut c_void, count: *mut usize) {
    hand_out(&BUFFER_A, buf, count);
    traced("tools-hooks", 2, CuResult::SUCCESS);
}

/// Hooks [6].
extern "C" fn hook_buffer_b(buf: *mut *mut c_void, count: *mut usize) {
    hand_out(&BUFFER_B, buf, count);
    traced("tools-hooks", 6, CuResult::SUCCESS);
}

/// Hooks [1], [3], [4], [5].
extern "C" fn no_op() -> CuResult {
    CuResult::SUCCESS
}

/// Thread state [2]: the current context (null and
/// `CUDA_ERROR_INVALID_CONTEXT` without one).
unsafe extern "C" fn current_context(out: *mut *mut c_void) -> CuResult {
    if out.is_null() {
        return traced("tools-tls", 2, CuError::INVALID_VALUE.into());
    }
    let h = state::current_handle();
    // SAFETY: non-null and writable, per the table's contract.
    unsafe { out.write(h.map_or(std::ptr::null_mut(), state::handle)) };
    traced("tools-tls", 2, if h.is_some() { CuResult::SUCCESS } else { CuError::INVALID_CONTEXT.into() })
}
