//! Initialisation, shutdown, error strings and the system's versions.

use crate::ffi::{put, put_str, run};
use crate::session;
use crate::status::{NvmlReturn, Res};
use std::ffi::{c_char, c_int, c_uint};

/// `NVML_API_VERSION` of the `nvml.h` this library follows.
pub const NVML_API_VERSION: u32 = 12;

/// `nvmlInit_v2`: loads the process's `libcuda.so.1` (pvgpu's) and calls
/// its `cuInit` (the first time; later calls count), so that NVML shares
/// the program's session with the backend named by `PVGPU_BACKEND`. No
/// `libcuda.so.1`, one that is not pvgpu's, or an unreachable backend is
/// `NVML_ERROR_DRIVER_NOT_LOADED`, logged with the reason when `PVGPU_LOG`
/// is set.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    run("nvmlInit_v2", session::init)
}

/// `nvmlInit`, the NVML 4 form: the same as [`nvmlInit_v2`].
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    run("nvmlInit", session::init)
}

/// `nvmlInitWithFlags`: [`nvmlInit_v2`]. `NVML_INIT_FLAG_NO_GPUS` and
/// `NVML_INIT_FLAG_NO_ATTACH` change nothing: initialisation never fails
/// for want of a GPU, and attaches none.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(flags: c_uint) -> NvmlReturn {
    run("nvmlInitWithFlags", || {
        tracing::debug!(flags, "nvmlInitWithFlags");
        session::init()
    })
}

/// `nvmlShutdown`: the call balancing the last initialisation drops
/// NVML's state (the backend session is libcuda's and stays open);
/// `NVML_ERROR_UNINITIALIZED` when NVML is not initialised.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    run("nvmlShutdown", session::shutdown)
}

/// `nvmlErrorString`: a static description of `result` ("Unknown Error"
/// for numbers NVML does not define). Needs no initialisation.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    result.text().as_ptr()
}

/// `nvmlSystemGetDriverVersion`: the backend driver's version
/// (`580.159.04`).
///
/// # Safety
/// `version` must be null or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> NvmlReturn {
    run("nvmlSystemGetDriverVersion", || {
        let s = session::current()?;
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(version, length, s.driver_version()?) }
    })
}

/// `nvmlSystemGetNVMLVersion`: the API version and the backend driver's
/// version (`12.580.159.04`), as NVIDIA's library writes it; only the API
/// version (`12`) before initialisation or when the driver's version is
/// not numeric (the host test double).
///
/// # Safety
/// `version` must be null or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> NvmlReturn {
    run("nvmlSystemGetNVMLVersion", || {
        let driver = session::current().ok().and_then(|s| s.driver_version().ok().map(str::to_string));
        let text = match driver {
            Some(d) if d.starts_with(|c: char| c.is_ascii_digit()) => format!("{NVML_API_VERSION}.{d}"),
            _ => NVML_API_VERSION.to_string(),
        };
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(version, length, &text) }
    })
}

/// Writes the CUDA driver version the guest sees (`13000` for CUDA 13.0).
///
/// # Safety
/// `out` must be null or writable.
unsafe fn cuda_driver_version(out: *mut c_int) -> Res {
    let v = session::current()?.cuda_driver_version()?;
    // SAFETY: null or writable (this function's contract).
    unsafe { put(out, v) }
}

/// `nvmlSystemGetCudaDriverVersion`: libcuda's `cuDriverGetVersion` (the
/// backend driver's version, capped at the CUDA version the drop-in
/// libcuda implements).
///
/// # Safety
/// `version` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlSystemGetCudaDriverVersion", || unsafe { cuda_driver_version(version) })
}

/// `nvmlSystemGetCudaDriverVersion_v2`: the same as
/// [`nvmlSystemGetCudaDriverVersion`] (both ask libcuda, as NVIDIA's
/// `_v2` does).
///
/// # Safety
/// `version` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlSystemGetCudaDriverVersion_v2", || unsafe { cuda_driver_version(version) })
}
