//! Graphs and their nodes: creation, copies, queries, edges, and the nodes
//! a guest adds, each checked as the command it stands for is checked when
//! issued on a stream (a kernel's parameters against its layout, every
//! byte a copy or a memset touches against the session's allocations,
//! events and child graphs against the session's tables).

use super::{Node, Owner, handle};
use crate::exec::graph::{Copy3D, CopySide, ExecGraph, NodeSpec};
use crate::exec::{CuRes, Executor, LaunchDims};
use crate::session::Ctx;
use crate::session::{Io, Session};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, BytesRep, CopyShape, GraphKernelHead, GraphMemcpyHead, GraphMemsetHead, HandleRep, IdsRep, NodeInfoRep};
use zerocopy::little_endian::U64;

pub(in crate::session) fn graph_create<E: Executor>(s: &mut Session<E>, r: proto::GraphCreate, _: &mut Io<'_>) -> CuRes<HandleRep> {
    if r.flags.get() != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = r.ctx.get();
    let g = s.enter(ctx)?.graph_create()?;
    match s.graph.graph_id(ctx, g, Owner::Guest) {
        Ok(id) => Ok(handle(id)),
        Err(e) => {
            let _ = s.enter(ctx)?.graph_destroy(g);
            Err(e)
        }
    }
}

pub(in crate::session) fn graph_destroy<E: Executor>(s: &mut Session<E>, r: proto::GraphDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let id = r.graph.get();
    let entry = s.graph.graphs.get(id).ok_or(CuError::INVALID_VALUE)?;
    if entry.owner != Owner::Guest {
        return Err(CuError::INVALID_VALUE);
    }
    let (ctx, g) = (entry.ctx, entry.graph);
    s.graph.forget_graph(id);
    s.enter(ctx)?.graph_destroy(g)
}

pub(in crate::session) fn graph_clone<E: Executor>(s: &mut Session<E>, r: proto::GraphClone, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let (ctx, g) = s.graph.graph(r.graph.get())?;
    let copy = s.enter(ctx)?.graph_clone(g)?;
    match s.graph.graph_id(ctx, copy, Owner::Guest) {
        Ok(id) => Ok(handle(id)),
        Err(e) => {
            let _ = s.enter(ctx)?.graph_destroy(copy);
            Err(e)
        }
    }
}

pub(in crate::session) fn graph_nodes<E: Executor>(s: &mut Session<E>, r: proto::GraphNodes, _: &mut Io<'_>) -> CuRes<IdsRep> {
    let id = r.graph.get();
    let (ctx, g) = s.graph.graph(id)?;
    let nodes = s.enter(ctx)?.graph_nodes(g, r.roots.get() == 1)?;
    s.graph.ids_rep(id, nodes)
}

pub(in crate::session) fn graph_edges<E: Executor>(s: &mut Session<E>, r: proto::GraphEdges, _: &mut Io<'_>) -> CuRes<IdsRep> {
    let id = r.graph.get();
    let (ctx, g) = s.graph.graph(id)?;
    let edges = s.enter(ctx)?.graph_edges(g)?;
    let flat: Vec<Node<E>> = edges.into_iter().flat_map(|(a, b)| [a, b]).collect();
    s.graph.ids_rep(id, flat)
}

/// The context, graph id and executor node of node `id`.
pub(super) fn node<E: Executor>(s: &Session<E>, id: u64) -> CuRes<(u64, u64, Node<E>)> {
    let n = s.graph.nodes.get(id).ok_or(CuError::INVALID_VALUE)?;
    let (ctx, _) = s.graph.graph(n.graph)?;
    Ok((ctx, n.graph, n.node))
}

pub(in crate::session) fn graph_node_info<E: Executor>(s: &mut Session<E>, r: proto::GraphNodeInfo, _: &mut Io<'_>) -> CuRes<NodeInfoRep> {
    let id = r.node.get();
    let (ctx, graph, n) = node(s, id)?;
    let (kind, child) = s.enter(ctx)?.node_info(n)?;
    let child = match child {
        Some(c) => s.graph.graph_id(ctx, c, Owner::Node { graph, node: id })?,
        None => 0,
    };
    Ok(NodeInfoRep { kind: kind.into(), reserved: 0.into(), child: child.into(), graph: graph.into() })
}

pub(in crate::session) fn graph_node_edges<E: Executor>(s: &mut Session<E>, r: proto::GraphNodeEdges, _: &mut Io<'_>) -> CuRes<IdsRep> {
    let (ctx, graph, n) = node(s, r.node.get())?;
    let nodes = s.enter(ctx)?.node_edges(n, r.dependents.get() == 1)?;
    s.graph.ids_rep(graph, nodes)
}

pub(in crate::session) fn graph_edges_change<E: Executor>(s: &mut Session<E>, r: proto::GraphEdgesChange<'_>, _: &mut Io<'_>) -> CuRes<()> {
    let id = r.head.graph.get();
    let (ctx, g) = s.graph.graph(id)?;
    let from = s.graph.nodes_of(id, r.from.iter().map(|v| v.get()))?;
    let to = s.graph.nodes_of(id, r.to.iter().map(|v| v.get()))?;
    s.enter(ctx)?.graph_edges_change(g, &from, &to, r.head.remove.get() == 1)
}

pub(in crate::session) fn graph_node_destroy<E: Executor>(s: &mut Session<E>, r: proto::GraphNodeDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let id = r.node.get();
    let (ctx, _, n) = node(s, id)?;
    s.enter(ctx)?.node_destroy(n)?;
    s.graph.forget_node(id);
    Ok(())
}

pub(in crate::session) fn graph_dot<E: Executor>(s: &mut Session<E>, r: proto::GraphDot, _: &mut Io<'_>) -> CuRes<BytesRep> {
    let (ctx, g) = s.graph.graph(r.graph.get())?;
    let bytes = s.enter(ctx)?.graph_dot(g, r.flags.get())?;
    if bytes.len() > proto::MAX_PAYLOAD / 2 {
        return Err(CuError::OUT_OF_MEMORY);
    }
    Ok(BytesRep { bytes })
}

/// Adds the node `spec` builds to graph `id` after nodes `deps`; the
/// context must be the graph's.
fn add<E: Executor>(
    s: &mut Session<E>,
    id: u64,
    deps: &[U64],
    ctx: Option<u64>,
    spec: impl FnOnce(&Session<E>) -> CuRes<NodeSpec<'static, Ctx<E>>>,
) -> CuRes<HandleRep> {
    let (gctx, g) = s.graph.graph(id)?;
    if ctx.is_some_and(|c| c != gctx) {
        return Err(CuError::INVALID_CONTEXT);
    }
    let deps = s.graph.nodes_of(id, deps.iter().map(|d| d.get()))?;
    let spec = spec(s)?;
    let n = s.enter(gctx)?.graph_add_node(g, &deps, spec)?;
    Ok(handle(s.graph.node_id(id, n)?))
}

/// A kernel's node parameters: its context, and the spec (its packed
/// parameters checked against its layout).
pub(super) fn kernel<'p, E: Executor>(
    s: &Session<E>,
    h: &GraphKernelHead,
    params: &'p [u8],
    layout: &'p mut Vec<crate::exec::Param>,
) -> CuRes<(u64, NodeSpec<'p, crate::session::Ctx<E>>)> {
    let f = s.functions.get(h.function.get()).ok_or(CuError::INVALID_HANDLE)?;
    if params.len() != f.param_bytes {
        return Err(CuError::INVALID_VALUE);
    }
    let dims = LaunchDims { grid: h.grid.map(|v| v.get()), block: h.block.map(|v| v.get()), shared_mem: h.shared_mem.get() };
    if dims.grid.contains(&0) || dims.block.contains(&0) {
        return Err(CuError::INVALID_VALUE);
    }
    *layout = f.layout.to_vec();
    Ok((f.ctx, NodeSpec::Kernel { f: f.func, dims, params, layout }))
}

pub(in crate::session) fn graph_add_kernel_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddKernelNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let id = r.head.target.get();
    let (gctx, g) = s.graph.graph(id)?;
    let deps = s.graph.nodes_of(id, r.deps.iter().map(|d| d.get()))?;
    let mut layout = Vec::new();
    let (ctx, spec) = kernel(s, &r.head, r.params, &mut layout)?;
    if ctx != gctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    let n = s.enter(gctx)?.graph_add_node(g, &deps, spec)?;
    Ok(handle(s.graph.node_id(id, n)?))
}

pub(in crate::session) fn graph_kernel_node_set<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphKernelNodeSet<'_>,
    _: &mut Io<'_>,
) -> CuRes<()> {
    let (gctx, _, n) = node(s, r.head.target.get())?;
    let mut layout = Vec::new();
    let (ctx, spec) = kernel(s, &r.head, r.params, &mut layout)?;
    if ctx != gctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    s.enter(gctx)?.node_set(n, spec)
}

/// A one-dimensional copy's shape.
pub(super) fn linear_shape(h: &GraphMemcpyHead) -> CopyShape {
    let (dst, src, width) = (h.dst, h.src, h.len);
    let zero = 0.into();
    CopyShape { dst, dst_pitch: zero, dst_rows: zero, src, src_pitch: zero, src_rows: zero, width, height: 1.into(), depth: 1.into() }
}

/// The bytes a side of a copy spans, from its first byte to the last byte
/// of its last row: `(depth - 1) * rows + height - 1` pitches and a row.
/// Rows may not overlap: a pitch covers a row, a slice's rows its height.
fn span(pitch: u64, rows: u64, width: u64, height: u64, depth: u64) -> CuRes<u64> {
    if (height > 1 || depth > 1) && pitch < width || depth > 1 && rows < height {
        return Err(CuError::INVALID_VALUE);
    }
    let last_row = (depth - 1).checked_mul(rows).and_then(|v| v.checked_add(height - 1)).ok_or(CuError::INVALID_VALUE)?;
    last_row.checked_mul(pitch).and_then(|v| v.checked_add(width)).ok_or(CuError::INVALID_VALUE)
}

/// A copy's spec: every byte of each side in context `ctx`'s memory; a
/// side in a mirror of ordinary memory is copied as host memory (see
/// `Mirrors::pageable`).
pub(super) fn copy_spec<E: Executor>(s: &Session<E>, ctx: u64, c: &CopyShape) -> CuRes<NodeSpec<'static, Ctx<E>>> {
    let (width, height, depth) = (c.width.get(), c.height.get(), c.depth.get());
    if height == 0 || depth == 0 || height > u32::MAX as u64 || depth > u32::MAX as u64 {
        return Err(CuError::INVALID_VALUE);
    }
    let side = |addr: u64, pitch: u64, rows: u64| -> CuRes<CopySide> {
        let len = span(pitch, rows, width, height, depth)?;
        if s.range(addr, len)? != ctx {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(CopySide { addr, pitch, rows, host: s.mirrors.pageable(addr, len) })
    };
    let dst = side(c.dst.get(), c.dst_pitch.get(), c.dst_rows.get())?;
    let src = side(c.src.get(), c.src_pitch.get(), c.src_rows.get())?;
    if dst.host && src.host {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(NodeSpec::Copy(Copy3D { dst, src, width, height, depth }))
}

/// A memset's spec: 1, 2 or 4-byte elements, every row in context
/// `ctx`'s memory.
pub(super) fn memset_spec<E: Executor>(s: &Session<E>, h: &GraphMemsetHead) -> CuRes<NodeSpec<'static, Ctx<E>>> {
    let (dst, pitch, width, height, elem) = (h.dst.get(), h.pitch.get(), h.width.get(), h.height.get(), h.elem_size.get());
    if !matches!(elem, 1 | 2 | 4) || width == 0 || height == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let row = width.checked_mul(elem as u64).ok_or(CuError::INVALID_VALUE)?;
    if height > 1 && pitch < row {
        return Err(CuError::INVALID_VALUE);
    }
    let extent = (height - 1).checked_mul(pitch).and_then(|v| v.checked_add(row)).ok_or(CuError::INVALID_VALUE)?;
    if s.range(dst, extent)? != h.ctx.get() {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(NodeSpec::Memset { dst, pitch, width, height, value: h.value.get(), elem_size: elem })
}

pub(in crate::session) fn graph_add_memcpy_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddMemcpyNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let h = r.head;
    add(s, h.graph.get(), r.deps, Some(h.ctx.get()), |s| copy_spec(s, h.ctx.get(), &linear_shape(&h)))
}

pub(in crate::session) fn graph_add_copy_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddCopyNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let h = r.head;
    add(s, h.graph.get(), r.deps, Some(h.ctx.get()), |s| copy_spec(s, h.ctx.get(), &h.shape))
}

pub(in crate::session) fn graph_add_memset_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddMemsetNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let h = r.head;
    add(s, h.graph.get(), r.deps, Some(h.ctx.get()), |s| memset_spec(s, &h))
}

pub(in crate::session) fn graph_add_mem_op_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddMemOpNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let h = r.head;
    let (named, ops) = crate::session::memop::checked(s, r.ops, 0)?;
    let ctx = h.ctx.get();
    if named.is_some_and(|c| c != ctx) {
        return Err(CuError::INVALID_VALUE);
    }
    let id = h.graph.get();
    let (gctx, g) = s.graph.graph(id)?;
    if gctx != ctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    let deps = s.graph.nodes_of(id, r.deps.iter().map(|d| d.get()))?;
    let n = s.enter(ctx)?.graph_add_node(g, &deps, NodeSpec::MemOps(&ops))?;
    Ok(handle(s.graph.node_id(id, n)?))
}

pub(in crate::session) fn graph_add_node<E: Executor>(s: &mut Session<E>, r: proto::GraphAddNode<'_>, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let h = r.head;
    let (graph, object) = (h.graph.get(), h.object.get());
    let (gctx, _) = s.graph.graph(graph)?;
    add(s, graph, r.deps, None, |s| {
        let event = |id: u64| match s.events.get(id) {
            Some(e) if e.ctx == gctx => Ok(e.value),
            _ => Err(CuError::INVALID_HANDLE),
        };
        match CUgraphNodeType(h.kind.get()) {
            CU_GRAPH_NODE_TYPE_EMPTY => Ok(NodeSpec::Empty),
            CU_GRAPH_NODE_TYPE_GRAPH => match s.graph.graph(object)? {
                (c, child) if c == gctx && object != graph => Ok(NodeSpec::Child(child)),
                _ => Err(CuError::INVALID_VALUE),
            },
            CU_GRAPH_NODE_TYPE_EVENT_RECORD => Ok(NodeSpec::EventRecord(event(object)?)),
            CU_GRAPH_NODE_TYPE_WAIT_EVENT => Ok(NodeSpec::EventWait(event(object)?)),
            _ => Err(CuError::INVALID_VALUE),
        }
    })
}
