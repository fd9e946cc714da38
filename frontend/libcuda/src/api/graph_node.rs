//! The generic node interface (`cuGraphAddNode`, `cuGraphExecNodeSetParams`,
//! one parameter union for every node type), the per-type setters of
//! executable graphs' nodes (memset, copy, child graph), enabling and
//! disabling nodes, and capture into an existing graph. Kernel, memset,
//! copy, empty, child-graph, event, host, memory, conditional and batch
//! memory-operation nodes are supported; external-semaphore nodes are not
//! (`CUDA_ERROR_NOT_SUPPORTED`: a guest has no external semaphores).

use super::graph::{edge_data, nodes_in, put_node};
use super::graph::{exec_id, graph_id, node_id};
use super::graph_add::{add_child, add_simple, memset_head};
use super::graph_cond;
use super::graph_copy::add_memcpy;
use super::graph_host;
use super::graph_kernel::{self, Kernel};
use super::graph_mem;
use crate::state::{self, Res, id, run};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};

/// Adds the node `p` describes.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `p` is readable, with the
/// pointers of its member readable as the driver API requires.
unsafe fn add(ph: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, p: *mut CUgraphNodeParams) -> Res {
    if p.is_null() || ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let p_mut = p;
    // SAFETY: readable per the caller.
    let p = unsafe { &*p };
    // SAFETY (each union read below): the member `type_` names.
    match p.type_ {
        // SAFETY: per the caller.
        CU_GRAPH_NODE_TYPE_KERNEL => unsafe { graph_kernel::add(ph, g, deps, n, Kernel::v3(&p.anon2.kernel)) },
        CU_GRAPH_NODE_TYPE_MEMSET => {
            // SAFETY: the memset member.
            let m = unsafe { p.anon2.memset };
            let head = memset_head(m.dst, m.pitch, m.value, m.elementSize, m.width, m.height, m.ctx)?;
            // SAFETY: per the caller.
            let deps = unsafe { nodes_in(deps, n) }?;
            let node = state::client()?.graph_add_memset_node(graph_id(g)?, &deps, head).map_err(state::cu)?;
            // SAFETY: per the caller.
            unsafe { put_node(ph, node) }
        }
        CU_GRAPH_NODE_TYPE_MEMCPY => {
            // SAFETY: the memcpy member.
            let c = unsafe { &p.anon2.memcpy };
            // SAFETY: per the caller.
            let deps = unsafe { nodes_in(deps, n) }?;
            let node = add_memcpy(g, &deps, &c.copyParams, c.copyCtx)?;
            // SAFETY: per the caller.
            unsafe { put_node(ph, node) }
        }
        // SAFETY: per the caller.
        CU_GRAPH_NODE_TYPE_EMPTY => unsafe { add_simple(ph, g, deps, n, CU_GRAPH_NODE_TYPE_EMPTY, 0) },
        CU_GRAPH_NODE_TYPE_GRAPH => {
            // SAFETY: the child-graph member.
            let c = unsafe { p.anon2.graph };
            if c.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE {
                return Err(CuError::NOT_SUPPORTED);
            }
            // SAFETY: per the caller.
            unsafe { add_child(ph, g, deps, n, c.graph) }
        }
        CU_GRAPH_NODE_TYPE_EVENT_RECORD => {
            // SAFETY: the event-record member.
            let e = unsafe { p.anon2.eventRecord.event };
            // SAFETY: per the caller.
            unsafe { add_simple(ph, g, deps, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, id(e)) }
        }
        CU_GRAPH_NODE_TYPE_WAIT_EVENT => {
            // SAFETY: the event-wait member.
            let e = unsafe { p.anon2.eventWait.event };
            // SAFETY: per the caller.
            unsafe { add_simple(ph, g, deps, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, id(e)) }
        }
        CU_GRAPH_NODE_TYPE_HOST => {
            // SAFETY: the host member.
            let f = graph_host::from_v2(unsafe { &p.anon2.host })?;
            // SAFETY: per the caller.
            unsafe { graph_host::add(ph, g, deps, n, f) }
        }
        CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
            // SAFETY: the allocation member (the same layout as
            // `CUDA_MEM_ALLOC_NODE_PARAMS`), writable per the caller.
            let a = unsafe { std::ptr::addr_of_mut!((*p_mut).anon2.alloc) }.cast::<CUDA_MEM_ALLOC_NODE_PARAMS>();
            // SAFETY: per the caller.
            unsafe { graph_mem::add_alloc(ph, g, deps, n, a) }
        }
        CU_GRAPH_NODE_TYPE_CONDITIONAL => {
            // SAFETY: the conditional member, writable per the caller.
            let c = unsafe { std::ptr::addr_of_mut!((*p_mut).anon2.conditional) };
            // SAFETY: per the caller.
            unsafe { graph_cond::add(ph, g, deps, n, c) }
        }
        CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => {
            // SAFETY: the batch memory-operation member.
            let m = unsafe { p.anon2.memOp };
            if m.flags != 0 {
                return Err(CuError::INVALID_VALUE);
            }
            // SAFETY: per the caller.
            unsafe { super::memop::add_node(ph, g, deps, n, m.ctx, m.count, m.paramArray) }
        }
        CU_GRAPH_NODE_TYPE_MEM_FREE => {
            // SAFETY: the free member.
            let dptr = unsafe { p.anon2.free.dptr };
            // SAFETY: per the caller.
            unsafe { graph_mem::add_free(ph, g, deps, n, dptr) }
        }
        other => {
            tracing::debug!(kind = ?other, "graph node type not supported");
            Err(CuError::NOT_SUPPORTED)
        }
    }
}

/// `cuGraphAddNode`.
///
/// # Safety
/// As the driver API requires of each argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *mut CUgraphNodeParams,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddNode", || unsafe { add(ph, g, deps, n, p) })
}

/// `cuGraphAddNode_v2` (default edges only).
///
/// # Safety
/// As the driver API requires of each argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddNode_v2(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    data: *const CUgraphEdgeData,
    n: usize,
    p: *mut CUgraphNodeParams,
) -> CuResult {
    run("cuGraphAddNode_v2", || {
        // SAFETY: `n` entries or null, per the caller.
        unsafe { edge_data(data, n) }?;
        // SAFETY: per the caller.
        unsafe { add(ph, g, deps, n, p) }
    })
}

/// Sets a memset node of an executable graph.
fn exec_memset(e: CUgraphExec, node: CUgraphNode, head: pvgpu_ring::proto::GraphMemsetHead) -> Res {
    state::client()?.graph_exec_memset_set(exec_id(e)?, node_id(node)?, head).map_err(state::cu)
}

/// `cuGraphExecMemsetNodeSetParams`.
///
/// # Safety
/// `p` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecMemsetNodeSetParams(
    e: CUgraphExec,
    node: CUgraphNode,
    p: *const CUDA_MEMSET_NODE_PARAMS,
    ctx: CUcontext,
) -> CuResult {
    run("cuGraphExecMemsetNodeSetParams", || {
        if p.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: readable per the API.
        let m = unsafe { p.read_unaligned() };
        exec_memset(e, node, memset_head(m.dst, m.pitch, m.value, m.elementSize, m.width, m.height, ctx)?)
    })
}

/// `cuGraphExecChildGraphNodeSetParams`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphExecChildGraphNodeSetParams(e: CUgraphExec, node: CUgraphNode, child: CUgraph) -> CuResult {
    run("cuGraphExecChildGraphNodeSetParams", || exec_child_set(e, node, child))
}

/// Sets a child-graph node of an executable graph from `child`, whose
/// references to user objects the node then owns copies of.
fn exec_child_set(e: CUgraphExec, node: CUgraphNode, child: CUgraph) -> Res {
    let (exec, node, child) = (exec_id(e)?, node_id(node)?, graph_id(child)?);
    state::client()?.graph_exec_child_set(exec, node, child).map_err(state::cu)?;
    super::user_object::exec_child_set(exec.0, node.0, child.0);
    Ok(())
}

/// `cuGraphNodeSetEnabled`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphNodeSetEnabled(e: CUgraphExec, node: CUgraphNode, enabled: std::ffi::c_uint) -> CuResult {
    run("cuGraphNodeSetEnabled", || state::client()?.graph_node_enable(exec_id(e)?, node_id(node)?, enabled != 0).map_err(state::cu))
}

/// `cuGraphExecNodeSetParams`: kernel, memset, copy, child-graph, host,
/// event and batch memory-operation nodes.
///
/// # Safety
/// `p` must be readable, with the pointers of its member readable as the
/// driver API requires.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecNodeSetParams(e: CUgraphExec, node: CUgraphNode, p: *mut CUgraphNodeParams) -> CuResult {
    run("cuGraphExecNodeSetParams", || {
        if p.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: readable per the API.
        let p = unsafe { &*p };
        // SAFETY (each union read below): the member `type_` names.
        match p.type_ {
            // SAFETY: per the caller.
            CU_GRAPH_NODE_TYPE_KERNEL => unsafe { graph_kernel::exec_set(e, node, Kernel::v3(&p.anon2.kernel)) },
            CU_GRAPH_NODE_TYPE_MEMSET => {
                // SAFETY: the memset member.
                let m = unsafe { p.anon2.memset };
                exec_memset(e, node, memset_head(m.dst, m.pitch, m.value, m.elementSize, m.width, m.height, m.ctx)?)
            }
            CU_GRAPH_NODE_TYPE_MEMCPY => {
                // SAFETY: the memcpy member.
                let c = unsafe { &p.anon2.memcpy };
                super::graph_copy::set_memcpy(Some(e), node, &c.copyParams, c.copyCtx)
            }
            // SAFETY: the child-graph member.
            CU_GRAPH_NODE_TYPE_GRAPH => exec_child_set(e, node, unsafe { p.anon2.graph.graph }),
            // SAFETY: the host member.
            CU_GRAPH_NODE_TYPE_HOST => graph_host::set(Some(e), node, graph_host::from_v2(unsafe { &p.anon2.host })?),
            // SAFETY: readable per the API.
            CU_GRAPH_NODE_TYPE_EVENT_RECORD | CU_GRAPH_NODE_TYPE_WAIT_EVENT | CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => unsafe {
                super::graph_params::exec_set_other(e, node, p)
            },
            _ => Err(CuError::NOT_SUPPORTED),
        }
    })
}

/// `cuStreamUpdateCaptureDependencies`: `flags` is
/// `CU_STREAM_ADD_CAPTURE_DEPENDENCIES` or `CU_STREAM_SET_CAPTURE_DEPENDENCIES`.
///
/// # Safety
/// `deps` holds `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamUpdateCaptureDependencies(s: CUstream, deps: *mut CUgraphNode, n: usize, flags: c_uint) -> CuResult {
    run("cuStreamUpdateCaptureDependencies", || {
        if flags > 1 {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: per the caller.
        let deps = unsafe { nodes_in(deps, n) }?;
        state::client()?.stream_update_capture_deps(state::stream(s), &deps, flags == 1).map_err(state::cu)
    })
}

/// `cuStreamUpdateCaptureDependencies_v2`: default edges only.
///
/// # Safety
/// `deps` (and a non-null `data`) hold `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamUpdateCaptureDependencies_v2(
    s: CUstream,
    deps: *mut CUgraphNode,
    data: *const CUgraphEdgeData,
    n: usize,
    flags: c_uint,
) -> CuResult {
    // SAFETY: `n` entries or null, per the caller.
    if let Err(e) = unsafe { edge_data(data, n) } {
        return e.into();
    }
    // SAFETY: per the caller.
    unsafe { cuStreamUpdateCaptureDependencies(s, deps, n, flags) }
}

/// `cuStreamBeginCaptureToGraph`: capture into an existing graph, after
/// `n` of its nodes (default edges only).
///
/// # Safety
/// `deps` (and a non-null `data`) hold `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBeginCaptureToGraph(
    s: CUstream,
    g: CUgraph,
    deps: *const CUgraphNode,
    data: *const CUgraphEdgeData,
    n: usize,
    mode: CUstreamCaptureMode,
) -> CuResult {
    run("cuStreamBeginCaptureToGraph", || {
        // SAFETY: `n` entries or null, per the caller.
        unsafe { edge_data(data, n) }?;
        // SAFETY: per the caller.
        let deps = unsafe { nodes_in(deps, n) }?;
        state::client()?.stream_begin_capture_to_graph(state::ordered(s), graph_id(g)?, &deps, mode.0).map_err(state::cu)
    })
}
