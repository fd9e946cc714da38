//! Graph memory on the GPU: allocation nodes of the context's device
//! (pinned device memory, no other device's access), their parameters,
//! and the device's graph-memory attributes and trim. The driver maps the
//! memory when a graph runs; the session counts it against its quota.

use super::CudaContext;
use super::driver::{entry, ok};
use super::graph::{CudaGraph, CudaNode};
use crate::exec::CuRes;
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::ptr;

/// Allocation-node parameters of `size` bytes on device `dev`.
fn alloc_params(dev: i32, size: u64) -> CUDA_MEM_ALLOC_NODE_PARAMS {
    // SAFETY: plain integers, null pointers and zeroed reserved bytes: zero
    // is "none" or "default" for each.
    let mut p: CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: dev };
    p.bytesize = size as usize;
    p
}

impl CudaContext {
    pub(super) fn add_mem_alloc(&mut self, g: CudaGraph, deps: &[CUgraphNode], size: u64) -> CuRes<(CudaNode, u64)> {
        let mut p = alloc_params(self.dev, size);
        let mut node = ptr::null_mut();
        // SAFETY: a live graph, `deps.len()` of its nodes, parameters the
        // driver reads and writes the address into.
        ok(unsafe { entry(self.drv.cuGraphAddMemAllocNode)?(&mut node, g.0, deps.as_ptr(), deps.len(), &mut p) })?;
        Ok((CudaNode(node), p.dptr))
    }

    pub(super) fn mem_node(&mut self, n: CudaNode) -> CuRes<(u64, u64)> {
        let mut kind = CUgraphNodeType(0);
        // SAFETY: a live node of this session; a valid out-pointer.
        ok(unsafe { entry(self.drv.cuGraphNodeGetType)?(n.0, &mut kind) })?;
        match kind {
            CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                let mut p = alloc_params(self.dev, 0);
                // SAFETY: a live allocation node; valid out-parameters.
                ok(unsafe { entry(self.drv.cuGraphMemAllocNodeGetParams)?(n.0, &mut p) })?;
                Ok((p.dptr, p.bytesize as u64))
            }
            CU_GRAPH_NODE_TYPE_MEM_FREE => {
                let mut d = 0;
                // SAFETY: a live free node; a valid out-pointer.
                ok(unsafe { entry(self.drv.cuGraphMemFreeNodeGetParams)?(n.0, &mut d) })?;
                Ok((d, 0))
            }
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    pub(super) fn graph_mem_op(&mut self, attr: u32, op: u32) -> CuRes<u64> {
        let a = CUgraphMem_attribute(attr);
        let mut v = 0u64;
        match op {
            // SAFETY: a device of this process; a u64 out-value, as the
            // driver writes for every graph-memory attribute.
            0 => ok(unsafe { entry(self.drv.cuDeviceGetGraphMemAttribute)?(self.dev, a, (&mut v as *mut u64).cast()) })?,
            // SAFETY: as above; only the high-water marks may be reset, to 0.
            1 => ok(unsafe { entry(self.drv.cuDeviceSetGraphMemAttribute)?(self.dev, a, (&mut v as *mut u64).cast()) })?,
            // SAFETY: a device of this process.
            _ => ok(unsafe { entry(self.drv.cuDeviceGraphMemTrim)?(self.dev) })?,
        }
        Ok(v)
    }
}
