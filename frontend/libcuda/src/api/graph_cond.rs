//! Conditional nodes: handles made for a graph (`cuGraphConditionalHandleCreate`)
//! and if, while and switch nodes (`cuGraphAddNode` of
//! `CU_GRAPH_NODE_TYPE_CONDITIONAL`), whose body graphs the backend's
//! driver makes. A handle is the driver's value: kernels receive it as an
//! argument and set the condition through it (`cudaGraphSetConditional`,
//! which the backend's driver links into their module).
//!
//! The node's parameters come back with `phGraph_out` pointing to an
//! array of its bodies that the library keeps for the node's life, as the
//! driver keeps its own.

use super::graph::{graph_id, nodes_in, put_node};
use crate::state::{self, Res, handle, id, put, run};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::collections::BTreeMap;
use std::ffi::c_uint;
use std::sync::Mutex;

/// The body arrays handed out, by (graph, node) id: graph handles (ids,
/// which are what a `CUgraph` of this library holds).
static BODIES: Mutex<Bodies> = Mutex::new(BTreeMap::new());

/// Body arrays by (graph, node) id.
type Bodies = BTreeMap<(u64, u64), Box<[usize]>>;

/// Keeps node `node`'s body array; returns where it lies (stable while
/// kept: the boxed slice does not move).
fn keep(graph: u64, node: u64, mut bodies: Box<[usize]>) -> *mut CUgraph {
    // A `CUgraph` is a pointer-sized handle, laid out as a `usize`.
    let at = bodies.as_mut_ptr().cast();
    BODIES.lock().unwrap_or_else(|e| e.into_inner()).insert((graph, node), bodies);
    at
}

/// Graph `g` was destroyed: the body arrays of its nodes go.
pub(crate) fn graph_gone(g: u64) {
    BODIES.lock().unwrap_or_else(|e| e.into_inner()).retain(|(graph, _), _| *graph != g);
}

/// Node `n` was destroyed: its body array goes.
pub(crate) fn node_gone(n: u64) {
    BODIES.lock().unwrap_or_else(|e| e.into_inner()).retain(|(_, node), _| *node != n);
}

/// Adds a conditional node; points `p.phGraph_out` at its bodies.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `p` is readable and writable.
pub(crate) unsafe fn add(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *mut CUDA_CONDITIONAL_NODE_PARAMS,
) -> Res {
    // SAFETY: per the caller.
    let p = unsafe { p.as_mut() }.ok_or(CuError::INVALID_VALUE)?;
    if !p.ctx.is_null() {
        state::ctx::backend(id(p.ctx))?;
    }
    // SAFETY: per the caller.
    let deps = unsafe { nodes_in(deps, n) }?;
    let graph = graph_id(g)?;
    let (node, bodies) = state::client()?.graph_add_cond_node(graph, &deps, p.handle, p.type_.0, p.size).map_err(state::cu)?;
    let bodies: Box<[usize]> = bodies.iter().map(|b| handle(b.0) as usize).collect();
    p.phGraph_out = keep(graph.0, node.0, bodies);
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

/// `cuGraphConditionalHandleCreate`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphConditionalHandleCreate(
    out: *mut CUgraphConditionalHandle,
    g: CUgraph,
    ctx: CUcontext,
    default: c_uint,
    flags: c_uint,
) -> CuResult {
    run("cuGraphConditionalHandleCreate", || {
        if out.is_null() || flags > 1 {
            return Err(CuError::INVALID_VALUE);
        }
        state::ctx::backend(state::ctx::or_current(id(ctx))?)?;
        let h = state::client()?.graph_cond_handle(graph_id(g)?, default, flags == 1).map_err(state::cu)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(out, h) }
    })
}
