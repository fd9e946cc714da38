//! # pvgpu-libcuda
//!
//! A drop-in `libcuda.so.1`: unmodified programs that use the CUDA driver
//! API, whether linked against libcuda or loading it with `dlopen` (cudarc,
//! cuda-python, numba), run against a pvgpu backend when this library is
//! found first on the library path and `PVGPU_BACKEND` names the backend.
//!
//! - Every entry point of the CUDA 13 driver API exists, with its real C
//!   parameters: `pvgpu-cuda-decl` (generated from NVIDIA's headers) is the
//!   one declaration list, and `implemented.txt` the checked list of those
//!   written by hand in [`api`]. `build.rs` checks at compile time that each
//!   hand-written export has the type cuda.h gives it, generates the
//!   per-thread-default-stream forms of hand-written functions, turns every
//!   other entry point into a stub that returns `CUDA_ERROR_NOT_SUPPORTED`
//!   and logs its name once when `PVGPU_LOG` is set, and builds the
//!   `cuGetProcAddress` version table.
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
pub mod managed;
pub mod state;
pub mod visible;

pub use api::array::*;
pub use api::capture::*;
pub use api::context::*;
pub use api::device::*;
pub use api::exec::*;
pub use api::graph::*;
pub use api::graph_add::*;
pub use api::graph_cond::*;
pub use api::graph_copy::*;
pub use api::graph_exec::*;
pub use api::graph_host::*;
pub use api::graph_kernel::*;
pub use api::graph_mem::*;
pub use api::graph_node::*;
pub use api::graph_params::*;
pub use api::host::*;
pub use api::init::*;
pub use api::ipc::*;
pub use api::launch::*;
pub use api::library::*;
pub use api::link::*;
pub use api::managed::*;
pub use api::memop::*;
pub use api::memory::*;
pub use api::module::*;
pub use api::pitched::*;
pub use api::pointer::*;
pub use api::pool::*;
pub use api::pool_ipc::*;
pub use api::shareable::*;
pub use api::stream_attr::*;
pub use api::texture::*;
pub use api::user_object::*;
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

#[allow(non_snake_case, missing_docs, clippy::too_many_arguments)]
mod generated {
    use super::*;
    use pvgpu_ring::cuda::api::*;
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
        use pvgpu_ring::cuda::api::{CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT};
        assert_eq!(f("cuNoSuchFunction", 13000, 0), Err(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
        assert_eq!(f("cuLaunchKernelEx", 11000, 0), Err(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT), "introduced in 11.6");
    }

    #[test]
    fn stubs_and_errors_need_no_backend() {
        assert_eq!(cuArrayGetSparseProperties(std::ptr::null_mut(), std::ptr::null_mut()), CuResult::NOT_SUPPORTED);
        assert_eq!(cuCtxSynchronize(), CuResult::NOT_INITIALIZED);
        // Per-thread forms are generated from the hand-written functions, not stubs.
        // SAFETY: the default stream; no pointer is read.
        assert_eq!(unsafe { cuStreamSynchronize_ptsz(std::ptr::null_mut()) }, CuResult::NOT_INITIALIZED);
        assert_eq!(cuStreamGetCtx_ptsz as *const std::ffi::c_void, lookup("cuStreamGetCtx_ptsz").unwrap());
        let mut p = std::ptr::null();
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { cuGetErrorName(CuResult(700), &mut p) }, CuResult::SUCCESS);
        // SAFETY: the library returned a NUL-terminated static string.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap(), "CUDA_ERROR_ILLEGAL_ADDRESS");
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { cuGetErrorString(CuResult(123_456), &mut p) }, CuResult::INVALID_VALUE);
        let mut v = 0;
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { cuDriverGetVersion(&mut v) }, CuResult::SUCCESS);
        assert!(v >= 12000);
        // SAFETY: null out-pointer is refused, not written.
        assert_eq!(unsafe { cuDeviceGetCount(std::ptr::null_mut()) }, CuResult::NOT_INITIALIZED);
    }
}
