//! Initialisation, versions, error strings, entry-point lookup.

use crate::state::{self, Res, put, run};
use crate::{PROC_TABLE, Variant, lookup};
use pvgpu_ring::cuda::api::{
    CU_GET_PROC_ADDRESS_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
    CUdriverProcAddressQueryResult, CUuuid,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// The CUDA API version this library implements.
pub const API_VERSION: c_int = 13000;

/// `cuInit`: connects to the backend named by `PVGPU_BACKEND`.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: c_uint) -> CuResult {
    run("cuInit", || {
        if flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let clients = state::connect()?;
        for c in clients {
            c.init().map_err(state::cu)?;
        }
        state::backends::number_devices(clients).map_err(state::cu)?;
        // As NVIDIA's driver: no device left visible is an error of cuInit,
        // whether CUDA_VISIBLE_DEVICES left none or the backends gave the
        // session none (its tenant's GPUs are drained, say).
        let seen = match crate::visible::init().map_err(state::cu)? {
            Some(n) => n,
            None => usize::try_from(state::backends::device_count()).unwrap_or(0),
        };
        if seen == 0 {
            return Err(CuError::NO_DEVICE);
        }
        let _ = state::INITIALIZED.set(());
        Ok(())
    })
}

/// The driver version this library reports: the backends' oldest, capped
/// at the API version it implements (so programs pick entry points it
/// has), or that API version without a backend. NVIDIA's runtime hashes it into its
/// integrity check, so every answer must be this one.
pub fn reported_driver_version() -> c_int {
    match state::connect() {
        Ok(c) => c.iter().map(|c| c.info().driver_version).min().unwrap_or(API_VERSION).min(API_VERSION),
        Err(_) => API_VERSION,
    }
}

/// `cuDriverGetVersion`: see [`reported_driver_version`] (answered without
/// a backend, too).
///
/// # Safety
/// `version` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    run("cuDriverGetVersion", || {
        // SAFETY: the caller passes a writable int.
        unsafe { put(version, reported_driver_version()) }
    })
}

struct ErrorStrings {
    names: Vec<(u32, CString, CString)>,
}

fn error_strings() -> &'static ErrorStrings {
    static S: OnceLock<ErrorStrings> = OnceLock::new();
    S.get_or_init(|| {
        let mut names = Vec::new();
        for v in 0..1000u32 {
            let r = CuResult(v);
            if let (Some(n), Some(d)) = (r.name(), r.description()) {
                names.push((v, CString::new(n).unwrap_or_default(), CString::new(d).unwrap_or_default()));
            }
        }
        ErrorStrings { names }
    })
}

fn error_text(error: u32, desc: bool, out: *mut *const c_char) -> Res {
    let s = error_strings();
    let (_, n, d) = s.names.iter().find(|(v, _, _)| *v == error).ok_or(CuError::INVALID_VALUE)?;
    let p = if desc { d.as_ptr() } else { n.as_ptr() };
    // SAFETY: the caller passes a writable pointer slot; the strings live
    // for the whole process.
    unsafe { put(out, p) }
}

/// `cuGetErrorName`.
///
/// # Safety
/// `p_str` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: CuResult, p_str: *mut *const c_char) -> CuResult {
    run("cuGetErrorName", || error_text(error.0, false, p_str))
}

/// `cuGetErrorString`.
///
/// # Safety
/// `p_str` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: CuResult, p_str: *mut *const c_char) -> CuResult {
    run("cuGetErrorString", || error_text(error.0, true, p_str))
}

const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = pvgpu_ring::cuda::api::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0 as u64;
const SUCCESS: CUdriverProcAddressQueryResult = CU_GET_PROC_ADDRESS_SUCCESS;
const SYMBOL_NOT_FOUND: CUdriverProcAddressQueryResult = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
const VERSION_NOT_SUFFICIENT: CUdriverProcAddressQueryResult = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;

/// Resolves `symbol` for CUDA version `version` (see [`PROC_TABLE`]).
pub fn resolve(symbol: &str, version: c_int, flags: u64) -> Result<*const c_void, CUdriverProcAddressQueryResult> {
    let want = if flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0 { Variant::PerThread } else { Variant::Legacy };
    let entries: Vec<&(&str, u32, Variant, &str)> = PROC_TABLE.iter().filter(|e| e.0 == symbol).collect();
    if entries.is_empty() {
        return Err(SYMBOL_NOT_FOUND);
    }
    let best = |variant: Variant| entries.iter().filter(|e| e.2 == variant && e.1 as c_int <= version).max_by_key(|e| e.1).map(|e| e.3);
    // Functions without a per-thread form are the same in both modes.
    let sym = best(want).or_else(|| if want == Variant::PerThread { best(Variant::Legacy) } else { None }).ok_or(VERSION_NOT_SUFFICIENT)?;
    lookup(sym).ok_or(SYMBOL_NOT_FOUND)
}

/// Resolves a symbol for `cuGetProcAddress*`. The driver (measured with
/// 580.159.04) answers a symbol it lacks, or one newer than `version`, with
/// `CUDA_SUCCESS`, a null `*pfn` and the reason in `*status` for the `_v2`
/// form; the CUDA 11 form, which has no status, answers
/// `CUDA_ERROR_NOT_FOUND`.
fn get_proc(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
    with_status: bool,
) -> Res {
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { state::name(symbol) }?;
    if pfn.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let (f, st) = match resolve(name, version, flags) {
        Ok(f) => (f as *mut c_void, SUCCESS),
        Err(st) => (std::ptr::null_mut(), st),
    };
    // SAFETY: pfn is non-null and writable per the API contract.
    unsafe { pfn.write(f) };
    if !status.is_null() {
        // SAFETY: a non-null status pointer is writable per the API.
        unsafe { status.write(st) };
    }
    if st == SUCCESS {
        tracing::trace!(symbol = name, version, "cuGetProcAddress");
        Ok(())
    } else {
        tracing::debug!(symbol = name, version, status = ?st, "cuGetProcAddress: not found");
        if with_status { Ok(()) } else { Err(CuError::NOT_FOUND) }
    }
}

/// `cuGetProcAddress_v2`: the entry point of `symbol` for CUDA version
/// `cuda_version`, from the version table generated from NVIDIA's headers.
///
/// # Safety
/// `symbol` must be NUL-terminated, `pfn` writable, `symbol_status` null or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CuResult {
    run("cuGetProcAddress_v2", || get_proc(symbol, pfn, cuda_version, flags, symbol_status, true))
}

/// `cuGetProcAddress` (CUDA 11.3 form, without the status).
///
/// # Safety
/// As for [`cuGetProcAddress_v2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) -> CuResult {
    run("cuGetProcAddress", || get_proc(symbol, pfn, cuda_version, flags, std::ptr::null_mut(), false))
}

/// `cuGetExportTable`: the driver's private tables (see [`crate::export`]).
///
/// # Safety
/// `pp_export_table` must be null or writable; `table_id` null or 16
/// readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetExportTable(pp_export_table: *mut *const c_void, table_id: *const CUuuid) -> CuResult {
    state::init_log();
    // SAFETY: the caller's pointers, as documented.
    state::quiet(|| unsafe { crate::export::get(pp_export_table, table_id.cast()) })
}

/// `cuProfilerStart`: no profiler is attached to a remote session; a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn cuProfilerStart() -> CuResult {
    CuResult::SUCCESS
}

/// `cuProfilerStop`: a no-op, as [`cuProfilerStart`].
#[unsafe(no_mangle)]
pub extern "C" fn cuProfilerStop() -> CuResult {
    CuResult::SUCCESS
}
