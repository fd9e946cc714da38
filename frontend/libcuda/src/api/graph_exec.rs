//! Executable graphs: instantiation in each of its forms, launches and
//! uploads (sent without waiting, like kernel launches), updates from a
//! changed graph. A graph instantiated for device launch is known to the
//! program by the driver's own handle, which its kernels launch it by
//! (where the backend serves the session in a process of its own).

use super::graph::{exec_id, graph_id};
use crate::state::{self, Res, handle, put, run};
use pvgpu_frontend::{GraphExec, GraphNode};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::collections::BTreeMap;
use std::ffi::c_char;
use std::sync::Mutex;

/// Instantiates `g` with `flags`; an upload asked for at instantiation is
/// made on `upload` right after.
fn instantiate(ph: *mut CUgraphExec, g: CUgraph, flags: u64, upload: CUstream) -> Result<GraphExec, CuError> {
    if ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let upload_flag = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD.0 as u64;
    let c = state::client()?;
    let graph = graph_id(g)?;
    let e = c.graph_instantiate(graph, flags & !upload_flag).map_err(state::cu)?;
    if flags & upload_flag != 0 {
        c.graph_launch(e, state::ordered(upload), true).map_err(state::cu)?;
    }
    let h = if device_exec(e.0).is_some() {
        // The id is a device graph's handle: the program could not tell
        // the two apart.
        let _ = c.graph_exec_destroy(e);
        return Err(CuError::NOT_SUPPORTED);
    } else if flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64 != 0 {
        match device_handle(e) {
            Ok(h) => h,
            Err(err) => {
                let _ = c.graph_exec_destroy(e);
                return Err(err);
            }
        }
    } else {
        e.0
    };
    // SAFETY: non-null; writable per the API.
    unsafe { put(ph, handle(h)) }?;
    super::user_object::instantiated(graph.0, e.0);
    super::graph_params::note_exec_flags(e.0, flags);
    Ok(e)
}

/// Executable graphs made for device launch: the driver's handle, which
/// the program holds (its kernels pass it to `cudaGraphLaunch`), to the
/// session's id.
static DEVICE_EXECS: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

/// The session's id of device-launchable executable graph `h` (the
/// driver's handle), if it is one.
pub(crate) fn device_exec(h: u64) -> Option<u64> {
    DEVICE_EXECS.lock().unwrap_or_else(|p| p.into_inner()).get(&h).copied()
}

/// The driver's handle of `e`, made for device launch, kept as the
/// handle the program holds. A handle that is also the id of another
/// executable graph of the session could not be told apart: refused.
fn device_handle(e: GraphExec) -> Result<u64, CuError> {
    let h = state::client()?.graph_device_handle(e).map_err(state::cu)?;
    if super::graph_params::is_exec(h) || h == 0 {
        return Err(CuError::NOT_SUPPORTED);
    }
    DEVICE_EXECS.lock().unwrap_or_else(|p| p.into_inner()).insert(h, e.0);
    Ok(h)
}

/// Executable graph `e` was destroyed.
fn device_gone(e: u64) {
    DEVICE_EXECS.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, id| *id != e);
}

/// The `cuGraphInstantiate` of CUDA 10 to 11: on failure, a one-line
/// diagnostic in `log` (when given room) and no error node.
///
/// # Safety
/// `err_node` null or writable; `log` null or writable for `size` bytes.
unsafe fn instantiate_logged(ph: *mut CUgraphExec, g: CUgraph, err_node: *mut CUgraphNode, log: *mut c_char, size: usize) -> Res {
    if !err_node.is_null() {
        // SAFETY: writable per the caller.
        unsafe { err_node.write_unaligned(std::ptr::null_mut()) };
    }
    let r = instantiate(ph, g, 0, std::ptr::null_mut()).map(drop);
    if let (Err(e), false, true) = (&r, log.is_null(), size > 0) {
        let msg = format!("pvgpu: instantiation failed: {e:?}");
        let n = msg.len().min(size - 1);
        // SAFETY: `log` is writable for `size > n` bytes, per the caller.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), log.cast::<u8>(), n);
            log.add(n).write(0);
        }
    }
    r
}

/// `cuGraphInstantiate` (the form with an error node and a log).
///
/// # Safety
/// As the driver API requires of each pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiate(
    ph: *mut CUgraphExec,
    g: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut c_char,
    size: usize,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphInstantiate", || unsafe { instantiate_logged(ph, g, err_node, log, size) })
}

/// `cuGraphInstantiate_v2` (same form as `cuGraphInstantiate`).
///
/// # Safety
/// As the driver API requires of each pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    ph: *mut CUgraphExec,
    g: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut c_char,
    size: usize,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphInstantiate_v2", || unsafe { instantiate_logged(ph, g, err_node, log, size) })
}

/// `cuGraphInstantiateWithFlags`.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(ph: *mut CUgraphExec, g: CUgraph, flags: u64) -> CuResult {
    run("cuGraphInstantiateWithFlags", || {
        if flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD.0 as u64 != 0 {
            // Only the parameter form names an upload stream.
            return Err(CuError::INVALID_VALUE);
        }
        instantiate(ph, g, flags, std::ptr::null_mut()).map(drop)
    })
}

/// `cuGraphInstantiateWithParams`: the result (and no error node) is
/// written to the parameters.
///
/// # Safety
/// `ph` must be writable; `p` readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(ph: *mut CUgraphExec, g: CUgraph, p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) -> CuResult {
    run("cuGraphInstantiateWithParams", || {
        if p.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: readable per the API.
        let params = unsafe { p.read_unaligned() };
        let r = instantiate(ph, g, params.flags, params.hUploadStream).map(drop);
        let result = if r.is_ok() { CUDA_GRAPH_INSTANTIATE_SUCCESS } else { CUDA_GRAPH_INSTANTIATE_ERROR };
        // SAFETY: writable per the API; fields written in place.
        unsafe {
            (&raw mut (*p).hErrNode_out).write_unaligned(std::ptr::null_mut());
            (&raw mut (*p).result_out).write_unaligned(result);
        }
        r
    })
}

fn launch(e: CUgraphExec, s: CUstream, upload: bool) -> Res {
    let c = state::client()?;
    let exec = exec_id(e)?;
    c.graph_launch(exec, state::ordered(s), upload).map_err(state::cu)?;
    if c.host_calls_pending() {
        crate::callback::host_nodes_launched();
    }
    if !upload {
        super::user_object::launched(exec.0, s);
    }
    Ok(())
}

/// `cuGraphLaunch`. Sent without waiting.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphLaunch(e: CUgraphExec, s: CUstream) -> CuResult {
    run("cuGraphLaunch", || launch(e, s, false))
}

/// `cuGraphUpload`. Sent without waiting.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphUpload(e: CUgraphExec, s: CUstream) -> CuResult {
    run("cuGraphUpload", || launch(e, s, true))
}

/// `cuGraphExecDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphExecDestroy(e: CUgraphExec) -> CuResult {
    run("cuGraphExecDestroy", || {
        let exec = exec_id(e)?;
        state::client()?.graph_exec_destroy(exec).map_err(state::cu)?;
        super::user_object::exec_gone(exec.0);
        super::graph_params::exec_gone(exec.0);
        device_gone(exec.0);
        Ok(())
    })
}

/// Updates `e` from `g`: the result and the node that stopped it; a
/// refused update is `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`.
fn update(e: CUgraphExec, g: CUgraph) -> Result<(Result<(), CuError>, CUgraphExecUpdateResult, CUgraphNode), CuError> {
    let (exec, graph) = (exec_id(e)?, graph_id(g)?);
    let (result, node) = state::client()?.graph_exec_update(exec, graph).map_err(state::cu)?;
    let node = node.map_or(std::ptr::null_mut(), |n: GraphNode| handle(n.0));
    let status = if result == CU_GRAPH_EXEC_UPDATE_SUCCESS.0 { Ok(()) } else { Err(CuError::GRAPH_EXEC_UPDATE_FAILURE) };
    if status.is_ok() {
        super::user_object::exec_updated(exec.0, graph.0);
    }
    Ok((status, CUgraphExecUpdateResult(result), node))
}

/// `cuGraphExecUpdate` (CUDA 11's form).
///
/// # Safety
/// `err_node` and `result` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecUpdate(
    e: CUgraphExec,
    g: CUgraph,
    err_node: *mut CUgraphNode,
    result: *mut CUgraphExecUpdateResult,
) -> CuResult {
    run("cuGraphExecUpdate", || {
        let (status, r, node) = update(e, g)?;
        // SAFETY: writable per the API.
        unsafe {
            put(err_node, node)?;
            put(result, r)?;
        }
        status
    })
}

/// `cuGraphExecUpdate_v2`.
///
/// # Safety
/// `info` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(e: CUgraphExec, g: CUgraph, info: *mut CUgraphExecUpdateResultInfo) -> CuResult {
    run("cuGraphExecUpdate_v2", || {
        let (status, result, node) = update(e, g)?;
        // SAFETY: writable per the API.
        unsafe { put(info, CUgraphExecUpdateResultInfo { result, errorNode: node, errorFromNode: std::ptr::null_mut() }) }?;
        status
    })
}
