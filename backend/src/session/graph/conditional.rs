//! Conditional nodes: handles made for a graph of the session, and if,
//! while and switch nodes whose body graphs the driver makes and the node
//! owns (the guest may add nodes to a body and capture into it, never
//! destroy it). A handle is the driver's value, which kernels receive as
//! an argument and set the condition through: it means something only to
//! the graph it was made for, in the session's own context, so a node may
//! use only a handle the session made for its graph.

use super::{CondHandle, CondNode, Owner};
use crate::exec::graph::ExecGraph;
use crate::exec::{CuRes, Executor};
use crate::session::{Io, Session};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, IdsRep, MAX_COND_BODIES, U64Rep};

pub(in crate::session) fn graph_cond_handle<E: Executor>(s: &mut Session<E>, r: proto::GraphCondHandle, _: &mut Io<'_>) -> CuRes<U64Rep> {
    let id = r.graph.get();
    let (ctx, g) = s.graph.graph(id)?;
    if s.graph.cond_handles.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let (default, flags) = (r.default_value.get(), r.flags.get());
    let h = s.enter(ctx)?.cond_handle_create(g, default, flags)?;
    let root = s.graph.root(id);
    s.graph.cond_handles.insert((root, h), CondHandle { graph: id, default, flags });
    Ok(U64Rep { value: h.into() })
}

pub(in crate::session) fn graph_add_cond_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddCondNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<IdsRep> {
    let h = r.head;
    let id = h.graph.get();
    let (ctx, g) = s.graph.graph(id)?;
    let (cond, kind, size) = (h.handle.get(), h.kind.get(), h.size.get());
    if kind > 2 || size == 0 || size > MAX_COND_BODIES || !s.graph.has_cond_handle(id, cond) {
        return Err(CuError::INVALID_VALUE);
    }
    // Bodies nest as deep as a snapshot reads them, no deeper.
    if s.graph.depth(id) >= super::snapshot::MAX_NESTING {
        return Err(CuError::NOT_SUPPORTED);
    }
    let deps = s.graph.nodes_of(id, r.deps.iter().map(|d| d.get()))?;
    let (n, bodies) = s.enter(ctx)?.graph_add_conditional(g, &deps, cond, kind, size)?;
    let registered = s.graph.node_id(id, n).and_then(|node| {
        let mut ids = vec![node];
        for b in bodies {
            ids.push(s.graph.graph_id(ctx, b, Owner::Body { graph: id, node })?);
        }
        s.graph.cond_nodes.insert(node, CondNode { handle: cond, kind, bodies: ids[1..].to_vec() });
        Ok(ids)
    });
    match registered {
        Ok(ids) => Ok(IdsRep { ids }),
        Err(e) => {
            // The tables are full: the node goes again.
            if let Some(node) = s.graph.node_ids_get(ctx, n) {
                s.graph.forget_node(node);
            }
            let _ = s.enter(ctx)?.node_destroy(n);
            Err(e)
        }
    }
}
