//! Node parameters read back and set in a graph: kernel, memset and copy
//! nodes (`cuGraph*NodeGetParams`, `cuGraphMemsetNodeSetParams`,
//! `cuGraphMemcpyNodeSetParams`), event nodes (`cuGraphEvent*NodeGetEvent`,
//! `*SetEvent`, in a graph and in an executable graph), whether an
//! executable graph runs a node (`cuGraphNodeGetEnabled`), a node's
//! counterpart in a clone (`cuGraphNodeFindInClone`) and an executable
//! graph's flags (`cuGraphExecGetFlags`).
//!
//! A kernel node's `kernelParams` handed back point into a copy of its
//! arguments this library keeps for the node until its parameters are read
//! again, as the driver's point into the node's own copy.

use super::graph::{exec_id, graph_id, node_id, put_node};
use super::graph_add::memset_head;
use crate::state::objects::objects;
use crate::state::{self, Res, handle, id, put, run};
use pvgpu_frontend::{Event, NodeParams};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};
use std::sync::Mutex;

/// A kernel node's arguments as last read: packed, and one address per
/// parameter into them.
struct KeptArgs {
    _packed: Box<[u8]>,
    /// Kept alive: the program holds the address of this array.
    _pointers: Box<[usize]>,
}

/// Arguments handed out, by node id.
static ARGS: Mutex<BTreeMap<u64, KeptArgs>> = Mutex::new(BTreeMap::new());

/// Flags each executable graph was instantiated with, by id.
static EXEC_FLAGS: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

/// Notes the flags executable graph `e` was instantiated with.
pub(crate) fn note_exec_flags(e: u64, flags: u64) {
    EXEC_FLAGS.lock().unwrap_or_else(|p| p.into_inner()).insert(e, flags);
}

/// Whether `e` is the id of a live executable graph.
pub(crate) fn is_exec(e: u64) -> bool {
    EXEC_FLAGS.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&e)
}

/// Executable graph `e` was destroyed.
pub(crate) fn exec_gone(e: u64) {
    EXEC_FLAGS.lock().unwrap_or_else(|p| p.into_inner()).remove(&e);
}

/// A kernel node's parameters, its arguments kept for the program.
struct KernelRead {
    func: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    params: *mut *mut c_void,
}

fn read_kernel(node: CUgraphNode) -> Result<KernelRead, CuError> {
    let n = node_id(node)?;
    let NodeParams::Kernel { function, grid, block, shared_mem, params } = state::client()?.graph_node_params(n).map_err(state::cu)? else {
        return Err(CuError::INVALID_VALUE);
    };
    let layout = objects().functions.get(&function).map(|f| f.func.params.clone()).ok_or(CuError::NOT_SUPPORTED)?;
    let packed: Box<[u8]> = params.into();
    let pointers: Box<[usize]> = layout.iter().map(|p| packed.as_ptr() as usize + p.offset as usize).collect();
    let at = pointers.as_ptr() as *mut *mut c_void;
    ARGS.lock().unwrap_or_else(|p| p.into_inner()).insert(n.0, KeptArgs { _packed: packed, _pointers: pointers });
    Ok(KernelRead { func: handle(function).cast(), grid, block, shared_mem, params: at })
}

/// Node `n` was destroyed: the arguments kept for it go.
pub(crate) fn node_gone(n: u64) {
    ARGS.lock().unwrap_or_else(|p| p.into_inner()).remove(&n);
}

/// Fills the members every form of the kernel node's parameters has.
macro_rules! fill_kernel {
    ($p:expr, $k:expr) => {{
        let k = $k;
        $p.func = k.func;
        [$p.gridDimX, $p.gridDimY, $p.gridDimZ] = k.grid;
        [$p.blockDimX, $p.blockDimY, $p.blockDimZ] = k.block;
        $p.sharedMemBytes = k.shared_mem;
        $p.kernelParams = k.params;
        $p.extra = std::ptr::null_mut();
    }};
}

/// `cuGraphKernelNodeGetParams` (CUDA 10's parameter struct).
///
/// # Safety
/// `p` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams(node: CUgraphNode, p: *mut CUDA_KERNEL_NODE_PARAMS_v1) -> CuResult {
    run("cuGraphKernelNodeGetParams", || {
        // SAFETY: writable per the API.
        let p = unsafe { p.as_mut() }.ok_or(CuError::INVALID_VALUE)?;
        fill_kernel!(p, read_kernel(node)?);
        Ok(())
    })
}

/// `cuGraphKernelNodeGetParams_v2`.
///
/// # Safety
/// `p` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams_v2(node: CUgraphNode, p: *mut CUDA_KERNEL_NODE_PARAMS) -> CuResult {
    run("cuGraphKernelNodeGetParams_v2", || {
        // SAFETY: writable per the API.
        let p = unsafe { p.as_mut() }.ok_or(CuError::INVALID_VALUE)?;
        fill_kernel!(p, read_kernel(node)?);
        p.kern = std::ptr::null_mut();
        p.ctx = std::ptr::null_mut();
        Ok(())
    })
}

/// `cuGraphMemsetNodeGetParams`.
///
/// # Safety
/// `p` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemsetNodeGetParams(node: CUgraphNode, p: *mut CUDA_MEMSET_NODE_PARAMS) -> CuResult {
    run("cuGraphMemsetNodeGetParams", || {
        let NodeParams::Memset { dst, pitch, value, elem_size, width, height } =
            state::client()?.graph_node_params(node_id(node)?).map_err(state::cu)?
        else {
            return Err(CuError::INVALID_VALUE);
        };
        let out = CUDA_MEMSET_NODE_PARAMS {
            dst,
            pitch: pitch as usize,
            value,
            elementSize: elem_size,
            width: width as usize,
            height: height as usize,
        };
        // SAFETY: writable per the API.
        unsafe { put(p, out) }
    })
}

/// `cuGraphMemsetNodeSetParams`.
///
/// # Safety
/// `p` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemsetNodeSetParams(node: CUgraphNode, p: *const CUDA_MEMSET_NODE_PARAMS) -> CuResult {
    run("cuGraphMemsetNodeSetParams", || {
        // SAFETY: readable per the API.
        let m = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        let head = memset_head(m.dst, m.pitch, m.value, m.elementSize, m.width, m.height, std::ptr::null_mut())?;
        state::client()?.graph_memset_node_set(node_id(node)?, head).map_err(state::cu)
    })
}

/// The event of event node `node` (`wait`: an event-wait node).
fn node_event(node: CUgraphNode, wait: bool) -> Result<CUevent, CuError> {
    match state::client()?.graph_node_params(node_id(node)?).map_err(state::cu)? {
        NodeParams::Event { wait: w, event } if w == wait => Ok(handle(event.0).cast()),
        _ => Err(CuError::INVALID_VALUE),
    }
}

/// `cuGraphEventRecordNodeGetEvent`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphEventRecordNodeGetEvent(node: CUgraphNode, out: *mut CUevent) -> CuResult {
    // SAFETY: writable per the API.
    run("cuGraphEventRecordNodeGetEvent", || unsafe { put(out, node_event(node, false)?) })
}

/// `cuGraphEventWaitNodeGetEvent`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphEventWaitNodeGetEvent(node: CUgraphNode, out: *mut CUevent) -> CuResult {
    // SAFETY: writable per the API.
    run("cuGraphEventWaitNodeGetEvent", || unsafe { put(out, node_event(node, true)?) })
}

/// Sets the event of event node `node`, in its graph or in `exec`.
fn set_event(exec: Option<CUgraphExec>, node: CUgraphNode, e: CUevent) -> Res {
    let exec = exec.map(exec_id).transpose()?;
    if e.is_null() {
        return Err(CuError::INVALID_HANDLE);
    }
    state::client()?.graph_event_node_set(exec, node_id(node)?, Event(id(e))).map_err(state::cu)
}

/// `cuGraphEventRecordNodeSetEvent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphEventRecordNodeSetEvent(node: CUgraphNode, e: CUevent) -> CuResult {
    run("cuGraphEventRecordNodeSetEvent", || set_event(None, node, e))
}

/// `cuGraphEventWaitNodeSetEvent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphEventWaitNodeSetEvent(node: CUgraphNode, e: CUevent) -> CuResult {
    run("cuGraphEventWaitNodeSetEvent", || set_event(None, node, e))
}

/// `cuGraphExecEventRecordNodeSetEvent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphExecEventRecordNodeSetEvent(x: CUgraphExec, node: CUgraphNode, e: CUevent) -> CuResult {
    run("cuGraphExecEventRecordNodeSetEvent", || set_event(Some(x), node, e))
}

/// `cuGraphExecEventWaitNodeSetEvent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphExecEventWaitNodeSetEvent(x: CUgraphExec, node: CUgraphNode, e: CUevent) -> CuResult {
    run("cuGraphExecEventWaitNodeSetEvent", || set_event(Some(x), node, e))
}

/// `cuGraphNodeGetEnabled`.
///
/// # Safety
/// `on` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetEnabled(x: CUgraphExec, node: CUgraphNode, on: *mut c_uint) -> CuResult {
    run("cuGraphNodeGetEnabled", || {
        let enabled = state::client()?.graph_node_enabled(exec_id(x)?, node_id(node)?).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(on, c_uint::from(enabled)) }
    })
}

/// `cuGraphNodeFindInClone`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeFindInClone(out: *mut CUgraphNode, original: CUgraphNode, clone: CUgraph) -> CuResult {
    run("cuGraphNodeFindInClone", || {
        let n = state::client()?.graph_node_find_in_clone(graph_id(clone)?, node_id(original)?).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put_node(out, n) }
    })
}

/// `cuGraphExecGetFlags`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecGetFlags(x: CUgraphExec, out: *mut cuuint64_t) -> CuResult {
    run("cuGraphExecGetFlags", || {
        let e = exec_id(x)?;
        let flags = EXEC_FLAGS.lock().unwrap_or_else(|p| p.into_inner()).get(&e.0).copied().ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: writable per the API.
        unsafe { put(out, flags) }
    })
}

/// `cuGraphNodeSetParams`: the generic form of the setters above, for
/// kernel, memset, copy, host, event and batch memory-operation nodes.
///
/// # Safety
/// `p` must be readable, with the pointers of its member readable as the
/// driver API requires.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeSetParams(node: CUgraphNode, p: *mut CUgraphNodeParams) -> CuResult {
    run("cuGraphNodeSetParams", || {
        // SAFETY: readable per the API.
        let p = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        // SAFETY (each union read below): the member `type_` names.
        match p.type_ {
            // SAFETY: per the caller.
            CU_GRAPH_NODE_TYPE_KERNEL => unsafe { super::graph_kernel::set(node, super::graph_kernel::Kernel::v3(&p.anon2.kernel)) },
            CU_GRAPH_NODE_TYPE_MEMSET => {
                // SAFETY: the memset member.
                let m = unsafe { p.anon2.memset };
                let head = memset_head(m.dst, m.pitch, m.value, m.elementSize, m.width, m.height, m.ctx)?;
                state::client()?.graph_memset_node_set(node_id(node)?, head).map_err(state::cu)
            }
            CU_GRAPH_NODE_TYPE_MEMCPY => {
                // SAFETY: the memcpy member.
                let c = unsafe { &p.anon2.memcpy };
                super::graph_copy::set_memcpy(None, node, &c.copyParams, c.copyCtx)
            }
            // SAFETY: the host member.
            CU_GRAPH_NODE_TYPE_HOST => super::graph_host::set(None, node, super::graph_host::from_v2(unsafe { &p.anon2.host })?),
            // SAFETY: the event-record member.
            CU_GRAPH_NODE_TYPE_EVENT_RECORD => set_event(None, node, unsafe { p.anon2.eventRecord.event }),
            // SAFETY: the event-wait member.
            CU_GRAPH_NODE_TYPE_WAIT_EVENT => set_event(None, node, unsafe { p.anon2.eventWait.event }),
            // SAFETY: the batch memory-operation member; its array as the
            // caller keeps it.
            CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => unsafe { super::memop::node_set!(None, node, p.anon2.memOp) },
            _ => Err(CuError::NOT_SUPPORTED),
        }
    })
}

/// The event and batch memory-operation nodes of `cuGraphExecNodeSetParams`.
///
/// # Safety
/// `p` must be readable.
pub(crate) unsafe fn exec_set_other(e: CUgraphExec, node: CUgraphNode, p: &CUgraphNodeParams) -> Res {
    match p.type_ {
        // SAFETY: the event-record member, which `type_` names.
        CU_GRAPH_NODE_TYPE_EVENT_RECORD => set_event(Some(e), node, unsafe { p.anon2.eventRecord.event }),
        // SAFETY: the event-wait member, which `type_` names.
        CU_GRAPH_NODE_TYPE_WAIT_EVENT => set_event(Some(e), node, unsafe { p.anon2.eventWait.event }),
        // SAFETY: the batch memory-operation member, which `type_` names;
        // its array as the caller keeps it.
        CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => unsafe { super::memop::node_set!(Some(e), node, p.anon2.memOp) },
        _ => Err(CuError::NOT_SUPPORTED),
    }
}
