//! Graph memory: allocation and free nodes added by hand (or through the
//! generic interface), their parameters, and the device's graph-memory
//! attributes and trim. Allocations are pinned device memory of the
//! graph's device, reachable from that device only (as the driver makes
//! them without access descriptors). The backend offers graph memory
//! where it measures each session's device memory (process isolation).

use super::graph::{graph_id, node_id, nodes_in, put_node};
use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, Res, ctx, run};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_void};

/// The size of allocation-node parameters the backend can honour: pinned
/// memory on a device, readable and writable by that device only.
///
/// # Safety
/// `p.accessDescs` holds `p.accessDescCount` entries (or the count is 0).
unsafe fn alloc_size(p: &CUDA_MEM_ALLOC_NODE_PARAMS) -> Result<u64, CuError> {
    let props = &p.poolProps;
    if props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CuError::NOT_SUPPORTED);
    }
    if p.accessDescCount > 0 {
        if p.accessDescs.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: per the caller.
        let descs = unsafe { std::slice::from_raw_parts(p.accessDescs, p.accessDescCount) };
        let own = |d: &CUmemAccessDesc| {
            d.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE
                && d.location.id == props.location.id
                && d.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        };
        if !descs.iter().all(own) {
            return Err(CuError::NOT_SUPPORTED);
        }
    }
    if p.bytesize == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(p.bytesize as u64)
}

/// Adds an allocation node; writes its address into `p.dptr`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `p` is readable and
/// writable, its access descriptors readable.
pub(crate) unsafe fn add_alloc(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> Res {
    // SAFETY: per the caller.
    let p = unsafe { p.as_mut() }.ok_or(CuError::INVALID_VALUE)?;
    // SAFETY: per the caller.
    let size = unsafe { alloc_size(p) }?;
    // SAFETY: per the caller.
    let deps = unsafe { nodes_in(deps, n) }?;
    if ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let (node, dptr) = state::client()?.graph_add_mem_alloc_node(graph_id(g)?, &deps, size).map_err(state::cu)?;
    if let Some(h) = state::current_handle() {
        crate::state::objects().device.insert(dptr, DevAlloc::new(size, h, DevKind::Graph));
    }
    p.dptr = dptr;
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

/// Adds a free node of `dptr`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
pub(crate) unsafe fn add_free(ph: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, dptr: CUdeviceptr) -> Res {
    // SAFETY: per the caller.
    let deps = unsafe { nodes_in(deps, n) }?;
    if ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let node = state::client()?.graph_add_mem_free_node(graph_id(g)?, &deps, dptr).map_err(state::cu)?;
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

/// `cuGraphAddMemAllocNode`.
///
/// # Safety
/// As [`add_alloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemAllocNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddMemAllocNode", || unsafe { add_alloc(ph, g, deps, n, p) })
}

/// `cuGraphAddMemFreeNode`.
///
/// # Safety
/// As [`add_free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemFreeNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    dptr: CUdeviceptr,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddMemFreeNode", || unsafe { add_free(ph, g, deps, n, dptr) })
}

/// `cuGraphMemAllocNodeGetParams`: the size and address, pinned memory on
/// the current context's device.
///
/// # Safety
/// `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemAllocNodeGetParams(node: CUgraphNode, out: *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> CuResult {
    run("cuGraphMemAllocNodeGetParams", || {
        if out.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let (dptr, size) = state::client()?.mem_node_params(node_id(node)?).map_err(state::cu)?;
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let dev = state::current_handle().and_then(|h| ctx::device_of(h).ok()).unwrap_or(0);
        // SAFETY: plain integers, null pointers and zeroed reserved bytes.
        let mut p: CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
        p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: dev };
        p.bytesize = size as usize;
        p.dptr = dptr;
        // SAFETY: writable per the caller.
        unsafe { out.write(p) };
        Ok(())
    })
}

/// `cuGraphMemFreeNodeGetParams`.
///
/// # Safety
/// `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemFreeNodeGetParams(node: CUgraphNode, out: *mut CUdeviceptr) -> CuResult {
    run("cuGraphMemFreeNodeGetParams", || {
        if out.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let (dptr, size) = state::client()?.mem_node_params(node_id(node)?).map_err(state::cu)?;
        if size != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: writable per the caller.
        unsafe { out.write(dptr) };
        Ok(())
    })
}

/// The backend context for graph-memory calls on device `dev`: the
/// current one, which must be on that device.
fn device_ctx(dev: c_int) -> Result<pvgpu_frontend::Context, CuError> {
    let h = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    if ctx::device_of(h)? != dev {
        return Err(CuError::INVALID_CONTEXT);
    }
    ctx::backend(h)
}

/// `cuDeviceGetGraphMemAttribute`: a `u64`.
///
/// # Safety
/// `value` is writable for 8 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetGraphMemAttribute(dev: c_int, attr: CUgraphMem_attribute, value: *mut c_void) -> CuResult {
    run("cuDeviceGetGraphMemAttribute", || {
        if value.is_null() || attr.0 > 3 {
            return Err(CuError::INVALID_VALUE);
        }
        let v = state::client()?.graph_mem_attr(device_ctx(dev)?, attr.0, 0).map_err(state::cu)?;
        // SAFETY: writable per the caller.
        unsafe { value.cast::<u64>().write_unaligned(v) };
        Ok(())
    })
}

/// `cuDeviceSetGraphMemAttribute`: only a high-water mark, only to 0.
///
/// # Safety
/// `value` is readable for 8 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceSetGraphMemAttribute(dev: c_int, attr: CUgraphMem_attribute, value: *mut c_void) -> CuResult {
    run("cuDeviceSetGraphMemAttribute", || {
        if value.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: readable per the caller.
        if unsafe { value.cast::<u64>().read_unaligned() } != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        state::client()?.graph_mem_attr(device_ctx(dev)?, attr.0, 1).map(drop).map_err(state::cu)
    })
}

/// `cuDeviceGraphMemTrim`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGraphMemTrim(dev: c_int) -> CuResult {
    run("cuDeviceGraphMemTrim", || state::client()?.graph_mem_attr(device_ctx(dev)?, 0, 2).map(drop).map_err(state::cu))
}
