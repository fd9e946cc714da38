//! Cluster scheduling, `1734dc26-800d-4745-8726-c0f1e7dd8bca`: asked for by
//! cuBLASLt before its first Hopper GEMM with tensor cores (measured under
//! PyTorch: a bf16 matmul). cuBLASLt does not check the answer: without
//! the table it reads through a null pointer.
//!
//! - [4] `CUresult (u8 **a, u8 **b)`: measured on the driver: returns two
//!   arrays it allocated (byte patterns describing how the GPU's thread
//!   processing clusters are grouped).
//! - [13] `CUresult (u8 *a, u8 *b)`: measured: frees what [4] returned.
//!
//! Here [4] answers `CUDA_ERROR_NOT_SUPPORTED` and writes nothing (the
//! grouping is the driver's, not this library's), and [13] accepts null
//! pointers as the driver's free does. The other slots were never called
//! in our traces.

use super::{Table, size_slot, traced, unknown_slot};
use pvgpu_ring::CuResult;
use std::ffi::c_void;

pub(super) const UUID: super::Uuid = [0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca];

const SLOTS: usize = 17;

pub(super) static TABLE: Table<SLOTS> = Table({
    let mut t = [unknown_slot as *const c_void; SLOTS];
    t[0] = size_slot(SLOTS);
    t[4] = grouping as *const c_void;
    t[13] = free_grouping as *const c_void;
    t
});

/// [4]: not offered.
extern "C" fn grouping(_a: *mut *mut u8, _b: *mut *mut u8) -> CuResult {
    traced("cluster", 4, CuResult::NOT_SUPPORTED)
}

/// [13]: nothing of ours to free.
extern "C" fn free_grouping(_a: *mut u8, _b: *mut u8) -> CuResult {
    traced("cluster", 13, CuResult::SUCCESS)
}
