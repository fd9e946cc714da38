//! Memory: device allocations, copies and memsets (page-locked host memory
//! is in [`super::host`], pointer queries in [`super::pointer`]).
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
use crate::state::{self, Res, objects, put, run, stream};
use pvgpu_frontend::Stream;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_uint, c_void};

fn alloc(dptr: *mut u64, size: usize) -> Res {
    if dptr.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = state::current()?;
    let c = state::client()?;
    let p = c.mem_alloc(ctx, size as u64).map_err(state::cu)?;
    let handle = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    if state::backends::clashes(p, size as u64, state::backends::backend_of_ctx(handle)) {
        let _ = c.mem_free(p);
        return Err(CuError::OUT_OF_MEMORY);
    }
    objects().device.insert(p, DevAlloc::new(size as u64, handle, DevKind::Alloc));
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
        let c = state::client_of_pointer(dptr)?;
        // A free of an address this process never allocated (or a global)
        // fails at the call, as the driver's does.
        let kind = objects().device.get(&dptr).map(|a| a.kind);
        if kind == Some(DevKind::Managed) {
            // Its pages go first: nothing may touch them once freed.
            crate::callback::gate(Stream::DEFAULT);
            return super::managed::free(dptr);
        }
        if !matches!(kind, Some(DevKind::Alloc | DevKind::Graph)) {
            return Err(CuError::INVALID_VALUE);
        }
        c.mem_free(dptr).map_err(state::cu)?;
        // Graph memory keeps its address (the graph's next launch maps it).
        if kind == Some(DevKind::Alloc) {
            objects().device.remove(&dptr);
        }
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
    match s {
        Stream::DEFAULT => state::client()?.ctx_synchronize(state::current()?),
        st => state::client_of(st.0)?.stream_synchronize(st),
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
    if let Some(a) = captured_host(src as usize, n, s, is_async)? {
        return state::client()?.memcpy_dtod_async(dst, a, n as u64, s).map_err(state::cu);
    }
    if crate::managed::contains(src as u64, n) {
        // Managed memory is the device's (its CPU pages were flushed when
        // the copy was submitted).
        return state::client()?.memcpy_dtod_async(dst, src as u64, n as u64, s).map_err(state::cu);
    }
    // SAFETY: the caller of the driver API guarantees `src` holds `n`
    // readable bytes (and, for page-locked memory copied asynchronously,
    // that it stays valid until the stream is synchronised).
    unsafe { state::client_for(dst, s)?.memcpy_htod_raw(dst, src.cast(), n, s, is_async) }.map_err(state::cu)
}

/// On a capturing stream, the device address of host memory a copy names
/// that is not in the data area (whose copies are captured as they are):
/// the graph copies from or to it at every launch, so it is mirrored
/// ([`super::host::graph_host_address`]). `None` off capture, or where it
/// cannot be mirrored (the backend then refuses the copy, as before).
fn captured_host(p: usize, n: usize, s: Stream, is_async: bool) -> Result<Option<u64>, CuError> {
    if !is_async || n == 0 || !crate::api::capture::is_capturing(s)? {
        return Ok(None);
    }
    let c = state::client()?;
    if c.is_pinned(p as *const u8, n) {
        return Ok(None);
    }
    match super::host::graph_host_address(p, n) {
        Ok(a) => Ok(Some(a)),
        Err(e) => {
            tracing::debug!(ptr = p, len = n, status = ?e, "host memory of a captured copy not mirrored");
            Ok(None)
        }
    }
}

fn dtoh(dst: *mut c_void, src: u64, n: usize, s: Stream, is_async: bool) -> Res {
    if n > 0 && dst.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    if pinned_host(src, n) {
        return host_copy(dst as u64, src, n, s);
    }
    if let Some(a) = captured_host(dst as usize, n, s, is_async)? {
        return state::client()?.memcpy_dtod_async(a, src, n as u64, s).map_err(state::cu);
    }
    if crate::managed::contains(dst as u64, n) {
        // Into the device's copy: the CPU's next touch fetches the pages
        // by a copy ordered after this one on the default stream (work on
        // other streams the program synchronises with first).
        return state::client()?.memcpy_dtod_async(dst as u64, src, n as u64, s).map_err(state::cu);
    }
    // SAFETY: the caller of the driver API guarantees `dst` holds `n`
    // writable bytes (as above for page-locked memory).
    unsafe { state::client_for(src, s)?.memcpy_dtoh_raw(dst.cast(), n, src, s, is_async) }.map_err(state::cu)
}

fn dtod(dst: u64, src: u64, n: usize, s: Option<Stream>) -> Res {
    if pinned_host(dst, n) || pinned_host(src, n) {
        return unified(dst, src, n, s);
    }
    if state::backends::several() {
        let (to, from) = (state::client_of_pointer(dst)?, state::client_of_pointer(src)?);
        if !std::ptr::eq(to, from) {
            return super::across::copy(dst, to, src, from, n, s);
        }
    }
    let c = state::client_for(src, s.unwrap_or(Stream::DEFAULT))?;
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

/// A copy between the memory of two contexts (`cuMemcpyPeer`): a backend
/// holds both of its contexts in one address space, where a
/// device-to-device copy reaches either side; contexts of two backends
/// copy through the program ([`super::across`]).
fn peer(dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, n: usize, s: Option<Stream>) -> Res {
    let (dh, sh) = (state::id(dst_ctx), state::id(src_ctx));
    if !state::ctx::is_live(dh) || !state::ctx::is_live(sh) {
        return Err(CuError::INVALID_CONTEXT);
    }
    let (to, from) = (state::client_of_ctx(dh)?, state::client_of_ctx(sh)?);
    if !std::ptr::eq(to, from) {
        return super::across::copy(dst, to, src, from, n, s);
    }
    dtod(dst, src, n, s)
}

/// `cuMemcpyPeer`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeer(dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, n: usize) -> CuResult {
    run("cuMemcpyPeer", || peer(dst, dst_ctx, src, src_ctx, n, None))
}

/// `cuMemcpyPeerAsync`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeerAsync(dst: u64, dst_ctx: *mut c_void, src: u64, src_ctx: *mut c_void, n: usize, s: *mut c_void) -> CuResult {
    run("cuMemcpyPeerAsync", || peer(dst, dst_ctx, src, src_ctx, n, Some(state::ordered(s))))
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
    state::client_for(dptr, s)?.memset(dptr, value, elem, n as u64, s).map_err(|e| {
        tracing::debug!(dptr, elem, n, stream = s.0, error = %e, "memset refused");
        state::cu(e)
    })
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
