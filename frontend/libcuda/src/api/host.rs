//! Page-locked host memory (`cuMemAllocHost`, `cuMemHostAlloc`): from the
//! shared data area when the transport has one, so copies from and to it
//! need no staging copy and asynchronous ones are truly asynchronous; when
//! the area is full, or on TCP, from the C heap, and copies are staged.
//! `cuMemHostRegister` is accepted (copies from registered memory are
//! staged, which CUDA's semantics allow).

use crate::state::{self, HostInfo, Res, objects, put, run};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_uint, c_void};

fn host_alloc(pp: *mut *mut c_void, size: usize, flags: c_uint) -> Res {
    if pp.is_null() || size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let c = state::client()?;
    state::current()?;
    let (p, in_area) = match c.host_alloc(size) {
        Some(p) => (p as *mut c_void, true),
        None => {
            let mut p = std::ptr::null_mut();
            // SAFETY: valid out-pointer; alignment is a power of two.
            if unsafe { libc::posix_memalign(&mut p, 4096, size) } != 0 {
                return Err(CuError::OUT_OF_MEMORY);
            }
            (p, false)
        }
    };
    let ctx = state::current_handle().unwrap_or(0);
    objects().host.insert(p as usize, HostInfo { len: size, flags, in_area, ctx });
    // SAFETY: non-null and writable per the API.
    unsafe { put(pp, p) }
}

/// `cuMemAllocHost_v2`: page-locked memory in the shared data area.
///
/// # Safety
/// `pp` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> CuResult {
    run("cuMemAllocHost_v2", || host_alloc(pp, size, 0))
}

/// `cuMemHostAlloc`: as `cuMemAllocHost`; the flags are recorded.
///
/// # Safety
/// `pp` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: c_uint) -> CuResult {
    run("cuMemHostAlloc", || host_alloc(pp, size, flags))
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `p` must come from `cuMemAllocHost` or `cuMemHostAlloc` and not be used
/// after this.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CuResult {
    run("cuMemFreeHost", || {
        let info = objects().host.remove(&(p as usize)).ok_or(CuError::INVALID_VALUE)?;
        if info.in_area {
            state::client()?.host_free(p as *mut u8);
        } else {
            // SAFETY: allocated with posix_memalign by host_alloc, freed once
            // (just removed from the table).
            unsafe { libc::free(p) };
        }
        Ok(())
    })
}

/// `cuMemHostGetFlags`.
///
/// # Safety
/// `flags` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) -> CuResult {
    run("cuMemHostGetFlags", || {
        let o = objects();
        let (&start, info) = o.host.range(..=(p as usize)).next_back().ok_or(CuError::INVALID_VALUE)?;
        if p as usize >= start + info.len {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: writable per the API.
        unsafe { put(flags, info.flags) }
    })
}

/// The device address of page-locked memory at `p`: memory this library
/// allocated in the data area, when the backend mapped the area for the
/// device (on the local transport, at the program's own address). Other
/// host memory cannot be reached by the device of another domain or host.
pub(crate) fn host_device_pointer(p: *mut c_void) -> Result<u64, CuError> {
    if objects().host_range(p as usize).is_none() {
        return Err(CuError::INVALID_VALUE);
    }
    state::client()?.host_device_pointer(p.cast()).map_err(state::cu)?.ok_or(CuError::NOT_SUPPORTED)
}

/// `cuMemHostGetDevicePointer_v2`.
///
/// # Safety
/// `pdptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(pdptr: *mut u64, p: *mut c_void, flags: c_uint) -> CuResult {
    run("cuMemHostGetDevicePointer_v2", || {
        if flags != 0 || pdptr.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let d = host_device_pointer(p)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(pdptr, d) }
    })
}

fn register(p: *mut c_void, size: usize) -> Res {
    state::client()?;
    if p.is_null() || size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let mut o = objects();
    if o.registered.contains_key(&(p as usize)) {
        return Err(CuError::HOST_MEMORY_ALREADY_REGISTERED);
    }
    o.registered.insert(p as usize, size);
    Ok(())
}

/// `cuMemHostRegister_v2`: accepted; copies from the range are staged.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, _flags: c_uint) -> CuResult {
    run("cuMemHostRegister_v2", || register(p, size))
}

/// `cuMemHostRegister` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostRegister(p: *mut c_void, size: usize, _flags: c_uint) -> CuResult {
    run("cuMemHostRegister", || register(p, size))
}

/// `cuMemHostUnregister`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CuResult {
    run("cuMemHostUnregister", || objects().registered.remove(&(p as usize)).map(|_| ()).ok_or(CuError::HOST_MEMORY_NOT_REGISTERED))
}
