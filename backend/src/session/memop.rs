//! Stream memory operations (`cuStreamWaitValue32` and kin,
//! `cuStreamBatchMemOp`, batch memory-operation nodes) checked before the
//! driver sees them: known flags, aligned values, and each value inside the
//! session's own device memory (page-locked memory the device reaches
//! included), as a memset's range is checked.

use super::Session;
use crate::exec::{CuRes, Executor, MemOp};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto;

/// The bytes of the value an operation of `kind` waits for or writes.
fn value_size(kind: CUstreamBatchMemOpType) -> Option<u64> {
    match kind {
        CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_32 => Some(4),
        CU_STREAM_MEM_OP_WAIT_VALUE_64 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => Some(8),
        _ => None,
    }
}

/// Whether `flags` are ones an operation of `kind` takes.
fn flags_known(kind: CUstreamBatchMemOpType, flags: u32) -> bool {
    match kind {
        CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WAIT_VALUE_64 => flags & !(3 | CU_STREAM_WAIT_VALUE_FLUSH.0) == 0,
        // `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER` is refused by the `_v2`
        // API the backend calls (measured on the H100).
        CU_STREAM_MEM_OP_WRITE_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => flags == 0,
        CU_STREAM_MEM_OP_BARRIER => flags <= CU_STREAM_MEMORY_BARRIER_TYPE_GPU.0,
        CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES => flags == 0,
        _ => false,
    }
}

/// The operations of a request on `stream`, checked, and the context
/// their values lie in (none if none names a value).
pub(super) fn checked<E: Executor>(s: &mut Session<E>, ops: &[proto::MemOp], stream: u64) -> CuRes<(Option<u64>, Vec<MemOp>)> {
    let mut ranges = Vec::new();
    let mut out = Vec::with_capacity(ops.len());
    for o in ops {
        let op = MemOp { kind: o.kind.get(), flags: o.flags.get(), addr: o.addr.get(), value: o.value.get() };
        let kind = CUstreamBatchMemOpType(op.kind);
        if !flags_known(kind, op.flags) {
            return Err(CuError::INVALID_VALUE);
        }
        if let Some(n) = value_size(kind) {
            if op.addr % n != 0 {
                return Err(CuError::INVALID_VALUE);
            }
            ranges.push((op.addr, n));
        }
        out.push(op);
    }
    let ctx = if ranges.is_empty() { None } else { Some(s.device_ranges(&ranges, stream)?) };
    Ok((ctx, out))
}
