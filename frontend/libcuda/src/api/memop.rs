//! Stream memory operations: `cuStreamWaitValue32/64`,
//! `cuStreamWriteValue32/64` (and their `_v2` names), `cuStreamBatchMemOp`,
//! and batch memory-operation nodes of graphs (`cuGraphAddBatchMemOpNode`,
//! `cuGraphAddNode`, their operations read back and set in a graph or an
//! executable graph). The backend's driver runs them on the device: a wait
//! holds the stream until a value in device memory (or page-locked memory
//! the device reaches) meets its condition; the backend checks every
//! address against the session's memory first.

use super::graph::{exec_id, graph_id, node_id, nodes_in, put_node};
use crate::state::{self, Res, handle, id, put, run, stream};
use pvgpu_frontend::NodeParams;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{MAX_MEM_OPS, MemOp};
use pvgpu_ring::{CuError, CuResult};
use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};
use std::sync::Mutex;

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
    all.iter().map(|u| MemOp::from_driver(u).ok_or(CuError::INVALID_VALUE)).collect()
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
                run(stringify!($name), || submit(s.cast(), &[MemOp::new($kind, addr, value as u64, flags)]))
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

/// Operation arrays handed out by `cuGraphBatchMemOpNodeGetParams`, by node
/// id: the program holds their address until it reads the node again (the
/// driver's point into the node's own copy).
static KEPT: Mutex<BTreeMap<u64, Box<[CUstreamBatchMemOpParams]>>> = Mutex::new(BTreeMap::new());

/// Node `n` was destroyed: the operations kept for it go.
pub(crate) fn node_gone(n: u64) {
    KEPT.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
}

/// `cuGraphBatchMemOpNodeGetParams`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphBatchMemOpNodeGetParams(node: CUgraphNode, out: *mut CUDA_BATCH_MEM_OP_NODE_PARAMS) -> CuResult {
    run("cuGraphBatchMemOpNodeGetParams", || {
        let n = node_id(node)?;
        let NodeParams::MemOps { ctx, ops } = state::client()?.graph_node_params(n).map_err(state::cu)? else {
            return Err(CuError::INVALID_VALUE);
        };
        let mut array: Box<[CUstreamBatchMemOpParams]> = ops.iter().map(MemOp::to_driver).collect();
        let p = CUDA_BATCH_MEM_OP_NODE_PARAMS {
            ctx: handle(state::ctx::handle_of(ctx)).cast(),
            count: array.len() as c_uint,
            paramArray: array.as_mut_ptr(),
            flags: 0,
        };
        KEPT.lock().unwrap_or_else(|p| p.into_inner()).insert(n.0, array);
        // SAFETY: writable per the API.
        unsafe { put(out, p) }
    })
}

/// The members of both forms of a batch memory-operation node's
/// parameters.
macro_rules! node_set {
    ($e:expr, $node:expr, $p:expr) => {{
        let p = $p;
        super::memop::set_node($e, $node, p.ctx, p.count, p.paramArray, p.flags)
    }};
}
pub(crate) use node_set;

/// Sets a batch memory-operation node's operations (`count` at `array`,
/// in context `ctx`), in its graph or in executable graph `e`.
///
/// # Safety
/// `array` holds `count` entries.
pub(crate) unsafe fn set_node(
    e: Option<CUgraphExec>,
    node: CUgraphNode,
    ctx: CUcontext,
    count: c_uint,
    array: *const CUstreamBatchMemOpParams,
    flags: c_uint,
) -> Res {
    if flags != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: per the caller.
    let ops = unsafe { from_params(array, count as usize) }?;
    if !well_formed(&ops) {
        return Err(CuError::INVALID_VALUE);
    }
    let e = e.map(exec_id).transpose()?;
    let ctx = state::ctx::backend(state::ctx::or_current(id(ctx))?)?;
    state::client()?.graph_mem_op_node_set(e, node_id(node)?, ctx, &ops).map_err(state::cu)
}

/// `cuGraphBatchMemOpNodeSetParams`.
///
/// # Safety
/// `p` must be readable, its array holding `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphBatchMemOpNodeSetParams(node: CUgraphNode, p: *const CUDA_BATCH_MEM_OP_NODE_PARAMS) -> CuResult {
    run("cuGraphBatchMemOpNodeSetParams", || {
        // SAFETY: readable per the API.
        let p = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: per the API.
        unsafe { node_set!(None, node, p) }
    })
}

/// `cuGraphExecBatchMemOpNodeSetParams`.
///
/// # Safety
/// As `cuGraphBatchMemOpNodeSetParams`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecBatchMemOpNodeSetParams(
    e: CUgraphExec,
    node: CUgraphNode,
    p: *const CUDA_BATCH_MEM_OP_NODE_PARAMS,
) -> CuResult {
    run("cuGraphExecBatchMemOpNodeSetParams", || {
        // SAFETY: readable per the API.
        let p = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: per the API.
        unsafe { node_set!(Some(e), node, p) }
    })
}
