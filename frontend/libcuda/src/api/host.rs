//! Page-locked host memory (`cuMemAllocHost`, `cuMemHostAlloc`): from the
//! shared data area when the transport has one, so copies from and to it
//! need no staging copy and asynchronous ones are truly asynchronous; when
//! the area is full, or on TCP, private pages of the program, and copies
//! are staged. Where the device must reach private page-locked memory
//! through the program's pointer (its device pointer is asked for, it was
//! allocated `DEVICEMAP`, or a kernel is given a pointer into it), it is
//! mirrored in the backend at the same address and kept coherent
//! ([`pvgpu_frontend::Client::mirror_host`]). Registered memory is in
//! [`super::host_register`].

use crate::state::{self, HostInfo, Res, objects, put, run};
use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, munmap};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_uint, c_void};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// `CU_MEMHOSTALLOC_DEVICEMAP`.
const DEVICEMAP: u32 = 0x02;
/// Page size of private page-locked memory.
const PAGE: usize = 4096;
/// Where private page-locked memory is placed (a hint): high in the
/// address space, away from where a backend's worker keeps its own
/// mappings, so a mirror at the same address there is likely free.
const PRIVATE_BASE: u64 = 0x3000_0000_0000;
static NEXT_PRIVATE: AtomicU64 = AtomicU64::new(PRIVATE_BASE);
/// Private page-locked allocations live now (when none, kernel parameters
/// need no look for pointers into them).
static PRIVATE_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Private page-locked memory: page-rounded anonymous pages, placed near
/// [`PRIVATE_BASE`] when the kernel agrees.
fn private_alloc(size: usize) -> Result<*mut c_void, CuError> {
    let len = NonZeroUsize::new(size.checked_next_multiple_of(PAGE).ok_or(CuError::OUT_OF_MEMORY)?).ok_or(CuError::INVALID_VALUE)?;
    // Relaxed: a hint counter; any value is a valid hint.
    let hint = NEXT_PRIVATE.fetch_add(len.get() as u64 + PAGE as u64, Ordering::Relaxed);
    let hint = NonZeroUsize::new(hint as usize);
    // SAFETY: fresh anonymous memory; the address is a hint, never fixed.
    let p = unsafe { mmap_anonymous(hint, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }
        .map_err(|_| CuError::OUT_OF_MEMORY)?;
    // Relaxed: a count read only to skip work.
    PRIVATE_LIVE.fetch_add(1, Ordering::Relaxed);
    Ok(p.as_ptr())
}

/// Mirrors private page-locked memory `start` for the device, once.
fn mirror(start: usize) -> Res {
    let len = {
        let o = objects();
        match o.host.get(&start) {
            Some(i) if !i.in_area && !i.mirrored => i.len.next_multiple_of(PAGE),
            Some(_) => return Ok(()),
            None => return Err(CuError::INVALID_VALUE),
        }
    };
    // SAFETY: the allocation's own pages, mapped until cuMemFreeHost, which
    // unmirrors them first.
    unsafe { state::client()?.mirror_host(start as *mut u8, len) }.map_err(state::cu)?;
    if let Some(i) = objects().host.get_mut(&start) {
        i.mirrored = true;
    }
    Ok(())
}

/// Mirrors the private page-locked allocations a kernel's packed
/// parameters point into (XLA hands a kernel the host pointer of a flag it
/// spins on). A failure leaves the allocation as it was.
pub(crate) fn mirror_pointers(packed: &[u8]) {
    super::host_register::mirror_pointers(packed);
    // Relaxed: see PRIVATE_LIVE.
    if PRIVATE_LIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let wanted: Vec<usize> = {
        let o = objects();
        packed
            .chunks_exact(8)
            .filter_map(|w| o.host_range(u64::from_le_bytes(w.try_into().unwrap_or_default()) as usize))
            .filter(|(_, i)| !i.in_area && !i.mirrored)
            .map(|(start, _)| start)
            .collect()
    };
    for start in wanted {
        if let Err(e) = mirror(start) {
            tracing::debug!(ptr = start, status = ?e, "page-locked memory a kernel points into not mirrored");
        }
    }
}

/// Rewrites the words of a kernel's packed parameters that point into the
/// data area's page-locked memory with the device's address of it, where
/// the device reaches the area elsewhere than at the program's addresses
/// (a backend serving sessions in one process, or a worker that had the
/// program's addresses taken). Pointers the kernel finds in other memory
/// are not rewritten: such a kernel faults there.
pub(crate) fn area_pointers(packed: &mut [u8]) {
    let Ok(c) = state::client() else { return };
    if !c.area_elsewhere() {
        return;
    }
    for w in packed.chunks_exact_mut(8) {
        let v = u64::from_le_bytes(w.try_into().unwrap_or_default());
        if let Some(d) = c.area_pointer_for_device(v) {
            w.copy_from_slice(&d.to_le_bytes());
        }
    }
}

fn host_alloc(pp: *mut *mut c_void, size: usize, flags: c_uint) -> Res {
    if pp.is_null() || size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let c = state::client()?;
    state::current()?;
    let (p, in_area) = match c.host_alloc(size) {
        Some(p) => (p as *mut c_void, true),
        None => (private_alloc(size)?, false),
    };
    let ctx = state::current_handle().unwrap_or(0);
    objects().host.insert(p as usize, HostInfo { len: size, flags, in_area, mirrored: false, ctx });
    if !in_area && flags & DEVICEMAP != 0 {
        // Asked for the device: mirrored now (where it cannot be, its
        // device pointer is refused later, as before).
        if let Err(e) = mirror(p as usize) {
            tracing::debug!(status = ?e, "DEVICEMAP page-locked memory not mirrored");
        }
    }
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
        // The backend of the context it was allocated in (its data area).
        let c = if info.ctx == 0 { state::client()? } else { state::client_of_ctx(info.ctx)? };
        if info.in_area {
            c.host_free(p as *mut u8);
            return Ok(());
        }
        if info.mirrored {
            // The backend's copy goes first: the program's pages must
            // outlive the mirror.
            let _ = c.unmirror_host(p as *mut u8);
        }
        // Relaxed: see PRIVATE_LIVE.
        PRIVATE_LIVE.fetch_sub(1, Ordering::Relaxed);
        let ptr = std::ptr::NonNull::new(p).ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: pages private_alloc mapped for this allocation, unmapped
        // once (just removed from the table).
        unsafe { munmap(ptr, info.len.next_multiple_of(PAGE)) }.map_err(|_| CuError::INVALID_VALUE)
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
/// device (on the local transport, at the program's own address), or
/// private page-locked memory, mirrored in the backend at the same address.
/// Other host memory cannot be reached by the device of another domain or
/// host.
pub(crate) fn host_device_pointer(p: *mut c_void) -> Result<u64, CuError> {
    let found = objects().host_range(p as usize);
    let Some((start, info)) = found else {
        return super::host_register::device_pointer(p as usize);
    };
    if !info.in_area {
        mirror(start)?;
        return Ok(p as u64);
    }
    state::client()?.host_device_pointer(p.cast()).map_err(state::cu)?.ok_or(CuError::NOT_SUPPORTED)
}

/// The address at which the backend's device reaches host memory
/// `[p, p+len)` that a graph copies from or to at every launch: page-locked
/// memory of this library (the data area's device address, or its mirror),
/// or ordinary memory, mirrored page by page at the same address (where the
/// backend can map it: in a worker process).
pub(crate) fn graph_host_address(p: usize, len: usize) -> Result<u64, CuError> {
    let pinned = objects().host_range(p).filter(|(start, info)| p.saturating_add(len) <= start + info.len).is_some();
    if pinned {
        return host_device_pointer(p as *mut c_void);
    }
    state::client()?.mirror_pageable(p as *const u8, len).map_err(state::cu)?;
    Ok(p as u64)
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

/// `cuMemHostRegister_v2`: see [`super::host_register`].
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: c_uint) -> CuResult {
    run("cuMemHostRegister_v2", || super::host_register::register(p, size, flags))
}

/// `cuMemHostRegister` (same signature as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostRegister(p: *mut c_void, size: usize, flags: c_uint) -> CuResult {
    run("cuMemHostRegister", || super::host_register::register(p, size, flags))
}

/// `cuMemHostUnregister`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CuResult {
    run("cuMemHostUnregister", || super::host_register::unregister(p))
}
