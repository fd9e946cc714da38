//! Memory: device allocations, copies, memsets, host memory.
//!
//! Page-locked host memory (`cuMemAllocHost`, `cuMemHostAlloc`) comes from
//! the shared data area when the transport has one, so copies from and to it
//! need no staging copy and asynchronous ones are truly asynchronous; when
//! the area is full, or on TCP, it comes from the C heap and copies are
//! staged. `cuMemHostRegister` is accepted (copies from registered memory
//! are staged, which CUDA's semantics allow), but registered or allocated
//! host memory cannot be mapped into the device's address space
//! (`cuMemHostGetDevicePointer` is not supported).

use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, HostInfo, Res, ctx, handle, objects, put, run, stream};
use pvgpu_frontend::Stream;
use pvgpu_ring::cuda::api::{
    CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
    CU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_MAPPED, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CUmemorytype, CUpointer_attribute,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_uint, c_void};

fn alloc(dptr: *mut u64, size: usize) -> Res {
    if dptr.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = state::current()?;
    let p = state::client()?.mem_alloc(ctx, size as u64).map_err(state::cu)?;
    let handle = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    objects().device.insert(p, DevAlloc { size: size as u64, ctx: handle, kind: DevKind::Alloc });
    // SAFETY: non-null and writable per the API.
    unsafe { put(dptr, p) }
}

/// `cuMemAlloc_v2`.
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, size: usize) -> CuResult {
    run("cuMemAlloc_v2", || alloc(dptr, size))
}

/// `cuMemAllocPitch_v2`: rows padded to 512 bytes.
///
/// # Safety
/// `dptr` and `pitch` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(dptr: *mut u64, pitch: *mut usize, width: usize, height: usize, elem: c_uint) -> CuResult {
    run("cuMemAllocPitch_v2", || {
        if !matches!(elem, 4 | 8 | 16) || width == 0 || height == 0 || pitch.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let p = width.checked_next_multiple_of(512).ok_or(CuError::INVALID_VALUE)?;
        alloc(dptr, p.checked_mul(height).ok_or(CuError::INVALID_VALUE)?)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(pitch, p) }
    })
}

/// `cuMemFree_v2` (sent without waiting; an error comes back at the next
/// synchronising call).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(dptr: u64) -> CuResult {
    run("cuMemFree_v2", || {
        if dptr == 0 {
            return Ok(());
        }
        let c = state::client()?;
        // A free of an address this process never allocated (or a global)
        // fails at the call, as the driver's does.
        if objects().device.get(&dptr).is_none_or(|a| a.kind != DevKind::Alloc) {
            return Err(CuError::INVALID_VALUE);
        }
        c.mem_free(dptr).map_err(state::cu)?;
        objects().device.remove(&dptr);
        Ok(())
    })
}

/// `cuMemGetInfo_v2`: within the session's quota.
///
/// # Safety
/// `free` and `total` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    run("cuMemGetInfo_v2", || {
        let (f, t) = state::client()?.mem_get_info(state::current()?).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe {
            put(free, f as usize)?;
            put(total, t as usize)
        }
    })
}

/// `cuMemGetAddressRange_v2`, from the allocations this process made.
///
/// # Safety
/// `base` and `size` must each be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, dptr: u64) -> CuResult {
    run("cuMemGetAddressRange_v2", || {
        state::client()?;
        let (start, a) = objects().device_range(dptr, 1).ok_or(CuError::NOT_FOUND)?;
        let len = a.size;
        if !base.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(base, start)? };
        }
        if !size.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(size, len as usize)? };
        }
        Ok(())
    })
}

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
fn host_device_pointer(p: *mut c_void) -> Result<u64, CuError> {
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

/// Whether `[p, p+n)` lies in page-locked host memory this library handed
/// out. With unified addressing programs name such memory where device
/// memory is expected (XLA zeroes flags in it with `cuMemsetD32Async`);
/// the GPU cannot reach the program's memory here, so those operations run
/// in the program, once the work queued before them on their stream is
/// done ([`host_wait`]).
fn pinned_host(p: u64, n: usize) -> bool {
    let Some(end) = (p as usize).checked_add(n) else { return false };
    objects().host_range(p as usize).is_some_and(|(start, i)| end <= start + i.len)
}

/// Waits for the work queued on `s` (and its host functions) before an
/// operation done in the program.
fn host_wait(s: Stream) -> Res {
    crate::callback::gate(s);
    let c = state::client()?;
    match s {
        Stream::DEFAULT => c.ctx_synchronize(state::current()?),
        st => c.stream_synchronize(st),
    }
    .map_err(state::cu)
}

/// A copy between host ranges, after the work before it on `s`.
fn host_copy(dst: u64, src: u64, n: usize, s: Stream) -> Res {
    host_wait(s)?;
    if n > 0 {
        // SAFETY: both are host ranges of `n` bytes per the API; `copy`
        // allows overlap.
        unsafe { std::ptr::copy(src as usize as *const u8, dst as usize as *mut u8, n) };
    }
    Ok(())
}

fn htod(dst: u64, src: *const c_void, n: usize, s: Stream, is_async: bool) -> Res {
    if n > 0 && src.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    if pinned_host(dst, n) {
        return host_copy(dst, src as u64, n, s);
    }
    // SAFETY: the caller of the driver API guarantees `src` holds `n`
    // readable bytes (and, for page-locked memory copied asynchronously,
    // that it stays valid until the stream is synchronised).
    unsafe { state::client()?.memcpy_htod_raw(dst, src.cast(), n, s, is_async) }.map_err(state::cu)
}

fn dtoh(dst: *mut c_void, src: u64, n: usize, s: Stream, is_async: bool) -> Res {
    if n > 0 && dst.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    if pinned_host(src, n) {
        return host_copy(dst as u64, src, n, s);
    }
    // SAFETY: the caller of the driver API guarantees `dst` holds `n`
    // writable bytes (as above for page-locked memory).
    unsafe { state::client()?.memcpy_dtoh_raw(dst.cast(), n, src, s, is_async) }.map_err(state::cu)
}

fn dtod(dst: u64, src: u64, n: usize, s: Option<Stream>) -> Res {
    if pinned_host(dst, n) || pinned_host(src, n) {
        return unified(dst, src, n, s);
    }
    let c = state::client()?;
    crate::callback::gate(s.unwrap_or(Stream::DEFAULT));
    match s {
        None => c.memcpy_dtod(dst, src, n as u64),
        Some(s) => c.memcpy_dtod_async(dst, src, n as u64, s),
    }
    .map_err(state::cu)
}

/// `cuMemcpyHtoD_v2`.
///
/// # Safety
/// `src` must hold `n` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> CuResult {
    run("cuMemcpyHtoD_v2", || htod(dst, src, n, state::ordered(std::ptr::null_mut()), false))
}

/// `cuMemcpyHtoDAsync_v2`.
///
/// # Safety
/// `src` must hold `n` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemcpyHtoDAsync_v2", || htod(dst, src, n, state::ordered(s), true))
}

/// `cuMemcpyDtoH_v2`.
///
/// # Safety
/// `dst` must hold `n` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> CuResult {
    run("cuMemcpyDtoH_v2", || dtoh(dst, src, n, state::ordered(std::ptr::null_mut()), false))
}

/// `cuMemcpyDtoHAsync_v2`: into page-locked memory it is queued; into
/// pageable memory it is complete on return, as CUDA does.
///
/// # Safety
/// `dst` must hold `n` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemcpyDtoHAsync_v2", || dtoh(dst, src, n, state::ordered(s), true))
}

/// `cuMemcpyDtoD_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, n: usize) -> CuResult {
    run("cuMemcpyDtoD_v2", || dtod(dst, src, n, None))
}

/// `cuMemcpyDtoDAsync_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemcpyDtoDAsync_v2", || dtod(dst, src, n, Some(state::ordered(s))))
}

/// A unified-addressing copy: each side is device memory if it lies in an
/// allocation this process made, host memory otherwise.
fn unified(dst: u64, src: u64, n: usize, s: Option<Stream>) -> Res {
    crate::callback::gate(s.unwrap_or(Stream::DEFAULT));
    let (d_dev, s_dev) = {
        let o = objects();
        (o.device_range(dst, n as u64).is_some(), o.device_range(src, n as u64).is_some())
    };
    let is_async = s.is_some();
    let st = s.unwrap_or(Stream::DEFAULT);
    match (d_dev, s_dev) {
        (true, true) => dtod(dst, src, n, s),
        (true, false) => htod(dst, src as usize as *const c_void, n, st, is_async),
        (false, true) => dtoh(dst as usize as *mut c_void, src, n, st, is_async),
        (false, false) => host_copy(dst, src, n, st),
    }
}

/// `cuMemcpy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy(dst: u64, src: u64, n: usize) -> CuResult {
    run("cuMemcpy", || unified(dst, src, n, None))
}

/// `cuMemcpyAsync`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyAsync(dst: u64, src: u64, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemcpyAsync", || unified(dst, src, n, Some(state::ordered(s))))
}

fn memset(dptr: u64, value: u32, elem: u32, n: usize, s: Stream) -> Res {
    crate::callback::gate(s);
    let len = n.checked_mul(elem as usize).ok_or(CuError::INVALID_VALUE)?;
    if len > 0 && pinned_host(dptr, len) {
        if dptr % elem as u64 != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        host_wait(s)?;
        let pattern = &value.to_le_bytes()[..elem as usize];
        // SAFETY: `[dptr, dptr+len)` lies in page-locked memory this library
        // allocated (checked above), which the program may write.
        let bytes = unsafe { std::slice::from_raw_parts_mut(dptr as usize as *mut u8, len) };
        for chunk in bytes.chunks_exact_mut(elem as usize) {
            chunk.copy_from_slice(pattern);
        }
        return Ok(());
    }
    state::client()?.memset(dptr, value, elem, n as u64, s).map_err(state::cu)
}

/// `cuMemsetD8_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2(dptr: u64, v: u8, n: usize) -> CuResult {
    run("cuMemsetD8_v2", || memset(dptr, v as u32, 1, n, Stream::DEFAULT))
}

/// `cuMemsetD16_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16_v2(dptr: u64, v: u16, n: usize) -> CuResult {
    run("cuMemsetD16_v2", || memset(dptr, v as u32, 2, n, Stream::DEFAULT))
}

/// `cuMemsetD32_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32_v2(dptr: u64, v: u32, n: usize) -> CuResult {
    run("cuMemsetD32_v2", || memset(dptr, v, 4, n, Stream::DEFAULT))
}

/// `cuMemsetD8Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(dptr: u64, v: u8, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemsetD8Async", || memset(dptr, v as u32, 1, n, stream(s)))
}

/// `cuMemsetD16Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16Async(dptr: u64, v: u16, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemsetD16Async", || memset(dptr, v as u32, 2, n, stream(s)))
}

/// `cuMemsetD32Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32Async(dptr: u64, v: u32, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemsetD32Async", || memset(dptr, v, 4, n, stream(s)))
}


/// Writes one pointer attribute of `ptr` to `data`.
fn pointer_attribute(data: *mut c_void, attribute: CUpointer_attribute, ptr: u64) -> Res {
    if data.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let o = objects();
    let dev = o.device_range(ptr, 1);
    let host = o.host.range(..=(ptr as usize)).next_back().filter(|(s, i)| (ptr as usize) < **s + i.len).map(|(s, i)| (*s, i.len));
    let host_ctx = o.host_range(ptr as usize).map_or(0, |(_, i)| i.ctx);
    // SAFETY: `data` points to storage of the attribute's type, per the
    // API; every write below is of that type.
    unsafe {
        match (attribute, dev, host) {
            (CU_POINTER_ATTRIBUTE_MEMORY_TYPE, Some(_), _) => put(data.cast::<CUmemorytype>(), CU_MEMORYTYPE_DEVICE),
            (CU_POINTER_ATTRIBUTE_MEMORY_TYPE, None, Some(_)) => put(data.cast::<CUmemorytype>(), CU_MEMORYTYPE_HOST),
            (CU_POINTER_ATTRIBUTE_CONTEXT, Some((_, a)), _) => put(data.cast::<*mut c_void>(), handle(a.ctx)),
            (CU_POINTER_ATTRIBUTE_CONTEXT, None, Some(_)) => put(data.cast::<*mut c_void>(), handle(host_ctx)),
            (CU_POINTER_ATTRIBUTE_DEVICE_POINTER, Some(_), _) => put(data.cast::<u64>(), ptr),
            (CU_POINTER_ATTRIBUTE_HOST_POINTER, None, Some(_)) => put(data.cast::<u64>(), ptr),
            (CU_POINTER_ATTRIBUTE_DEVICE_POINTER, None, Some(_)) => {
                drop(o);
                put(data.cast::<u64>(), host_device_pointer(ptr as usize as *mut c_void)?)
            }
            (CU_POINTER_ATTRIBUTE_IS_MANAGED, Some(_), _) | (CU_POINTER_ATTRIBUTE_IS_MANAGED, None, Some(_)) => put(data.cast::<u32>(), 0),
            (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, Some((_, a)), _) => put(data.cast::<i32>(), ctx::device_of(a.ctx).unwrap_or(0)),
            (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, Some((start, _)), _) => put(data.cast::<u64>(), start),
            (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, None, Some((start, _))) => put(data.cast::<u64>(), start as u64),
            (CU_POINTER_ATTRIBUTE_RANGE_SIZE, Some((_, a)), _) => put(data.cast::<usize>(), a.size as usize),
            (CU_POINTER_ATTRIBUTE_RANGE_SIZE, None, Some((_, len))) => put(data.cast::<usize>(), len),
            (CU_POINTER_ATTRIBUTE_MAPPED, Some(_), _) => put(data.cast::<u32>(), 1),
            (_, None, None) => Err(CuError::INVALID_VALUE),
            _ => Err(CuError::NOT_SUPPORTED),
        }
    }
}

/// `cuPointerGetAttribute`, for memory this process allocated.
///
/// # Safety
/// `data` must point to storage of the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(data: *mut c_void, attribute: CUpointer_attribute, ptr: u64) -> CuResult {
    run("cuPointerGetAttribute", || {
        state::client()?;
        pointer_attribute(data, attribute, ptr)
    })
}

/// `cuPointerGetAttributes`: attributes that do not apply are zeroed, as the
/// driver does.
///
/// # Safety
/// `attributes` and `data` hold `n` entries; each `data[i]` points to
/// storage of attribute `i`'s type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(n: c_uint, attributes: *mut CUpointer_attribute, data: *mut *mut c_void, ptr: u64) -> CuResult {
    run("cuPointerGetAttributes", || {
        state::client()?;
        if attributes.is_null() || data.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        for i in 0..n.min(64) as usize {
            // SAFETY: `n` entries per the API.
            let (a, d) = unsafe { (*attributes.add(i), *data.add(i)) };
            if pointer_attribute(d, a, ptr).is_err() && !d.is_null() {
                // SAFETY: every attribute's storage holds at least 4 bytes.
                unsafe { d.cast::<u32>().write_unaligned(0) };
            }
        }
        Ok(())
    })
}
