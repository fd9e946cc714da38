//! Graphs and their nodes: creation, copies, queries, edges, node
//! destruction. Graphs and nodes are backend handles, like streams. Edges
//! are full dependencies (a programmatic edge becomes one). Nodes are
//! added in [`super::graph_add`], [`super::graph_kernel`] and
//! [`super::graph_node`]; executable graphs are in [`super::graph_exec`].

use crate::state::{self, Res, handle, id, put, run};
use pvgpu_frontend::GraphNode;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_char, c_uint};

/// The id behind a graph handle (null is refused).
pub(crate) fn graph_id(g: CUgraph) -> Result<pvgpu_frontend::Graph, CuError> {
    if g.is_null() { Err(CuError::INVALID_VALUE) } else { Ok(pvgpu_frontend::Graph(id(g))) }
}

/// The id behind a node handle (null is refused).
pub(crate) fn node_id(n: CUgraphNode) -> Result<GraphNode, CuError> {
    if n.is_null() { Err(CuError::INVALID_VALUE) } else { Ok(GraphNode(id(n))) }
}

/// The id behind an executable graph handle (null is refused): a graph
/// instantiated for device launch is known by the driver's handle
/// ([`super::graph_exec::device_exec`]).
pub(crate) fn exec_id(e: CUgraphExec) -> Result<pvgpu_frontend::GraphExec, CuError> {
    if e.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(pvgpu_frontend::GraphExec(super::graph_exec::device_exec(id(e)).unwrap_or(id(e))))
}

/// Most nodes one call may name (the wire's limit on ids in a request).
const MAX_NODES: usize = pvgpu_ring::proto::MAX_IDS;

/// The nodes of a `(pointer, count)` dependency list.
///
/// # Safety
/// A non-null `p` must hold `n` nodes.
pub(crate) unsafe fn nodes_in(p: *const CUgraphNode, n: usize) -> Result<Vec<GraphNode>, CuError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() || n > MAX_NODES {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: `n` nodes at `p`, per the caller.
    unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&h| node_id(h)).collect()
}

/// `CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`, the last kernel-node port (a
/// `#define` of cuda.h).
const KERNEL_NODE_PORT_LAUNCH_ORDER: u8 = 2;

/// Checks the data of `n` edges. pvgpu's edges are full dependencies: a
/// programmatic edge (programmatic dependent launch, whose dependent may
/// start before the kernel it follows has finished) becomes one, an
/// ordering at least as strict as the one asked for; any other kind or
/// port is refused.
///
/// # Safety
/// A non-null `p` must hold `n` entries.
pub(crate) unsafe fn edge_data(p: *const CUgraphEdgeData, n: usize) -> Res {
    if p.is_null() || n == 0 {
        return Ok(());
    }
    // SAFETY: `n` entries at `p`, per the caller.
    let data = unsafe { std::slice::from_raw_parts(p, n) };
    let known = |e: &CUgraphEdgeData| {
        let ports = e.from_port <= KERNEL_NODE_PORT_LAUNCH_ORDER && e.to_port == 0;
        ports && (e.type_ as u32 == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT.0 || e.type_ as u32 == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC.0)
    };
    if let Some(e) = data.iter().find(|e| !known(e)) {
        tracing::debug!(from_port = e.from_port, to_port = e.to_port, kind = e.type_, "edge data not supported");
        return Err(CuError::NOT_SUPPORTED);
    }
    if data.iter().any(|e| e.type_ != 0) {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| tracing::debug!("programmatic graph edges run as full dependencies"));
    }
    Ok(())
}

/// Answers a list query as the driver does: with no output array
/// (`listed` false), only the count of `len` items; else `*n` slots, each
/// written by `write(slot, Some(item))`, or `write(slot, None)` past the
/// last item, and the count written back when `*n` was larger.
///
/// # Safety
/// `n` must be null or readable and writable; `write` must be sound for
/// `*n` slots when `listed`.
unsafe fn list_out(len: usize, listed: bool, n: *mut usize, mut write: impl FnMut(usize, Option<usize>)) -> Res {
    if n.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    if !listed {
        // SAFETY: non-null and writable per the caller.
        return unsafe { put(n, len) };
    }
    // SAFETY: readable per the caller.
    let cap = unsafe { n.read_unaligned() };
    for slot in 0..cap {
        write(slot, (slot < len).then_some(slot));
    }
    if cap > len {
        // SAFETY: as above.
        unsafe { put(n, len) }?;
    }
    Ok(())
}

/// Writes node `ids[i]` (or null) to slot `slot` of `out`.
///
/// # Safety
/// `out` holds more than `slot` entries.
unsafe fn write_node(out: *mut CUgraphNode, slot: usize, ids: &[GraphNode], i: Option<usize>) {
    let h = i.map_or(std::ptr::null_mut(), |i| handle(ids[i].0));
    // SAFETY: per the caller.
    unsafe { out.add(slot).write_unaligned(h) };
}

/// Writes a default edge's data to slot `slot` of `data`, if not null.
///
/// # Safety
/// A non-null `data` holds more than `slot` entries.
unsafe fn write_edge(data: *mut CUgraphEdgeData, slot: usize) {
    if !data.is_null() {
        // SAFETY: per the caller.
        unsafe { data.add(slot).write_unaligned(CUgraphEdgeData { from_port: 0, to_port: 0, type_: 0, reserved: [0; 5] }) };
    }
}

/// Writes the new node's handle.
///
/// # Safety
/// `ph` must be null or writable.
pub(crate) unsafe fn put_node(ph: *mut CUgraphNode, n: GraphNode) -> Res {
    // SAFETY: per the caller (null is refused).
    unsafe { put(ph, handle(n.0)) }
}

/// `cuGraphCreate`, in the current context.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphCreate(ph: *mut CUgraph, flags: c_uint) -> CuResult {
    run("cuGraphCreate", || {
        if ph.is_null() || flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let g = state::client()?.graph_create(state::current()?).map_err(state::cu)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(ph, handle(g.0)) }
    })
}

/// `cuGraphDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphDestroy(g: CUgraph) -> CuResult {
    run("cuGraphDestroy", || {
        let graph = graph_id(g)?;
        state::client()?.graph_destroy(graph).map_err(state::cu)?;
        super::graph_cond::graph_gone(graph.0);
        super::user_object::graph_gone(graph.0);
        Ok(())
    })
}

/// `cuGraphClone`.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphClone(ph: *mut CUgraph, g: CUgraph) -> CuResult {
    run("cuGraphClone", || {
        if ph.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let graph = graph_id(g)?;
        let c = state::client()?.graph_clone(graph).map_err(state::cu)?;
        super::user_object::cloned(graph.0, c.0);
        // SAFETY: non-null and writable per the API.
        unsafe { put(ph, handle(c.0)) }
    })
}

fn nodes_of(g: CUgraph, roots: bool, out: *mut CUgraphNode, n: *mut usize) -> Res {
    let ids = state::client()?.graph_nodes(graph_id(g)?, roots).map_err(state::cu)?;
    // SAFETY: the list contract of the API, passed on.
    unsafe { list_out(ids.len(), !out.is_null(), n, |slot, i| write_node(out, slot, &ids, i)) }
}

/// `cuGraphGetNodes`.
///
/// # Safety
/// As the driver API requires of `nodes` and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetNodes(g: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) -> CuResult {
    run("cuGraphGetNodes", || nodes_of(g, false, nodes, n))
}

/// `cuGraphGetRootNodes`.
///
/// # Safety
/// As the driver API requires of `nodes` and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetRootNodes(g: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) -> CuResult {
    run("cuGraphGetRootNodes", || nodes_of(g, true, nodes, n))
}

fn edges(g: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, data: *mut CUgraphEdgeData, n: *mut usize) -> Res {
    if from.is_null() != to.is_null() || (from.is_null() && !data.is_null()) {
        return Err(CuError::INVALID_VALUE);
    }
    let pairs = state::client()?.graph_edges(graph_id(g)?).map_err(state::cu)?;
    let (a, b): (Vec<GraphNode>, Vec<GraphNode>) = pairs.into_iter().unzip();
    // SAFETY: the list contract of the API for each array, passed on.
    unsafe {
        list_out(a.len(), !from.is_null(), n, |slot, i| {
            write_node(from, slot, &a, i);
            write_node(to, slot, &b, i);
            write_edge(data, slot);
        })
    }
}

/// `cuGraphGetEdges` (CUDA 10's form).
///
/// # Safety
/// As the driver API requires of the arrays and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetEdges(g: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, n: *mut usize) -> CuResult {
    run("cuGraphGetEdges", || edges(g, from, to, std::ptr::null_mut(), n))
}

/// `cuGraphGetEdges_v2`: every edge is a default one.
///
/// # Safety
/// As the driver API requires of the arrays and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetEdges_v2(
    g: CUgraph,
    from: *mut CUgraphNode,
    to: *mut CUgraphNode,
    data: *mut CUgraphEdgeData,
    n: *mut usize,
) -> CuResult {
    run("cuGraphGetEdges_v2", || edges(g, from, to, data, n))
}

fn node_edges(node: CUgraphNode, dependents: bool, out: *mut CUgraphNode, data: *mut CUgraphEdgeData, n: *mut usize) -> Res {
    if out.is_null() && !data.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let ids = state::client()?.graph_node_edges(node_id(node)?, dependents).map_err(state::cu)?;
    // SAFETY: the list contract of the API, passed on.
    unsafe {
        list_out(ids.len(), !out.is_null(), n, |slot, i| {
            write_node(out, slot, &ids, i);
            write_edge(data, slot);
        })
    }
}

/// `cuGraphNodeGetDependencies`.
///
/// # Safety
/// As the driver API requires of `deps` and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetDependencies(node: CUgraphNode, deps: *mut CUgraphNode, n: *mut usize) -> CuResult {
    run("cuGraphNodeGetDependencies", || node_edges(node, false, deps, std::ptr::null_mut(), n))
}

/// `cuGraphNodeGetDependencies_v2`.
///
/// # Safety
/// As the driver API requires of the arrays and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetDependencies_v2(
    node: CUgraphNode,
    deps: *mut CUgraphNode,
    data: *mut CUgraphEdgeData,
    n: *mut usize,
) -> CuResult {
    run("cuGraphNodeGetDependencies_v2", || node_edges(node, false, deps, data, n))
}

/// `cuGraphNodeGetDependentNodes`.
///
/// # Safety
/// As the driver API requires of `deps` and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetDependentNodes(node: CUgraphNode, deps: *mut CUgraphNode, n: *mut usize) -> CuResult {
    run("cuGraphNodeGetDependentNodes", || node_edges(node, true, deps, std::ptr::null_mut(), n))
}

/// `cuGraphNodeGetDependentNodes_v2`.
///
/// # Safety
/// As the driver API requires of the arrays and `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetDependentNodes_v2(
    node: CUgraphNode,
    deps: *mut CUgraphNode,
    data: *mut CUgraphEdgeData,
    n: *mut usize,
) -> CuResult {
    run("cuGraphNodeGetDependentNodes_v2", || node_edges(node, true, deps, data, n))
}

/// Adds or removes `n` edges.
///
/// # Safety
/// Non-null arrays hold `n` entries.
unsafe fn change(
    g: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    data: *const CUgraphEdgeData,
    n: usize,
    remove: bool,
) -> Res {
    // SAFETY: per the caller.
    let (a, b) = unsafe { (nodes_in(from, n)?, nodes_in(to, n)?) };
    // SAFETY: per the caller.
    unsafe { edge_data(data, n) }?;
    state::client()?.graph_edges_change(graph_id(g)?, &a, &b, remove).map_err(state::cu)
}

/// `cuGraphAddDependencies`.
///
/// # Safety
/// `from` and `to` hold `n` nodes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddDependencies(g: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddDependencies", || unsafe { change(g, from, to, std::ptr::null(), n, false) })
}

/// `cuGraphAddDependencies_v2` (default edges only).
///
/// # Safety
/// The arrays hold `n` entries (`data` may be null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddDependencies_v2(
    g: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    data: *const CUgraphEdgeData,
    n: usize,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddDependencies_v2", || unsafe { change(g, from, to, data, n, false) })
}

/// `cuGraphRemoveDependencies`.
///
/// # Safety
/// `from` and `to` hold `n` nodes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphRemoveDependencies(g: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphRemoveDependencies", || unsafe { change(g, from, to, std::ptr::null(), n, true) })
}

/// `cuGraphRemoveDependencies_v2` (default edges only).
///
/// # Safety
/// The arrays hold `n` entries (`data` may be null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphRemoveDependencies_v2(
    g: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    data: *const CUgraphEdgeData,
    n: usize,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphRemoveDependencies_v2", || unsafe { change(g, from, to, data, n, true) })
}

/// `cuGraphDestroyNode`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphDestroyNode(node: CUgraphNode) -> CuResult {
    run("cuGraphDestroyNode", || {
        let n = node_id(node)?;
        state::client()?.graph_node_destroy(n).map_err(state::cu)?;
        super::graph_cond::node_gone(n.0);
        super::user_object::node_gone(n.0);
        super::graph_params::node_gone(n.0);
        super::memop::node_gone(n.0);
        Ok(())
    })
}

/// `cuGraphNodeGetType`.
///
/// # Safety
/// `t` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetType(node: CUgraphNode, t: *mut CUgraphNodeType) -> CuResult {
    run("cuGraphNodeGetType", || {
        let info = state::client()?.graph_node_info(node_id(node)?).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(t, CUgraphNodeType(info.kind)) }
    })
}

/// `cuGraphChildGraphNodeGetGraph`: the node's own graph (not a copy).
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphChildGraphNodeGetGraph(node: CUgraphNode, ph: *mut CUgraph) -> CuResult {
    run("cuGraphChildGraphNodeGetGraph", || {
        let info = state::client()?.graph_node_info(node_id(node)?).map_err(state::cu)?;
        let child = info.child.ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: writable per the API.
        unsafe { put(ph, handle(child.0)) }
    })
}

/// `cuGraphDebugDotPrint`: the backend's driver writes the DOT text, the
/// library writes it to `path` here.
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDebugDotPrint(g: CUgraph, path: *const c_char, flags: c_uint) -> CuResult {
    run("cuGraphDebugDotPrint", || {
        // SAFETY: NUL-terminated per the API.
        let path = unsafe { state::name(path) }?;
        let text = state::client()?.graph_dot(graph_id(g)?, flags).map_err(state::cu)?;
        std::fs::write(path, text).map_err(|_| CuError::OPERATING_SYSTEM)
    })
}
