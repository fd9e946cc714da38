//! Copy nodes: added by hand (`cuGraphAddMemcpyNode`, the generic
//! interface), read back and set in a graph or an executable graph. A copy
//! may be one-dimensional or pitched (rows and slices of a 2D or 3D copy)
//! between device, page-locked and ordinary host memory. The device
//! reaches a host side through the data area or a mirror of the program's
//! memory, so the graph reads and writes it as it is at each launch; CUDA
//! arrays are not supported (`CUDA_ERROR_NOT_SUPPORTED`).

use super::graph::{exec_id, graph_id, node_id, nodes_in, put_node};
use crate::state::{self, Res, id, put, run};
use pvgpu_frontend::{GraphNode, NodeParams, Pitched};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::CopyShape;
use pvgpu_ring::{CuError, CuResult};

/// What a copy node copies, as the backend's device reaches it.
pub(crate) enum NodeCopy {
    /// One contiguous run of `len` bytes.
    Linear {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes.
        len: u64,
    },
    /// Rows and slices of a pitched copy.
    Pitched(CopyShape),
}

/// One side of `c`: its first byte (through the data area or a mirror for
/// host memory), its pitch and rows per slice, and whether its bytes form
/// one contiguous run.
struct Side {
    addr: u64,
    pitch: u64,
    rows: u64,
    contiguous: bool,
}

/// A side of a copy of `depth` slices of `height` rows of `width` bytes.
fn side(
    kind: CUmemorytype,
    host: *const std::ffi::c_void,
    dev: u64,
    (x, y, z): (usize, usize, usize),
    pitch: usize,
    rows: usize,
    (width, height, depth): (usize, usize, usize),
) -> Result<Side, CuError> {
    let multi = height > 1 || depth > 1;
    if multi && pitch < width || depth > 1 && rows < height {
        return Err(CuError::INVALID_VALUE);
    }
    let offset = z
        .checked_mul(rows)
        .and_then(|v| v.checked_add(y))
        .and_then(|v| v.checked_mul(pitch))
        .and_then(|v| v.checked_add(x))
        .ok_or(CuError::INVALID_VALUE)?;
    // The bytes from the first to the last byte of the last row.
    let span = (depth - 1)
        .checked_mul(rows)
        .and_then(|v| v.checked_add(height - 1))
        .and_then(|v| v.checked_mul(pitch))
        .and_then(|v| v.checked_add(width))
        .ok_or(CuError::INVALID_VALUE)?;
    let addr = match super::pitched::side(kind, host, dev, offset, pitch)? {
        Pitched::Device { ptr, .. } => ptr,
        Pitched::Host { ptr, .. } => super::host::graph_host_address(ptr as usize, span).map_err(|e| {
            tracing::debug!(ptr = ptr as usize, span, status = ?e, "host memory of a memcpy node cannot be reached by the device");
            CuError::NOT_SUPPORTED
        })?,
    };
    let contiguous = !multi || pitch == width && (depth == 1 || rows == height);
    Ok(Side { addr, pitch: pitch as u64, rows: rows as u64, contiguous })
}

/// What `c` copies.
pub(crate) fn node_copy(c: &CUDA_MEMCPY3D) -> Result<NodeCopy, CuError> {
    if c.srcLOD != 0 || c.dstLOD != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let extent = (c.WidthInBytes, c.Height.max(1), c.Depth.max(1));
    let (w, h, d) = extent;
    let src = side(c.srcMemoryType, c.srcHost, c.srcDevice, (c.srcXInBytes, c.srcY, c.srcZ), c.srcPitch, c.srcHeight, extent)?;
    let dst = side(c.dstMemoryType, c.dstHost, c.dstDevice, (c.dstXInBytes, c.dstY, c.dstZ), c.dstPitch, c.dstHeight, extent)?;
    if src.contiguous && dst.contiguous {
        let len = w.checked_mul(h).and_then(|v| v.checked_mul(d)).ok_or(CuError::INVALID_VALUE)?;
        return Ok(NodeCopy::Linear { dst: dst.addr, src: src.addr, len: len as u64 });
    }
    Ok(NodeCopy::Pitched(CopyShape {
        dst: dst.addr.into(),
        dst_pitch: dst.pitch.into(),
        dst_rows: dst.rows.into(),
        src: src.addr.into(),
        src_pitch: src.pitch.into(),
        src_rows: src.rows.into(),
        width: (w as u64).into(),
        height: (h as u64).into(),
        depth: (d as u64).into(),
    }))
}

/// Adds a copy node after `deps`, in context `ctx` (null: the current one).
pub(crate) fn add_memcpy(g: CUgraph, deps: &[GraphNode], c: &CUDA_MEMCPY3D, ctx: CUcontext) -> Result<GraphNode, CuError> {
    let copy = node_copy(c)?;
    let (g, ctx) = (graph_id(g)?, state::ctx::backend(state::ctx::or_current(id(ctx))?)?);
    let client = state::client()?;
    match copy {
        NodeCopy::Linear { dst, src, len } => client.graph_add_memcpy_node(g, deps, ctx, dst, src, len),
        NodeCopy::Pitched(shape) => client.graph_add_copy_node(g, deps, ctx, shape),
    }
    .map_err(state::cu)
}

/// Sets copy node `node` to `c`, in its graph or in executable graph `e`,
/// in context `ctx` (null: the current one).
pub(crate) fn set_memcpy(e: Option<CUgraphExec>, node: CUgraphNode, c: &CUDA_MEMCPY3D, ctx: CUcontext) -> Res {
    let copy = node_copy(c)?;
    let (e, node) = (e.map(exec_id).transpose()?, node_id(node)?);
    let ctx = state::ctx::backend(state::ctx::or_current(id(ctx))?)?;
    let client = state::client()?;
    match (copy, e) {
        (NodeCopy::Linear { dst, src, len }, None) => client.graph_memcpy_node_set(node, ctx, dst, src, len),
        (NodeCopy::Linear { dst, src, len }, Some(e)) => client.graph_exec_memcpy_set(e, node, ctx, dst, src, len),
        (NodeCopy::Pitched(shape), e) => client.graph_copy_node_set(e, node, ctx, shape),
    }
    .map_err(state::cu)
}

/// `cuGraphAddMemcpyNode`.
///
/// # Safety
/// `deps` holds `n` nodes; `ph` is writable; `p` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemcpyNode(
    ph: *mut CUgraphNode,
    g: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_MEMCPY3D,
    ctx: CUcontext,
) -> CuResult {
    run("cuGraphAddMemcpyNode", || {
        // SAFETY: per the caller.
        let deps = unsafe { nodes_in(deps, n) }?;
        if ph.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: readable per the API.
        let c = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        let node = add_memcpy(g, &deps, c, ctx)?;
        // SAFETY: per the caller.
        unsafe { put_node(ph, node) }
    })
}

/// `cuGraphMemcpyNodeGetParams`: the sides in unified addressing (the
/// device's addresses, or the program's own for host memory), their
/// offsets folded into them.
///
/// # Safety
/// `p` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemcpyNodeGetParams(node: CUgraphNode, p: *mut CUDA_MEMCPY3D) -> CuResult {
    run("cuGraphMemcpyNodeGetParams", || {
        let params = state::client()?.graph_node_params(node_id(node)?).map_err(state::cu)?;
        // SAFETY: plain integers and null pointers: zero is "none" for each.
        let mut c: CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
        (c.srcMemoryType, c.dstMemoryType) = (CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED);
        match params {
            NodeParams::Memcpy { dst, src, len } => {
                (c.srcDevice, c.dstDevice) = (src, dst);
                (c.WidthInBytes, c.Height, c.Depth) = (len as usize, 1, 1);
            }
            NodeParams::Pitched(s) => {
                (c.srcDevice, c.srcPitch, c.srcHeight) = (s.src.get(), s.src_pitch.get() as usize, s.src_rows.get() as usize);
                (c.dstDevice, c.dstPitch, c.dstHeight) = (s.dst.get(), s.dst_pitch.get() as usize, s.dst_rows.get() as usize);
                (c.WidthInBytes, c.Height, c.Depth) = (s.width.get() as usize, s.height.get() as usize, s.depth.get() as usize);
            }
            _ => return Err(CuError::INVALID_VALUE),
        }
        // SAFETY: writable per the API.
        unsafe { put(p, c) }
    })
}

/// `cuGraphMemcpyNodeSetParams`.
///
/// # Safety
/// `p` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemcpyNodeSetParams(node: CUgraphNode, p: *const CUDA_MEMCPY3D) -> CuResult {
    run("cuGraphMemcpyNodeSetParams", || {
        // SAFETY: readable per the API.
        let c = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        set_memcpy(None, node, c, std::ptr::null_mut())
    })
}

/// `cuGraphExecMemcpyNodeSetParams`.
///
/// # Safety
/// `p` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecMemcpyNodeSetParams(
    e: CUgraphExec,
    node: CUgraphNode,
    p: *const CUDA_MEMCPY3D,
    ctx: CUcontext,
) -> CuResult {
    run("cuGraphExecMemcpyNodeSetParams", || {
        // SAFETY: readable per the API.
        let c = unsafe { p.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        set_memcpy(Some(e), node, c, ctx)
    })
}
