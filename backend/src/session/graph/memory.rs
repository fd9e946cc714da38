//! Graph memory: allocation and free nodes, added by hand or captured
//! (`cuMemAllocAsync`/`cuMemFreeAsync` on a capturing stream), and the
//! device's graph-memory attributes.
//!
//! The driver maps graph memory when a graph runs, from a pool of the
//! process, and keeps what a launch leaves allocated until it is freed.
//! The session counts it through its measured device footprint, which is
//! per session only where a process serves one session (process
//! isolation, the default); elsewhere graph memory is not offered. Before
//! a launch, the allocations the graph makes beyond what the pool already
//! holds must fit in the quota; after it, the footprint is measured again.
//! An allocation node's address is a device range of the session from the
//! node's creation, so nodes and work that name it are checked as for any
//! allocation.

use super::{Graph, handle};
use crate::exec::graph::{ExecGraph, NodeSpec};
use crate::exec::{CuRes, Executor};
use crate::session::{Alloc, AllocKind, Io, Session};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, GraphMemNodeRep, MemNodeRep, U64Rep};

/// Whether the session may use graph memory: only where its footprint is
/// measured.
pub(in crate::session) fn graph_memory_allowed<E: Executor>(s: &Session<E>) -> bool {
    s.own_process()
}

pub(in crate::session) fn graph_add_mem_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddMemNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<GraphMemNodeRep> {
    let h = r.head;
    let id = h.graph.get();
    let (ctx, g) = s.graph.graph(id)?;
    let deps = s.graph.nodes_of(id, r.deps.iter().map(|d| d.get()))?;
    if !graph_memory_allowed(s) {
        return Err(CuError::NOT_SUPPORTED);
    }
    let (n, dptr) = match h.kind.get() {
        0 => {
            let size = h.size.get();
            if size == 0 {
                return Err(CuError::INVALID_VALUE);
            }
            if s.over_quota(size) || s.allocs.len() >= s.limits.max_objects {
                return Err(CuError::OUT_OF_MEMORY);
            }
            let (n, dptr) = s.enter(ctx)?.graph_add_mem_alloc(g, &deps, size)?;
            s.allocs.insert(dptr, Alloc { len: size, ctx, kind: AllocKind::Graph });
            (n, dptr)
        }
        1 => {
            let dptr = h.dptr.get();
            match s.allocs.get(&dptr) {
                Some(a) if a.kind == AllocKind::Graph && a.ctx == ctx => {}
                _ => return Err(CuError::INVALID_VALUE),
            }
            (s.enter(ctx)?.graph_add_node(g, &deps, NodeSpec::MemFree { dptr })?, dptr)
        }
        _ => return Err(CuError::INVALID_VALUE),
    };
    let node = handle(s.graph.node_id(id, n)?).handle;
    Ok(GraphMemNodeRep { node, dptr: dptr.into() })
}

pub(in crate::session) fn mem_node_params<E: Executor>(s: &mut Session<E>, r: proto::MemNodeParams, _: &mut Io<'_>) -> CuRes<MemNodeRep> {
    let n = s.graph.nodes.get(r.node.get()).ok_or(CuError::INVALID_VALUE)?;
    let (ctx, node) = (n.ctx, n.node);
    let (dptr, size) = s.enter(ctx)?.mem_node_get(node)?;
    Ok(MemNodeRep { dptr: dptr.into(), size: size.into() })
}

/// Graph-memory attributes of the session's device, a high-water mark
/// reset, or a trim. Where graph memory is not offered, every amount is 0.
pub(in crate::session) fn graph_mem_attr<E: Executor>(s: &mut Session<E>, r: proto::GraphMemAttr, _: &mut Io<'_>) -> CuRes<U64Rep> {
    let (attr, op) = (r.attr.get(), r.op.get());
    if op == 1 && !matches!(CUgraphMem_attribute(attr), CU_GRAPH_MEM_ATTR_USED_MEM_HIGH | CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
        return Err(CuError::INVALID_VALUE);
    }
    s.enter(r.ctx.get())?;
    if !graph_memory_allowed(s) {
        return Ok(U64Rep { value: 0.into() });
    }
    let v = ctx_graph_mem(s, r.ctx.get(), attr, op)?;
    if op == 2 {
        s.remeasure();
    }
    Ok(U64Rep { value: v.into() })
}

fn ctx_graph_mem<E: Executor>(s: &mut Session<E>, ctx: u64, attr: u32, op: u32) -> CuRes<u64> {
    s.enter(ctx)?.graph_mem(attr, op)
}

/// Bytes the allocation nodes of graph `g` (child graphs included) ask
/// for.
pub(super) fn alloc_bytes<E: Executor>(s: &mut Session<E>, ctx: u64, g: Graph<E>) -> CuRes<u64> {
    let mut bytes = 0u64;
    let mut stack = vec![g];
    while let Some(g) = stack.pop() {
        let c = s.enter(ctx)?;
        for n in c.graph_nodes(g, false)? {
            match c.node_info(n)? {
                (kind, _) if kind == CU_GRAPH_NODE_TYPE_MEM_ALLOC.0 => bytes = bytes.saturating_add(c.mem_node_get(n)?.1),
                (_, Some(child)) => stack.push(child),
                _ => {}
            }
        }
    }
    Ok(bytes)
}

/// Before launching an executable graph whose allocation nodes ask for
/// `bytes`: what the process's pool does not hold yet must fit in the
/// quota.
pub(super) fn check_launch<E: Executor>(s: &mut Session<E>, ctx: u64, bytes: u64) -> CuRes<()> {
    if bytes == 0 {
        return Ok(());
    }
    let reserved = ctx_graph_mem(s, ctx, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT.0, 0)?;
    if s.over_quota(bytes.saturating_sub(reserved)) {
        return Err(CuError::OUT_OF_MEMORY);
    }
    Ok(())
}
