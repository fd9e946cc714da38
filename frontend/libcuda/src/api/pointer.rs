//! Pointer queries (`cuPointerGetAttribute[s]`), for memory this process
//! allocated.

use super::host::host_device_pointer;
use crate::state::objects::DevKind;
use crate::state::{self, Res, ctx, handle, objects, put, run};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_uint, c_void};

use pvgpu_ring::cuda::api::{
    CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_MAPPED,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CUmemorytype,
    CUpointer_attribute,
};
use pvgpu_ring::cuda::api::{
    CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_BUFFER_ID,
    CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE,
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
    CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,
};

/// `CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE`.
const READWRITE: u32 = 3;

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
            // Managed memory, allocated or `__managed__`, is the program's
            // at the same address.
            (CU_POINTER_ATTRIBUTE_HOST_POINTER, Some((_, a)), _) if a.kind == DevKind::Managed || crate::managed::contains(ptr, 1) => {
                put(data.cast::<u64>(), ptr)
            }
            (CU_POINTER_ATTRIBUTE_DEVICE_POINTER, None, Some(_)) => {
                drop(o);
                put(data.cast::<u64>(), host_device_pointer(ptr as usize as *mut c_void)?)
            }
            (CU_POINTER_ATTRIBUTE_IS_MANAGED, Some((_, a)), _) => {
                // Managed allocations, and `__managed__` variables.
                put(data.cast::<u32>(), u32::from(a.kind == DevKind::Managed || crate::managed::contains(ptr, 1)))
            }
            (CU_POINTER_ATTRIBUTE_IS_MANAGED, None, Some(_)) => put(data.cast::<u32>(), 0),
            (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, Some((_, a)), _) => {
                put(data.cast::<i32>(), ctx::device_of(a.ctx).ok().and_then(crate::visible::program_ordinal).unwrap_or(0))
            }
            (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, Some((start, _)), _) => put(data.cast::<u64>(), start),
            (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, None, Some((start, _))) => put(data.cast::<u64>(), start as u64),
            (CU_POINTER_ATTRIBUTE_RANGE_SIZE, Some((_, a)), _) => put(data.cast::<usize>(), a.size as usize),
            (CU_POINTER_ATTRIBUTE_RANGE_SIZE, None, Some((_, len))) => put(data.cast::<usize>(), len),
            (CU_POINTER_ATTRIBUTE_MAPPED, Some(_), _) => put(data.cast::<u32>(), 1),
            (CU_POINTER_ATTRIBUTE_BUFFER_ID | CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, Some((_, a)), _) => {
                put(data.cast::<u64>(), a.buffer_id)
            }
            (CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, Some((start, _)), _) => put(data.cast::<u64>(), start),
            (CU_POINTER_ATTRIBUTE_MAPPING_SIZE, Some((_, a)), _) => put(data.cast::<usize>(), a.size as usize),
            (CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, Some((_, a)), _) => {
                let flags = if let DevKind::Mapped(access) = a.kind { access } else { READWRITE };
                put(data.cast::<u32>(), flags)
            }
            // `cuMemAlloc` memory has interprocess handles.
            (CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, Some((_, a)), _) => {
                put(data.cast::<u32>(), u32::from(a.kind == DevKind::Alloc))
            }
            // Shareable handles, GPUDirect RDMA and decompression are not
            // offered through pvgpu (see docs/compatibility.md).
            (
                CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES
                | CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE
                | CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE,
                Some(_),
                _,
            ) => put(data.cast::<u32>(), 0),
            (_, None, None) => Err(CuError::INVALID_VALUE),
            _ => {
                tracing::debug!(attribute = attribute.0, "cuPointerGetAttribute: attribute not answered");
                Err(CuError::NOT_SUPPORTED)
            }
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
pub unsafe extern "C" fn cuPointerGetAttributes(
    n: c_uint,
    attributes: *mut CUpointer_attribute,
    data: *mut *mut c_void,
    ptr: u64,
) -> CuResult {
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
