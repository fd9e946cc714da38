//! Conditional nodes on the GPU: handles made for a graph, and if, while
//! and switch nodes whose body graphs the driver makes. Kernels set the
//! condition through the handle's value (`cudaGraphSetConditional`, a
//! function the driver links into modules that call it).

use super::CudaContext;
use super::driver::{entry, ok};
use super::graph::{CudaGraph, CudaNode};
use crate::exec::CuRes;
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::ptr;

impl CudaContext {
    pub(super) fn cond_handle(&mut self, g: CudaGraph, default: u32, flags: u32) -> CuRes<u64> {
        let mut h: CUgraphConditionalHandle = 0;
        // SAFETY: a live graph of this context; a valid out-pointer; flags
        // checked by the decoder.
        ok(unsafe { entry(self.drv.cuGraphConditionalHandleCreate)?(&mut h, g.0, self.raw.cast(), default, flags) })?;
        Ok(h)
    }

    pub(super) fn add_conditional(
        &mut self,
        g: CudaGraph,
        deps: &[CUgraphNode],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> CuRes<(CudaNode, Vec<CudaGraph>)> {
        // SAFETY: plain integers and null pointers: zero is "none" for each.
        let mut p: CUgraphNodeParams = unsafe { std::mem::zeroed() };
        p.type_ = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        p.anon2.conditional = CUDA_CONDITIONAL_NODE_PARAMS {
            handle,
            type_: CUgraphConditionalNodeType(kind),
            size,
            phGraph_out: ptr::null_mut(),
            ctx: self.raw.cast(),
        };
        let mut node = ptr::null_mut();
        // SAFETY: a live graph, `deps.len()` of its nodes; parameters the
        // driver reads and writes its array of body graphs into.
        ok(unsafe { entry(self.drv.cuGraphAddNode)?(&mut node, g.0, deps.as_ptr(), deps.len(), &mut p) })?;
        // SAFETY: the member the driver just filled in.
        let out = unsafe { p.anon2.conditional.phGraph_out };
        if out.is_null() {
            return Err(CuError::UNKNOWN);
        }
        // SAFETY: the driver's array of `size` body graphs, which lives as
        // long as the node.
        let bodies = unsafe { std::slice::from_raw_parts(out, size as usize) };
        Ok((CudaNode(node), bodies.iter().map(|&b| CudaGraph(b)).collect()))
    }
}
