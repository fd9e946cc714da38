//! Nodes a program adds by hand, one function per type: empty, child
//! graph, event record and wait, memset (kernel nodes are in
//! [`super::graph_kernel`], copies in [`super::graph_copy`], the generic
//! interface in [`super::graph_node`]).

use super::graph::graph_id;
use super::graph::{nodes_in, put_node};
use crate::state::{self, Res, id, run};
use pvgpu_frontend::{Event, GraphNode};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::GraphMemsetHead;
use pvgpu_ring::{CuError, CuResult};

/// Adds a node of `kind` (`object`: the child graph or the event).
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
pub(crate) unsafe fn add_simple(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    kind: CUgraphNodeType,
    object: u64,
) -> Res {
    // SAFETY: per the caller.
    let node = unsafe { add_node(ph, g, deps, n, kind, object) }?;
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

/// Adds a node of `kind` (`object`: the child graph or the event); `ph`,
/// where it goes, is checked, not written.
///
/// # Safety
/// `deps` holds `n` nodes.
unsafe fn add_node(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    kind: CUgraphNodeType,
    object: u64,
) -> Result<GraphNode, CuError> {
    // SAFETY: per the caller.
    let deps = unsafe { nodes_in(deps, n) }?;
    if ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    state::client()?.graph_add_node(graph_id(g)?, &deps, kind.0, object).map_err(state::cu)
}

/// Adds a child-graph node that runs a copy of `child` and owns copies of
/// the references to user objects that `child` owns.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
pub(crate) unsafe fn add_child(ph: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, child: CUgraph) -> Res {
    let child = graph_id(child)?.0;
    // SAFETY: per the caller.
    let node = unsafe { add_node(ph, g, deps, n, CU_GRAPH_NODE_TYPE_GRAPH, child) }?;
    super::user_object::child_added(graph_id(g)?.0, node.0, child);
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

/// `cuGraphAddEmptyNode`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddEmptyNode(ph: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddEmptyNode", || unsafe { add_simple(ph, g, deps, n, CU_GRAPH_NODE_TYPE_EMPTY, 0) })
}

/// `cuGraphAddChildGraphNode`: the node runs a copy of `child`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddChildGraphNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    child: CUgraph,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddChildGraphNode", || unsafe { add_child(ph, g, deps, n, child) })
}

/// `cuGraphAddEventRecordNode`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddEventRecordNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    e: CUevent,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddEventRecordNode", || unsafe { add_simple(ph, g, deps, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, Event(id(e)).0) })
}

/// `cuGraphAddEventWaitNode`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddEventWaitNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    e: CUevent,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddEventWaitNode", || unsafe { add_simple(ph, g, deps, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, Event(id(e)).0) })
}

/// `cuGraphAddMemsetNode`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `p` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemsetNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_MEMSET_NODE_PARAMS,
    ctx: CUcontext,
) -> CuResult {
    run("cuGraphAddMemsetNode", || {
        // SAFETY: per the caller.
        let deps = unsafe { nodes_in(deps, n) }?;
        if p.is_null() || ph.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: readable per the API.
        let m = unsafe { p.read_unaligned() };
        let head = memset_head(m.dst, m.pitch, m.value, m.elementSize, m.width, m.height, ctx)?;
        let node = state::client()?.graph_add_memset_node(graph_id(g)?, &deps, head).map_err(state::cu)?;
        // SAFETY: per the caller.
        unsafe { put_node(ph, node) }
    })
}

/// A memset node's parameters as the wire carries them, in context
/// `ctx` (null: the current one).
pub(crate) fn memset_head(
    dst: u64,
    pitch: usize,
    value: u32,
    elem: u32,
    width: usize,
    height: usize,
    ctx: CUcontext,
) -> Result<GraphMemsetHead, CuError> {
    let ctx = state::ctx::backend(state::ctx::or_current(id(ctx))?)?;
    Ok(GraphMemsetHead {
        graph: 0.into(),
        ctx: ctx.0.into(),
        dst: dst.into(),
        pitch: (pitch as u64).into(),
        width: (width as u64).into(),
        height: (height as u64).into(),
        value: value.into(),
        elem_size: elem.into(),
        dep_count: 0.into(),
        reserved: 0.into(),
    })
}
