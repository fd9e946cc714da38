//! Stream memory operations: `cuStreamWaitValue32/64`,
//! `cuStreamWriteValue32/64` (and their `_v2` names), `cuStreamBatchMemOp`,
//! and batch memory-operation nodes of graphs (`cuGraphAddBatchMemOpNode`,
//! `cuGraphAddNode`). The backend's driver runs them on the device: a wait
//! holds the stream until a value in device memory (or page-locked memory
//! the device reaches) meets its condition; the backend checks every
//! address against the session's memory first.

use super::graph::{graph_id, nodes_in, put_node};
use crate::state::{self, Res, id, run, stream};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{MAX_MEM_OPS, MemOp};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_uint, c_void};

fn op(kind: CUstreamBatchMemOpType, addr: u64, value: u64, flags: u32) -> MemOp {
    MemOp { kind: kind.0.into(), flags: flags.into(), addr: addr.into(), value: value.into() }
}

/// Whether every operation is well formed ([`MemOp::well_formed`]): the
/// driver refuses the others at once; a posted request would answer only
/// at the next call that waits.
fn well_formed(ops: &[MemOp]) -> bool {
    ops.iter().all(MemOp::well_formed)
}

/// Sends `ops` on stream `s`, after the host functions before them.
fn submit(s: *mut c_void, ops: &[MemOp]) -> Res {
    if !well_formed(ops) {
        return Err(CuError::INVALID_VALUE);
    }
    let s = stream(s);
    crate::callback::gate(s);
    state::client()?.stream_mem_ops(ops, s).map_err(state::cu)
}

/// The operations of a driver array.
///
/// # Safety
/// `p` holds `n` entries (or `n` is 0).
unsafe fn from_params(p: *const CUstreamBatchMemOpParams, n: usize) -> Result<Vec<MemOp>, CuError> {
    if n > MAX_MEM_OPS || (n > 0 && p.is_null()) {
        return Err(CuError::INVALID_VALUE);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: `n` entries, per the caller.
    let all = unsafe { std::slice::from_raw_parts(p, n) };
    all.iter()
        .map(|u| {
            // SAFETY: `operation` heads every member (each union read
            // below reads the member it names; all are plain integers).
            let kind = unsafe { u.operation };
            match kind {
                CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WAIT_VALUE_64 => {
                    // SAFETY: as above.
                    let w = unsafe { u.waitValue };
                    // SAFETY: as above.
                    let v = unsafe { if kind == CU_STREAM_MEM_OP_WAIT_VALUE_32 { w.anon2.value as u64 } else { w.anon2.value64 } };
                    Ok(op(kind, w.address, v, w.flags))
                }
                CU_STREAM_MEM_OP_WRITE_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => {
                    // SAFETY: as above.
                    let w = unsafe { u.writeValue };
                    // SAFETY: as above.
                    let v = unsafe { if kind == CU_STREAM_MEM_OP_WRITE_VALUE_32 { w.anon2.value as u64 } else { w.anon2.value64 } };
                    Ok(op(kind, w.address, v, w.flags))
                }
                // SAFETY: as above.
                CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES => Ok(op(kind, 0, 0, unsafe { u.flushRemoteWrites.flags })),
                // SAFETY: as above.
                CU_STREAM_MEM_OP_BARRIER => Ok(op(kind, 0, 0, unsafe { u.memoryBarrier.flags })),
                _ => Err(CuError::INVALID_VALUE),
            }
        })
        .collect()
}

/// Adds a batch memory-operation node of `count` operations at `p`, in
/// context `ctx` (null: the current one).
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `p` holds `count` entries.
pub(crate) unsafe fn add_node(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    ctx: CUcontext,
    count: c_uint,
    p: *const CUstreamBatchMemOpParams,
) -> Res {
    // SAFETY: per the caller.
    let ops = unsafe { from_params(p, count as usize) }?;
    // SAFETY: per the caller.
    let deps = unsafe { nodes_in(deps, n) }?;
    let ctx = state::ctx::backend(state::ctx::or_current(id(ctx))?)?;
    let node = state::client()?.graph_add_mem_op_node(graph_id(g)?, &deps, ctx, &ops).map_err(state::cu)?;
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

macro_rules! single_ops {
    ($($name:ident($kind:ident, $t:ty);)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`.")]
            #[unsafe(no_mangle)]
            pub extern "C" fn $name(s: CUstream, addr: CUdeviceptr, value: $t, flags: c_uint) -> CuResult {
                run(stringify!($name), || submit(s.cast(), &[op($kind, addr, value as u64, flags)]))
            }
        )*
    };
}

single_ops! {
    cuStreamWaitValue32(CU_STREAM_MEM_OP_WAIT_VALUE_32, cuuint32_t);
    cuStreamWaitValue32_v2(CU_STREAM_MEM_OP_WAIT_VALUE_32, cuuint32_t);
    cuStreamWaitValue64(CU_STREAM_MEM_OP_WAIT_VALUE_64, cuuint64_t);
    cuStreamWaitValue64_v2(CU_STREAM_MEM_OP_WAIT_VALUE_64, cuuint64_t);
    cuStreamWriteValue32(CU_STREAM_MEM_OP_WRITE_VALUE_32, cuuint32_t);
    cuStreamWriteValue32_v2(CU_STREAM_MEM_OP_WRITE_VALUE_32, cuuint32_t);
    cuStreamWriteValue64(CU_STREAM_MEM_OP_WRITE_VALUE_64, cuuint64_t);
    cuStreamWriteValue64_v2(CU_STREAM_MEM_OP_WRITE_VALUE_64, cuuint64_t);
}

/// `cuStreamBatchMemOp_v2`.
///
/// # Safety
/// `p` holds `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBatchMemOp_v2(s: CUstream, count: c_uint, p: *mut CUstreamBatchMemOpParams, flags: c_uint) -> CuResult {
    run("cuStreamBatchMemOp_v2", || {
        if flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: per the caller.
        let ops = unsafe { from_params(p, count as usize) }?;
        submit(s.cast(), &ops)
    })
}

/// `cuStreamBatchMemOp`.
///
/// # Safety
/// As `cuStreamBatchMemOp_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBatchMemOp(s: CUstream, count: c_uint, p: *mut CUstreamBatchMemOpParams, flags: c_uint) -> CuResult {
    // SAFETY: per the caller.
    unsafe { cuStreamBatchMemOp_v2(s, count, p, flags) }
}

/// `cuGraphAddBatchMemOpNode`.
///
/// # Safety
/// As the driver API requires of each argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddBatchMemOpNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_BATCH_MEM_OP_NODE_PARAMS,
) -> CuResult {
    run("cuGraphAddBatchMemOpNode", || {
        // SAFETY: readable per the API.
        let p = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        if p.flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: per the API.
        unsafe { add_node(ph, g, deps, n, p.ctx, p.count, p.paramArray) }
    })
}
