//! Stream memory operations (`cuStreamWaitValue32` and kin,
//! `cuStreamBatchMemOp`, batch memory-operation nodes) checked before the
//! driver sees them: known flags, aligned values, and each value inside the
//! session's own device memory (page-locked memory the device reaches
//! included), as a memset's range is checked.

use super::Session;
use crate::exec::{CuRes, Executor, MemOp};
use pvgpu_ring::CuError;
use pvgpu_ring::proto;

/// The operations of a request on `stream`, checked, and the context
/// their values lie in (none if none names a value).
pub(super) fn checked<E: Executor>(s: &mut Session<E>, ops: &[proto::MemOp], stream: u64) -> CuRes<(Option<u64>, Vec<MemOp>)> {
    let mut ranges = Vec::new();
    let mut out = Vec::with_capacity(ops.len());
    for o in ops {
        if !o.well_formed() {
            return Err(CuError::INVALID_VALUE);
        }
        if let Some(n) = o.value_size() {
            ranges.push((o.addr.get(), n));
        }
        out.push(MemOp { kind: o.kind.get(), flags: o.flags.get(), addr: o.addr.get(), value: o.value.get() });
    }
    let ctx = if ranges.is_empty() { None } else { Some(s.device_ranges(&ranges, stream)?) };
    Ok((ctx, out))
}
