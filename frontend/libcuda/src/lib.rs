//! # pvgpu-libcuda
//!
//! A drop-in `libcuda.so.1`: unmodified programs that use the CUDA driver
//! API, whether linked against libcuda or loading it with `dlopen` (cudarc,
//! cuda-python, numba), run against a pvgpu backend when this library is
//! found first on the library path and `PVGPU_BACKEND` names the backend.
//!
//! - Every symbol of the CUDA 13 driver API exists: `symbols.txt`, generated
//!   from NVIDIA's headers, is the one declaration list; `build.rs` turns the
//!   symbols not implemented in [`api`] into stubs that return
//!   `CUDA_ERROR_NOT_SUPPORTED` and log their name once when `PVGPU_LOG` is
//!   set, and builds the `cuGetProcAddress` version table.
//! - What the frontend knows is answered here: each thread's context stack,
//!   device attributes and names (cached at the first query), error strings,
//!   function parameter layouts, and which pointers are device memory.
//! - No failure crosses the C boundary as anything but a `CUresult`: bodies
//!   run under `catch_unwind`, and a lost backend is
//!   `CUDA_ERROR_DEVICE_UNAVAILABLE`.
//! - The library is silent unless `PVGPU_LOG` is set (`PVGPU_LOG=info`,
//!   `PVGPU_LOG=debug`, or any `tracing` filter).
//!
//! Install it as `libcuda.so.1` (and `libcuda.so`) in a directory of its
//! own and put that directory first in `LD_LIBRARY_PATH`; never on the
//! library path of the backend, which needs the real driver.

pub mod api;
pub mod callback;
pub mod export;
pub mod image;
pub mod library;
pub mod state;

pub use api::context::*;
pub use api::device::*;
pub use api::exec::*;
pub use api::init::*;
pub use api::launch::*;
pub use api::library::*;
pub use api::memory::*;
pub use api::module::*;
pub use api::pitched::*;
pub use api::pool::*;
pub use api::vmm::*;
pub use pvgpu_ring::{CuError, CuResult};

/// Which form of an entry point `cuGetProcAddress` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The legacy default stream (no suffix).
    Legacy,
    /// The per-thread default stream (`_ptds`, `_ptsz`).
    PerThread,
}

#[allow(non_snake_case, missing_docs, clippy::missing_safety_doc, clippy::too_many_arguments)]
mod generated {
    use super::*;
    // Types that hand-written signatures use, for the generated forwarders.
    #[allow(unused_imports)]
    use crate::callback::{HostFn, StreamCallback};
    #[allow(unused_imports)]
    use std::ffi::{c_char, c_float, c_int, c_uint, c_void};
    include!(concat!(env!("OUT_DIR"), "/exports.rs"));
}

pub use generated::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_resolves_and_the_table_points_at_exports() {
        const { assert!(EXPORT_COUNT > 600) };
        const { assert!(IMPLEMENTED_COUNT > 80) };
        for (_, _, _, sym) in PROC_TABLE {
            assert!(lookup(sym).is_some(), "{sym}");
        }
    }

    #[test]
    fn proc_address_picks_the_version_asked_for() {
        let f = |name: &str, v: i32, flags: u64| api::init::resolve(name, v, flags);
        assert_eq!(f("cuMemAlloc", 13000, 0), Ok(cuMemAlloc_v2 as *const std::ffi::c_void));
        assert_eq!(f("cuCtxCreate", 12000, 0), Ok(cuCtxCreate_v3 as *const std::ffi::c_void));
        assert_eq!(f("cuCtxCreate", 13000, 0), Ok(cuCtxCreate_v4 as *const std::ffi::c_void));
        assert_eq!(f("cuMemcpyHtoDAsync", 13000, 2), Ok(cuMemcpyHtoDAsync_v2_ptsz as *const std::ffi::c_void));
        assert_eq!(f("cuMemcpyHtoDAsync", 13000, 0), Ok(cuMemcpyHtoDAsync_v2 as *const std::ffi::c_void));
        // No per-thread form: the legacy one serves both modes.
        assert_eq!(f("cuMemAlloc", 13000, 2), Ok(cuMemAlloc_v2 as *const std::ffi::c_void));
        assert_eq!(f("cuGetProcAddress", 13000, 0), Ok(cuGetProcAddress_v2 as *const std::ffi::c_void));
        assert_eq!(f("cuNoSuchFunction", 13000, 0), Err(1));
        assert_eq!(f("cuLaunchKernelEx", 11000, 0), Err(2), "introduced in 11.6");
    }

    #[test]
    fn stubs_and_errors_need_no_backend() {
        assert_eq!(cuArrayCreate_v2(), CuResult::NOT_SUPPORTED);
        assert_eq!(cuCtxSynchronize(), CuResult::NOT_INITIALIZED);
        // Per-thread forms are generated from the hand-written functions, not stubs.
        assert_eq!(cuStreamSynchronize_ptsz(std::ptr::null_mut()), CuResult::NOT_INITIALIZED);
        assert_eq!(cuStreamGetCtx_ptsz as *const std::ffi::c_void, lookup("cuStreamGetCtx_ptsz").unwrap());
        let mut p = std::ptr::null();
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { cuGetErrorName(700, &mut p) }, CuResult::SUCCESS);
        // SAFETY: the library returned a NUL-terminated static string.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap(), "CUDA_ERROR_ILLEGAL_ADDRESS");
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { cuGetErrorString(123_456, &mut p) }, CuResult::INVALID_VALUE);
        let mut v = 0;
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { cuDriverGetVersion(&mut v) }, CuResult::SUCCESS);
        assert!(v >= 12000);
        // SAFETY: null out-pointer is refused, not written.
        assert_eq!(unsafe { cuDeviceGetCount(std::ptr::null_mut()) }, CuResult::NOT_INITIALIZED);
    }
}
