//! Stream memory operations and batch memory-operation nodes on the GPU:
//! each operation in the driver's union, passed to `cuStreamBatchMemOp`
//! or `cuGraphAddBatchMemOpNode`, set in a node, or read back from one.

use super::driver::{entry, ok};
use super::graph::{CudaGraph, CudaGraphExec, CudaNode};
use super::{CudaContext, CudaStream, raw_stream};
use crate::exec::{CuRes, MemOp};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::ptr;

/// The driver's form of `ops` (the wire's conversion, one place for the
/// library and the backend).
fn params(ops: &[MemOp]) -> Vec<CUstreamBatchMemOpParams> {
    ops.iter().map(|o| pvgpu_ring::proto::MemOp::new(CUstreamBatchMemOpType(o.kind), o.addr, o.value, o.flags).to_driver()).collect()
}

/// An operation of the driver's array, as the session names it.
fn op_of(p: &CUstreamBatchMemOpParams) -> Option<MemOp> {
    let o = pvgpu_ring::proto::MemOp::from_driver(p)?;
    Some(MemOp { kind: o.kind.get(), flags: o.flags.get(), addr: o.addr.get(), value: o.value.get() })
}

impl CudaContext {
    pub(super) fn mem_ops(&mut self, ops: &[MemOp], s: Option<CudaStream>) -> CuRes<()> {
        let mut p = params(ops);
        // SAFETY: a stream of this context and `p.len()` operations whose
        // addresses the session checked.
        ok(unsafe { entry(self.drv.cuStreamBatchMemOp_v2)?(raw_stream(s).cast(), p.len() as u32, p.as_mut_ptr(), 0) })
    }

    pub(super) fn add_mem_op_node(&mut self, g: CudaGraph, deps: &[CUgraphNode], ops: &[MemOp]) -> CuRes<CudaNode> {
        let mut p = params(ops);
        let node_params =
            CUDA_BATCH_MEM_OP_NODE_PARAMS { ctx: self.raw.cast(), count: p.len() as u32, paramArray: p.as_mut_ptr(), flags: 0 };
        let mut node = ptr::null_mut();
        // SAFETY: a live graph, `deps.len()` of its nodes, operations the
        // driver copies when it makes the node.
        ok(unsafe { entry(self.drv.cuGraphAddBatchMemOpNode)?(&mut node, g.0, deps.as_ptr(), deps.len(), &node_params) })?;
        Ok(CudaNode(node))
    }

    /// The operations of batch memory-operation node `n`.
    pub(super) fn mem_op_node_get(&mut self, n: CudaNode) -> CuRes<Vec<MemOp>> {
        // SAFETY: plain integers and a null pointer.
        let mut p: CUDA_BATCH_MEM_OP_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: a live node (the driver checks its type); a valid
        // out-pointer.
        ok(unsafe { entry(self.drv.cuGraphBatchMemOpNodeGetParams)?(n.0, &mut p) })?;
        if p.count as usize > pvgpu_ring::proto::MAX_MEM_OPS || (p.count > 0 && p.paramArray.is_null()) {
            return Err(CuError::NOT_SUPPORTED);
        }
        if p.count == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the driver's array of `count` operations, alive while the
        // node is unchanged (this runs on the session's one thread).
        let all = unsafe { std::slice::from_raw_parts(p.paramArray, p.count as usize) };
        all.iter().map(op_of).collect::<Option<Vec<_>>>().ok_or(CuError::NOT_SUPPORTED)
    }

    /// Sets the operations of batch memory-operation node `n`, in its
    /// graph or in executable graph `e`.
    pub(super) fn mem_op_node_set(&mut self, e: Option<CudaGraphExec>, n: CudaNode, ops: &[MemOp]) -> CuRes<()> {
        let mut p = params(ops);
        let node_params =
            CUDA_BATCH_MEM_OP_NODE_PARAMS { ctx: self.raw.cast(), count: p.len() as u32, paramArray: p.as_mut_ptr(), flags: 0 };
        match e {
            // SAFETY: a live node; operations the session checked, which
            // the driver copies.
            None => ok(unsafe { entry(self.drv.cuGraphBatchMemOpNodeSetParams)?(n.0, &node_params) }),
            // SAFETY: as above, and a live executable graph of the node's
            // graph.
            Some(e) => ok(unsafe { entry(self.drv.cuGraphExecBatchMemOpNodeSetParams)?(e.0, n.0, &node_params) }),
        }
    }
}
