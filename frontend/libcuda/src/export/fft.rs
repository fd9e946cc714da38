//! The table cuFFT asks for at its first plan,
//! `6e163fbe-b958-444d-835c-e182aff1991e`: 99 slots, 792 bytes on driver
//! 580, slot 93 null (measured). Without it cuFFT fails to make a plan
//! (`CUFFT_INTERNAL_ERROR`, measured under CuPy).
//!
//! - [7] `CUresult (CUcontext ctx, const void *desc, ..., void *out)`:
//!   called once per plan with the context, a small descriptor and a
//!   buffer holding the device's name; the driver answered
//!   `CUDA_ERROR_INVALID_VALUE` in every call we traced, and cuFFT went on.
//!   Here it answers the same, writing nothing.
//! - the others: never called in our traces; unknown.

use super::{Table, size_slot, traced, unknown_slot};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::c_void;

pub(super) const UUID: super::Uuid = [0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e];

const SLOTS: usize = 99;

pub(super) static TABLE: Table<SLOTS> = Table({
    let mut t = [unknown_slot as *const c_void; SLOTS];
    t[0] = size_slot(SLOTS);
    t[7] = no_answer as *const c_void;
    t[93] = std::ptr::null();
    t
});

/// [7]: what the driver answered.
extern "C" fn no_answer() -> CuResult {
    traced("fft", 7, CuError::INVALID_VALUE.into())
}
