//! Host nodes: the program's functions in its graphs, run in this process
//! at every launch (see `pvgpu_frontend`'s host calls). Added by hand, by
//! the generic interface, or captured with `cuLaunchHostFunc`
//! ([`crate::callback`]).

use super::graph::{exec_id, graph_id, node_id, nodes_in, put_node};
use crate::state::{self, Res, run};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::c_void;

/// The function of host-node parameters (null is refused, as the driver
/// refuses it).
fn function(p: &CUDA_HOST_NODE_PARAMS) -> Result<(pvgpu_frontend::HostFn, *mut c_void), CuError> {
    Ok((p.fn_.ok_or(CuError::INVALID_VALUE)?, p.userData))
}

/// Reads host-node parameters.
///
/// # Safety
/// `p` is null or readable.
unsafe fn read(p: *const CUDA_HOST_NODE_PARAMS) -> Result<(pvgpu_frontend::HostFn, *mut c_void), CuError> {
    // SAFETY: per the caller.
    function(unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?)
}

/// Adds a host node running `f(data)`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable.
pub(crate) unsafe fn add(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    f: (pvgpu_frontend::HostFn, *mut c_void),
) -> Res {
    // SAFETY: per the caller.
    let deps = unsafe { nodes_in(deps, n) }?;
    if ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: the program gave the function as a host function, as the
    // driver API has it run (once per launch reaching the node).
    let node = unsafe { state::client()?.graph_add_host_node(graph_id(g)?, &deps, f.0, f.1) }.map_err(state::cu)?;
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

/// Host-node parameters of the generic interface.
pub(crate) fn from_v2(p: &CUDA_HOST_NODE_PARAMS_v2) -> Result<(pvgpu_frontend::HostFn, *mut c_void), CuError> {
    Ok((p.fn_.ok_or(CuError::INVALID_VALUE)?, p.userData))
}

/// Sets node `node`'s function (in executable graph `e`, when given).
pub(crate) fn set(e: Option<CUgraphExec>, node: CUgraphNode, f: (pvgpu_frontend::HostFn, *mut c_void)) -> Res {
    let exec = e.map(exec_id).transpose()?;
    // SAFETY: as in `add`.
    unsafe { state::client()?.host_node_set(exec, node_id(node)?, f.0, f.1) }.map_err(state::cu)
}

/// `cuGraphAddHostNode`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `p` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddHostNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_HOST_NODE_PARAMS,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddHostNode", || unsafe { add(ph, g, deps, n, read(p)?) })
}

/// `cuGraphHostNodeGetParams`.
///
/// # Safety
/// `p` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphHostNodeGetParams(node: CUgraphNode, p: *mut CUDA_HOST_NODE_PARAMS) -> CuResult {
    run("cuGraphHostNodeGetParams", || {
        if p.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let (func, data) = state::client()?.host_node_params(node_id(node)?).map_err(state::cu)?;
        // SAFETY: the backend hands back what this process gave, a
        // `CUhostFn` (never null: null is refused when set).
        let f = unsafe { std::mem::transmute::<usize, Option<pvgpu_frontend::HostFn>>(func) };
        // SAFETY: writable per the caller.
        unsafe { p.write(CUDA_HOST_NODE_PARAMS { fn_: f, userData: data as *mut c_void }) };
        Ok(())
    })
}

/// `cuGraphHostNodeSetParams`.
///
/// # Safety
/// `p` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphHostNodeSetParams(node: CUgraphNode, p: *const CUDA_HOST_NODE_PARAMS) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphHostNodeSetParams", || set(None, node, unsafe { read(p) }?))
}

/// `cuGraphExecHostNodeSetParams`.
///
/// # Safety
/// `p` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecHostNodeSetParams(e: CUgraphExec, node: CUgraphNode, p: *const CUDA_HOST_NODE_PARAMS) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphExecHostNodeSetParams", || set(Some(e), node, unsafe { read(p) }?))
}
