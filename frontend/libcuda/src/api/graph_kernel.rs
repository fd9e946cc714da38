//! Kernel nodes: added to a graph, their parameters set in the graph or in
//! an executable graph, their attributes read, set and copied. The
//! arguments are packed here, as for a launch, from `kernelParams` or the
//! `extra` buffer; the function may be a `CUfunction` or a `CUkernel`.

use super::graph::{exec_id, graph_id, node_id};
use super::graph::{nodes_in, put_node};
use super::launch::{check_launch, pack};
use crate::state::{self, Res, id, put, run};
use pvgpu_frontend::KernelNode;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::c_void;

/// What both forms of `CUDA_KERNEL_NODE_PARAMS` say.
pub(crate) struct Kernel {
    func: CUfunction,
    kern: CUkernel,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
}

/// A [`Kernel`] of any form of the kernel node's parameters (their
/// members up to `extra` are the same; `kern` from the second form on).
macro_rules! kernel_of {
    ($k:expr, $kern:expr) => {
        Kernel {
            func: $k.func,
            kern: $kern,
            grid: [$k.gridDimX, $k.gridDimY, $k.gridDimZ],
            block: [$k.blockDimX, $k.blockDimY, $k.blockDimZ],
            shared_mem: $k.sharedMemBytes,
            params: $k.kernelParams,
            extra: $k.extra,
        }
    };
}

impl Kernel {
    /// # Safety
    /// A non-null `p` must be readable.
    unsafe fn v1(p: *const CUDA_KERNEL_NODE_PARAMS_v1) -> Result<Kernel, CuError> {
        // SAFETY: readable when not null, per the caller.
        let k = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        Ok(kernel_of!(k, std::ptr::null_mut()))
    }

    /// # Safety
    /// A non-null `p` must be readable.
    unsafe fn v2(p: *const CUDA_KERNEL_NODE_PARAMS) -> Result<Kernel, CuError> {
        // SAFETY: readable when not null, per the caller.
        let k = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        Ok(kernel_of!(k, k.kern))
    }

    /// The kernel of a generic node's parameters.
    pub(crate) fn v3(k: &CUDA_KERNEL_NODE_PARAMS_v3) -> Kernel {
        kernel_of!(k, k.kern)
    }

    /// Calls `f` with the node's parameters, packed.
    ///
    /// # Safety
    /// `params` and `extra` as the driver API requires of a launch.
    unsafe fn with<T>(&self, f: impl FnOnce(&KernelNode<'_>) -> Result<T, CuError>) -> Result<T, CuError> {
        let h = if self.func.is_null() { self.kern } else { self.func };
        let (fid, func) = crate::library::function(id(h))?;
        check_launch(fid, self.grid, self.block, std::ptr::null_mut())?;
        // SAFETY: per the caller.
        let packed = unsafe { pack(&func, self.params, self.extra) }?;
        f(&KernelNode { f: &func, grid: self.grid, block: self.block, shared_mem: self.shared_mem, params: &packed })
    }
}

/// Adds a kernel node.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `k`'s arguments are readable.
pub(crate) unsafe fn add(ph: *mut CUgraphNode, g: CUgraph, deps: *const CUgraphNode, n: usize, k: Kernel) -> Res {
    // SAFETY: per the caller.
    let deps = unsafe { nodes_in(deps, n) }?;
    if ph.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let g = graph_id(g)?;
    // SAFETY: per the caller.
    let node = unsafe { k.with(|node| state::client()?.graph_add_kernel_node(g, &deps, node).map_err(state::cu)) }?;
    // SAFETY: per the caller.
    unsafe { put_node(ph, node) }
}

/// `cuGraphAddKernelNode` (CUDA 10's parameter struct).
///
/// # Safety
/// As the driver API requires of each argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddKernelNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_KERNEL_NODE_PARAMS_v1,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddKernelNode", || unsafe { add(ph, g, deps, n, Kernel::v1(p)?) })
}

/// `cuGraphAddKernelNode_v2`.
///
/// # Safety
/// As the driver API requires of each argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_KERNEL_NODE_PARAMS,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphAddKernelNode_v2", || unsafe { add(ph, g, deps, n, Kernel::v2(p)?) })
}

/// Sets a kernel node's parameters in its graph.
///
/// # Safety
/// `k`'s arguments are readable.
pub(crate) unsafe fn set(node: CUgraphNode, k: Kernel) -> Res {
    let node = node_id(node)?;
    // SAFETY: per the caller.
    unsafe { k.with(|kn| state::client()?.graph_kernel_node_set(node, kn).map_err(state::cu)) }
}

/// `cuGraphKernelNodeSetParams` (CUDA 10's parameter struct).
///
/// # Safety
/// As the driver API requires of `p`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams(node: CUgraphNode, p: *const CUDA_KERNEL_NODE_PARAMS_v1) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphKernelNodeSetParams", || unsafe { set(node, Kernel::v1(p)?) })
}

/// `cuGraphKernelNodeSetParams_v2`.
///
/// # Safety
/// As the driver API requires of `p`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams_v2(node: CUgraphNode, p: *const CUDA_KERNEL_NODE_PARAMS) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphKernelNodeSetParams_v2", || unsafe { set(node, Kernel::v2(p)?) })
}

/// Sets a kernel node's parameters in an executable graph.
///
/// # Safety
/// `k`'s arguments are readable.
pub(crate) unsafe fn exec_set(e: CUgraphExec, node: CUgraphNode, k: Kernel) -> Res {
    let (e, node) = (exec_id(e)?, node_id(node)?);
    // SAFETY: per the caller.
    unsafe { k.with(|kn| state::client()?.graph_exec_kernel_node_set(e, node, kn).map_err(state::cu)) }
}

/// `cuGraphExecKernelNodeSetParams` (CUDA 10's parameter struct).
///
/// # Safety
/// As the driver API requires of `p`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams(
    e: CUgraphExec,
    node: CUgraphNode,
    p: *const CUDA_KERNEL_NODE_PARAMS_v1,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphExecKernelNodeSetParams", || unsafe { exec_set(e, node, Kernel::v1(p)?) })
}

/// `cuGraphExecKernelNodeSetParams_v2`.
///
/// # Safety
/// As the driver API requires of `p`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    e: CUgraphExec,
    node: CUgraphNode,
    p: *const CUDA_KERNEL_NODE_PARAMS,
) -> CuResult {
    // SAFETY: per the caller.
    run("cuGraphExecKernelNodeSetParams_v2", || unsafe { exec_set(e, node, Kernel::v2(p)?) })
}

/// `cuGraphKernelNodeGetAttribute`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeGetAttribute(
    node: CUgraphNode,
    attr: CUkernelNodeAttrID,
    out: *mut CUkernelNodeAttrValue,
) -> CuResult {
    run("cuGraphKernelNodeGetAttribute", || {
        if out.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let v = state::client()?.graph_kernel_node_attr(node_id(node)?, attr.0, None).map_err(state::cu)?;
        // SAFETY: the value union is 64 plain bytes, any of which is valid.
        let v = unsafe { std::mem::transmute::<[u8; 64], CUkernelNodeAttrValue>(v) };
        // SAFETY: writable per the API.
        unsafe { put(out, v) }
    })
}

/// `cuGraphKernelNodeSetAttribute`.
///
/// # Safety
/// `value` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeSetAttribute(
    node: CUgraphNode,
    attr: CUkernelNodeAttrID,
    value: *const CUkernelNodeAttrValue,
) -> CuResult {
    run("cuGraphKernelNodeSetAttribute", || {
        // SAFETY: readable per the API.
        let v = unsafe { value.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: the union's 64 bytes, as the wire carries them.
        let bytes = unsafe { std::mem::transmute::<CUkernelNodeAttrValue, [u8; 64]>(*v) };
        state::client()?.graph_kernel_node_attr(node_id(node)?, attr.0, Some(bytes)).map(|_| ()).map_err(state::cu)
    })
}

/// `cuGraphKernelNodeCopyAttributes`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphKernelNodeCopyAttributes(dst: CUgraphNode, src: CUgraphNode) -> CuResult {
    run("cuGraphKernelNodeCopyAttributes", || {
        state::client()?.graph_kernel_node_copy_attrs(node_id(dst)?, node_id(src)?).map_err(state::cu)
    })
}
