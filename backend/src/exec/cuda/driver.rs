//! The driver entry points the executor calls with CUDA's enums and
//! structs, typed as cuda.h declares them ([`Driver`], generated from the
//! one declaration list): enums are transparent newtypes, so a number a
//! guest sent is passed on as it is (the driver checks it), never held in a
//! Rust enum that cannot represent it. Looked up once, in the library
//! cudarc loaded.

use super::CudaInitError;
use cudarc::driver::sys;
use pvgpu_ring::cuda::api::Driver;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::c_void;
use std::sync::OnceLock;

static DRIVER: OnceLock<Driver> = OnceLock::new();

/// The typed entry points of the loaded driver.
///
/// # Safety
/// The driver library must be loaded (`sys::is_culib_present`).
pub(super) unsafe fn load() -> &'static Driver {
    DRIVER.get_or_init(|| {
        // SAFETY: the library is loaded (the caller's contract); every
        // address is the symbol of that name, or null.
        unsafe { Driver::load(|name| sys::culib().get::<*const c_void>(name.to_bytes()).map_or(std::ptr::null(), |s| *s)) }
    })
}

/// Entry points every call path needs (CUDA 12.8 or newer has them all).
pub(super) fn check(d: &Driver) -> Result<(), CudaInitError> {
    let missing = |call| Err(CudaInitError::Driver { call, status: CuError::NOT_FOUND });
    macro_rules! need {
        ($($name:ident),* $(,)?) => {
            $( if d.$name.is_none() { return missing(stringify!($name)); } )*
        };
    }
    need!(
        cuDeviceGetAttribute,
        cuFuncGetAttribute,
        cuFuncSetAttribute,
        cuCtxGetLimit,
        cuCtxSetLimit,
        cuLaunchKernelEx,
        cuOccupancyMaxActiveClusters,
        cuOccupancyMaxPotentialClusterSize,
        cuMemPoolGetAttribute,
        cuMemPoolSetAttribute,
        cuMemGetAllocationGranularity,
        cuMemAddressReserve,
        cuMemAddressFree,
        cuMemCreate,
        cuMemRelease,
        cuMemMap,
        cuMemUnmap,
        cuMemSetAccess,
        cuTensorMapEncodeTiled,
        cuTensorMapEncodeIm2col,
    );
    Ok(())
}

/// An entry point of `d`, or `CUDA_ERROR_NOT_SUPPORTED` where the driver
/// lacks it.
pub(super) fn entry<F>(f: Option<F>) -> Result<F, CuError> {
    f.ok_or(CuError::NOT_SUPPORTED)
}

/// A driver status as a result.
pub(super) fn ok(r: CuResult) -> Result<(), CuError> {
    r.result()
}
