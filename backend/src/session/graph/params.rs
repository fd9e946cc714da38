//! Node parameters read back and set: a kernel node's function and packed
//! parameters (its arguments copied out of the driver's own copy with the
//! function's layout), memset, copy and event nodes; whether an executable
//! graph runs a node; a node's counterpart in a clone; a kernel node's
//! attributes (the launch attributes a guest may set on a launch). Every
//! id is the
//! session's: a function or event the driver names that the session does
//! not know is not answered.

use super::nodes::node;
use super::{Node, handle};
use crate::exec::graph::{Copy3D, ExecGraph, KernelArgs, NodeParams, NodeSpec};
use crate::exec::{CuRes, Executor, Param};
use crate::session::{Io, Session};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, AttrValueRep, HandleRep, I32Rep, NODE_ATTR_COPY, NODE_ATTR_GET, NodeParamsHead, NodeParamsRep};
use zerocopy::IntoBytes;

/// Packs arguments found at `ptrs` (one per parameter) as `layout` says.
fn pack(ptrs: &[usize], layout: &[Param], bytes: usize) -> CuRes<Vec<u8>> {
    if ptrs.len() != layout.len() || ptrs.contains(&0) {
        return Err(CuError::NOT_SUPPORTED);
    }
    let mut out = vec![0u8; bytes];
    for (&p, l) in ptrs.iter().zip(layout) {
        let (off, size) = (l.offset as usize, l.size as usize);
        let dst = out.get_mut(off..off + size).ok_or(CuError::NOT_SUPPORTED)?;
        // The driver's copy of this parameter, `size` bytes (the function's
        // own layout), alive while the node is unchanged (this request runs
        // on the session's one thread).
        // SAFETY: as just said.
        dst.copy_from_slice(unsafe { std::slice::from_raw_parts(p as *const u8, size) });
    }
    Ok(out)
}

/// A copy node's parameters as the reply's words: a one-dimensional copy
/// as destination, source and bytes; a pitched one with its rows and
/// slices (32 bits each), pitches and rows per slice.
fn copy_words(c: &Copy3D) -> CuRes<[u64; 8]> {
    if c.height == 1 && c.depth == 1 {
        return Ok([c.dst.addr, c.src.addr, c.width, 0, 0, 0, 0, 0]);
    }
    if c.height > u32::MAX as u64 || c.depth > u32::MAX as u64 {
        return Err(CuError::NOT_SUPPORTED);
    }
    Ok([c.dst.addr, c.src.addr, c.width, c.height | (c.depth << 32), c.dst.pitch, c.src.pitch, c.dst.rows, c.src.rows])
}

/// The session's handle of function `f` of context `ctx`, and a kernel
/// node's arguments `args` packed as its layout says.
pub(super) fn kernel_args<E: Executor>(
    s: &Session<E>,
    ctx: u64,
    f: <crate::session::Ctx<E> as crate::exec::ExecContext>::Function,
    args: KernelArgs,
) -> CuRes<(u64, Vec<u8>)> {
    let (id, e) = s.functions.iter().find(|(_, e)| e.ctx == ctx && e.func == f).ok_or(CuError::NOT_SUPPORTED)?;
    let packed = match args {
        KernelArgs::Packed(b) if b.len() == e.param_bytes => b,
        KernelArgs::Packed(_) => return Err(CuError::NOT_SUPPORTED),
        KernelArgs::Pointers(p) => pack(&p, &e.layout, e.param_bytes)?,
    };
    Ok((id, packed))
}

/// The session's handle of event `event` of context `ctx`.
pub(super) fn event_id<E: Executor>(
    s: &Session<E>,
    ctx: u64,
    event: <crate::session::Ctx<E> as crate::exec::ExecContext>::Event,
) -> CuRes<u64> {
    s.events.iter().find(|(_, e)| e.ctx == ctx && e.value == event).map(|(id, _)| id).ok_or(CuError::NOT_SUPPORTED)
}

pub(in crate::session) fn graph_node_params<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphNodeParams,
    _: &mut Io<'_>,
) -> CuRes<NodeParamsRep> {
    let (ctx, _, n) = node(s, r.node.get())?;
    let (kind, words, params) = match s.enter(ctx)?.node_params(n)? {
        NodeParams::Kernel { f, dims, args } => {
            let (id, packed) = kernel_args(s, ctx, f, args)?;
            let [gx, gy, gz] = dims.grid.map(u64::from);
            let [bx, by, bz] = dims.block.map(u64::from);
            (CU_GRAPH_NODE_TYPE_KERNEL, [id, gx, gy, gz, bx, by, bz, dims.shared_mem.into()], packed)
        }
        NodeParams::Memset { dst, pitch, width, height, value, elem_size } => {
            (CU_GRAPH_NODE_TYPE_MEMSET, [dst, pitch, value.into(), elem_size.into(), width, height, 0, 0], Vec::new())
        }
        NodeParams::Copy(c) => (CU_GRAPH_NODE_TYPE_MEMCPY, copy_words(&c)?, Vec::new()),
        NodeParams::Event { wait, event } => {
            let id = event_id(s, ctx, event)?;
            let kind = if wait { CU_GRAPH_NODE_TYPE_WAIT_EVENT } else { CU_GRAPH_NODE_TYPE_EVENT_RECORD };
            (kind, [id, 0, 0, 0, 0, 0, 0, 0], Vec::new())
        }
        NodeParams::MemOps(ops) => {
            let wire: Vec<proto::MemOp> = ops
                .iter()
                .map(|o| proto::MemOp { kind: o.kind.into(), flags: o.flags.into(), addr: o.addr.into(), value: o.value.into() })
                .collect();
            (CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [ctx, ops.len() as u64, 0, 0, 0, 0, 0, 0], wire.as_bytes().to_vec())
        }
    };
    let head = NodeParamsHead { kind: kind.0.into(), param_len: (params.len() as u32).into(), words: words.map(Into::into) };
    Ok(NodeParamsRep { head, params })
}

pub(in crate::session) fn graph_event_node_set<E: Executor>(s: &mut Session<E>, r: proto::GraphEventNodeSet, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, _, n) = node(s, r.node.get())?;
    let ev = match s.events.get(r.event.get()) {
        Some(e) if e.ctx == ctx => e.value,
        _ => return Err(CuError::INVALID_HANDLE),
    };
    let spec = match CUgraphNodeType(s.enter(ctx)?.node_info(n)?.0) {
        CU_GRAPH_NODE_TYPE_EVENT_RECORD => NodeSpec::EventRecord(ev),
        CU_GRAPH_NODE_TYPE_WAIT_EVENT => NodeSpec::EventWait(ev),
        _ => return Err(CuError::INVALID_VALUE),
    };
    match r.exec.get() {
        0 => s.enter(ctx)?.node_set(n, spec),
        exec => {
            let (xctx, e, n) = super::exec::exec_node(s, exec, r.node.get())?;
            if xctx != ctx {
                return Err(CuError::INVALID_VALUE);
            }
            super::exec::exec_set(s, exec, r.node.get(), (ctx, e, n), spec)
        }
    }
}

pub(in crate::session) fn graph_node_enabled<E: Executor>(s: &mut Session<E>, r: proto::GraphNodeEnabled, _: &mut Io<'_>) -> CuRes<I32Rep> {
    let (ctx, e, n) = super::exec::exec_node(s, r.exec.get(), r.node.get())?;
    let on = s.enter(ctx)?.node_enabled(e, n)?;
    Ok(I32Rep { value: i32::from(on).into() })
}

pub(in crate::session) fn graph_node_find_in_clone<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphNodeFindInClone,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let clone = r.clone.get();
    let (ctx, g) = s.graph.graph(clone)?;
    let (nctx, _, n) = node(s, r.node.get())?;
    if nctx != ctx {
        return Err(CuError::INVALID_VALUE);
    }
    let found: Node<E> = s.enter(ctx)?.node_in_clone(g, n)?;
    Ok(handle(s.graph.node_id(clone, found)?))
}

pub(in crate::session) fn kernel_node_attr<E: Executor>(
    s: &mut Session<E>,
    r: proto::KernelNodeAttr,
    _: &mut Io<'_>,
) -> CuRes<AttrValueRep> {
    let (ctx, _, n) = node(s, r.node.get())?;
    let mut value = [0u8; 64];
    match r.op.get() {
        NODE_ATTR_COPY => {
            let (src_ctx, _, src) = node(s, r.src.get())?;
            if src_ctx != ctx {
                return Err(CuError::INVALID_CONTEXT);
            }
            s.enter(ctx)?.kernel_node_copy_attrs(n, src)?;
        }
        op => {
            let attr = r.attr.get();
            crate::session::launch::check_attr(attr)?;
            let set = (op != NODE_ATTR_GET).then_some(&r.value);
            value = s.enter(ctx)?.kernel_node_attr(n, attr, set)?;
        }
    }
    Ok(AttrValueRep { value })
}

pub(in crate::session) fn graph_mem_op_node_set<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphMemOpNodeSet<'_>,
    _: &mut Io<'_>,
) -> CuRes<()> {
    let h = r.head;
    let (ctx, _, n) = node(s, h.node.get())?;
    if h.ctx.get() != ctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    let (named, ops) = crate::session::memop::checked(s, r.ops, 0)?;
    if named.is_some_and(|c| c != ctx) {
        return Err(CuError::INVALID_VALUE);
    }
    if CUgraphNodeType(s.enter(ctx)?.node_info(n)?.0) != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP {
        return Err(CuError::INVALID_VALUE);
    }
    match h.exec.get() {
        0 => s.enter(ctx)?.node_set(n, NodeSpec::MemOps(&ops)),
        exec => {
            let found = super::exec::exec_node(s, exec, h.node.get())?;
            super::exec::exec_set(s, exec, h.node.get(), found, NodeSpec::MemOps(&ops))
        }
    }
}
