//! Identities of contexts and streams, `21318c60-9714-3248-8ca6-41ff7324c8f2`:
//! 93 slots, 744 bytes on driver 580 (measured; the size varies between
//! drivers). cuBLAS and cuBLASLt ask for it at their first GEMM and cannot
//! run without it (`CUBLAS_STATUS_NOT_SUPPORTED`, measured under PyTorch
//! and CuPy); they key their per-context and per-stream state by what it
//! answers.
//!
//! - [4] `CUresult (CUcontext ctx, u64 *id)`: the context's unique id, the
//!   value `cuCtxGetId` gives (measured under PyTorch: 261 calls in a
//!   first matmul and an MLP, each writing 1, the id of the primary
//!   context; the arguments after the second are left over from the
//!   caller).
//! - [51] `CUresult (CUcontext ctx, CUstream s, void **token, int
//!   per_thread)`: an opaque token for a stream, a null stream meaning the
//!   legacy default stream or, with `per_thread`, the thread's (measured
//!   under CuPy: a null stream gave a non-null pointer of the driver's).
//!   Here the token is the stream handle, `CU_STREAM_LEGACY` or
//!   `CU_STREAM_PER_THREAD` for the default streams.
//! - [39] `CUresult (CUcontext ctx, void *token, u64 *id, int)`: the id of
//!   the stream a [51] token names (measured: called right after [51] with
//!   its token, writing a small integer); `cuStreamGetId`'s value here.
//! - the others: never called in our traces; unknown.

use super::{Table, size_slot, traced, unknown_slot};
use pvgpu_ring::CuResult;
use std::ffi::{c_int, c_void};

pub(super) const UUID: super::Uuid = [0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2];

const SLOTS: usize = 93;

pub(super) static TABLE: Table<SLOTS> = Table({
    let mut t = [unknown_slot as *const c_void; SLOTS];
    t[0] = size_slot(SLOTS);
    t[4] = context_id as *const c_void;
    t[39] = stream_id as *const c_void;
    t[51] = stream_token as *const c_void;
    t
});

/// `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`.
const LEGACY: usize = 1;
const PER_THREAD: usize = 2;

/// [4]: the context's id (a null context is the current one).
unsafe extern "C" fn context_id(ctx: *mut c_void, id: *mut u64) -> CuResult {
    // SAFETY: the slot's contract is `cuCtxGetId`'s.
    traced("ids", 4, unsafe { crate::api::context::cuCtxGetId(ctx, id) })
}

/// [51]: a token for stream `s`.
unsafe extern "C" fn stream_token(_ctx: *mut c_void, s: *mut c_void, token: *mut *mut c_void, per_thread: c_int) -> CuResult {
    if token.is_null() {
        return traced("ids", 51, pvgpu_ring::CuError::INVALID_VALUE.into());
    }
    let t = match (s as usize, per_thread) {
        (0, 0) => LEGACY,
        (0, _) => PER_THREAD,
        (v, _) => v,
    };
    // SAFETY: non-null and writable, per the slot's contract.
    unsafe { token.write_unaligned(std::ptr::without_provenance_mut(t)) };
    traced("ids", 51, CuResult::SUCCESS)
}

/// [39]: the id of the stream a [51] token names.
unsafe extern "C" fn stream_id(_ctx: *mut c_void, token: *mut c_void, id: *mut u64, _flag: c_int) -> CuResult {
    // SAFETY: a token is a stream handle, whose contract is `cuStreamGetId`'s.
    traced("ids", 39, unsafe { crate::api::exec::cuStreamGetId(token, id) })
}
