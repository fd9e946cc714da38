//! Managed memory's entry points (`cuMemAllocManaged`, prefetch, advice,
//! range attributes, stream attachment); the coherence of the CPU's pages
//! with the device's is [`crate::managed`]'s.

use crate::managed::{self, PAGE};
use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, Res, objects, put, run};
use pvgpu_ring::cuda::api::{
    CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, CUmem_advise,
    CUmem_range_attribute, CUmemLocation, CUstream,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_uint, c_void};

/// `CU_MEM_ATTACH_GLOBAL`, `CU_MEM_ATTACH_HOST`, `CU_MEM_ATTACH_SINGLE`.
const ATTACH_FLAGS: u32 = 0x1 | 0x2 | 0x4;
/// Device allocations tried for one managed allocation whose address is
/// free in this process.
const MAX_TRIES: usize = 8;
/// `CU_DEVICE_CPU`.
const CPU: c_int = -1;

/// `cuMemAllocManaged`: device memory of the current context, page-aligned
/// and whole pages, and the same pages in this process (see
/// [`crate::managed`]).
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(dptr: *mut u64, size: usize, flags: c_uint) -> CuResult {
    run("cuMemAllocManaged", || {
        if dptr.is_null() || size == 0 || flags & !ATTACH_FLAGS != 0 || flags.count_ones() != 1 || flags == 0x4 {
            return Err(CuError::INVALID_VALUE);
        }
        let ctx = state::current()?;
        let handle = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
        let c = state::client()?;
        let whole = size.checked_next_multiple_of(PAGE).ok_or(CuError::INVALID_VALUE)?;
        // One page more, so the pages the CPU maps hold nothing else. Where
        // the device's address is taken in this process, another
        // allocation is tried (the ones that collided are kept until then,
        // so the driver does not hand out the same address again).
        let mut collided = Vec::new();
        let mut placed = None;
        for _ in 0..MAX_TRIES {
            let base = match c.mem_alloc(ctx, (whole + PAGE) as u64) {
                Ok(b) => b,
                Err(e) => {
                    placed = Some(Err(state::cu(e)));
                    break;
                }
            };
            let ptr = (base as usize).next_multiple_of(PAGE) as u64;
            if managed::map(base, ptr, whole) {
                placed = Some(Ok(ptr));
                break;
            }
            tracing::debug!(ptr, "cuMemAllocManaged: the device address is taken in this process; trying another");
            collided.push(base);
        }
        for b in collided {
            let _ = c.mem_free(b);
        }
        let ptr = placed.unwrap_or(Err(CuError::OUT_OF_MEMORY))?;
        objects().device.insert(ptr, DevAlloc::new(size as u64, handle, DevKind::Managed));
        // SAFETY: non-null and writable per the API.
        unsafe { put(dptr, ptr) }
    })
}

/// Frees managed allocation `ptr` (from `cuMemFree`): its pages go, then
/// its device memory.
pub(crate) fn free(ptr: u64) -> Res {
    let base = managed::unmap(ptr).ok_or(CuError::INVALID_VALUE)?;
    objects().device.remove(&ptr);
    state::client()?.mem_free(base).map_err(state::cu)
}

/// Checks that `[ptr, ptr+count)` is managed memory.
fn managed_range(ptr: u64, count: usize) -> Res {
    if count == 0 || !managed::contains(ptr, count) { Err(CuError::INVALID_VALUE) } else { Ok(()) }
}

/// A prefetch: to the device, the CPU's changes go now (ordered on the
/// stream) and its pages are fetched again when touched; to the CPU,
/// nothing (pages are fetched when touched).
fn prefetch(ptr: u64, count: usize, to_device: bool, s: CUstream) -> Res {
    managed_range(ptr, count)?;
    if to_device {
        crate::callback::gate(state::stream(s));
    }
    Ok(())
}

/// `cuMemPrefetchAsync`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPrefetchAsync(ptr: u64, count: usize, device: c_int, s: CUstream) -> CuResult {
    run("cuMemPrefetchAsync", || prefetch(ptr, count, device != CPU, s))
}

/// `cuMemPrefetchAsync_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPrefetchAsync_v2(ptr: u64, count: usize, location: CUmemLocation, flags: c_uint, s: CUstream) -> CuResult {
    run("cuMemPrefetchAsync_v2", || {
        if flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        prefetch(ptr, count, location.type_ == CU_MEM_LOCATION_TYPE_DEVICE, s)
    })
}

/// `cuMemAdvise`: advice is accepted for managed memory and changes
/// nothing (the library's coherence does not depend on it).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAdvise(ptr: u64, count: usize, advice: CUmem_advise, _device: c_int) -> CuResult {
    run("cuMemAdvise", || if (1..=6).contains(&advice.0) { managed_range(ptr, count) } else { Err(CuError::INVALID_VALUE) })
}

/// `cuMemAdvise_v2`: as `cuMemAdvise`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAdvise_v2(ptr: u64, count: usize, advice: CUmem_advise, location: CUmemLocation) -> CuResult {
    cuMemAdvise(ptr, count, advice, location.id)
}

/// `cuMemRangeGetAttribute`: not read-mostly; the last prefetch location
/// is the device, where the memory lives; the other attributes are
/// answered as for memory without advice.
///
/// # Safety
/// `data` must hold `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRangeGetAttribute(
    data: *mut c_void,
    size: usize,
    attr: CUmem_range_attribute,
    ptr: u64,
    count: usize,
) -> CuResult {
    run("cuMemRangeGetAttribute", || {
        managed_range(ptr, count)?;
        if data.is_null() || size < 4 {
            return Err(CuError::INVALID_VALUE);
        }
        let ctx = objects().device_range(ptr, 1).map(|(_, a)| a.ctx).ok_or(CuError::INVALID_VALUE)?;
        let device = state::ctx::device_of(ctx).unwrap_or(0);
        let v: i32 = match attr {
            CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY => 0,
            CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION => device,
            // Preferred location: none (CU_DEVICE_INVALID); accessed by:
            // no device; the location types and ids likewise.
            _ => {
                // SAFETY: `size` writable bytes, per the API.
                unsafe { std::ptr::write_bytes(data.cast::<u8>(), 0, size) };
                return if attr.0 <= 8 { Ok(()) } else { Err(CuError::INVALID_VALUE) };
            }
        };
        // SAFETY: at least 4 writable bytes, per the API and the check.
        unsafe { put(data.cast::<i32>(), v) }
    })
}

/// `cuMemRangeGetAttributes`: each as `cuMemRangeGetAttribute`.
///
/// # Safety
/// The arrays hold `n` entries; each `data[i]` holds `sizes[i]` writable
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRangeGetAttributes(
    data: *mut *mut c_void,
    sizes: *mut usize,
    attrs: *mut CUmem_range_attribute,
    n: usize,
    ptr: u64,
    count: usize,
) -> CuResult {
    if data.is_null() || sizes.is_null() || attrs.is_null() {
        return CuResult::INVALID_VALUE;
    }
    for i in 0..n {
        // SAFETY: `n` entries of each array, per the API.
        let r = unsafe { cuMemRangeGetAttribute(*data.add(i), *sizes.add(i), *attrs.add(i), ptr, count) };
        if r != CuResult::SUCCESS {
            return r;
        }
    }
    CuResult::SUCCESS
}

/// `cuStreamAttachMemAsync`: accepted for managed memory. Attachment only
/// narrows which work the CPU must wait for; the library fetches pages
/// when the CPU touches them, so every attachment behaves as the widest.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamAttachMemAsync(_s: CUstream, ptr: u64, length: usize, flags: c_uint) -> CuResult {
    run("cuStreamAttachMemAsync", || {
        if flags & !ATTACH_FLAGS != 0 || flags.count_ones() > 1 {
            return Err(CuError::INVALID_VALUE);
        }
        managed_range(ptr, length.max(1))
    })
}
