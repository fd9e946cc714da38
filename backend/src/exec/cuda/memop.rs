//! Stream memory operations and batch memory-operation nodes on the GPU:
//! each operation in the driver's union, passed to `cuStreamBatchMemOp`
//! or `cuGraphAddBatchMemOpNode`.

use super::driver::{entry, ok};
use super::graph::{CudaGraph, CudaNode};
use super::{CudaContext, CudaStream, raw_stream};
use crate::exec::{CuRes, MemOp};
use pvgpu_ring::cuda::api::*;
use std::ptr;

/// The driver's form of `ops`.
fn params(ops: &[MemOp]) -> Vec<CUstreamBatchMemOpParams> {
    ops.iter()
        .map(|o| {
            // SAFETY: plain integers: zero is "none" for each.
            let mut p: CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
            let operation = CUstreamBatchMemOpType(o.kind);
            match operation {
                CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WAIT_VALUE_64 => {
                    // SAFETY: plain integers, as above.
                    let mut w: CUstreamMemOpWaitValueParams_st = unsafe { std::mem::zeroed() };
                    (w.operation, w.address, w.flags) = (operation, o.addr, o.flags);
                    w.anon2.value64 = o.value;
                    p.waitValue = w;
                }
                CU_STREAM_MEM_OP_WRITE_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => {
                    // SAFETY: plain integers, as above.
                    let mut w: CUstreamMemOpWriteValueParams_st = unsafe { std::mem::zeroed() };
                    (w.operation, w.address, w.flags) = (operation, o.addr, o.flags);
                    w.anon2.value64 = o.value;
                    p.writeValue = w;
                }
                CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES => {
                    p.flushRemoteWrites = CUstreamMemOpFlushRemoteWritesParams_st { operation, flags: o.flags };
                }
                _ => p.memoryBarrier = CUstreamMemOpMemoryBarrierParams_st { operation, flags: o.flags },
            }
            p
        })
        .collect()
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
}
