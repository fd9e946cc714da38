//! The session's graphs in a snapshot ([`pvgpu_ctl::snapshot::GraphRec`]):
//! each graph the guest holds and what each executable graph runs (its
//! [`super::Recipe`]) read back node by node at a checkpoint; rebuilt at a
//! restore by [`super::rebuild`].
//!
//! Covered: kernel, copy, memset, empty, child-graph, event, host,
//! memory-operation and conditional nodes (their handles, in the order
//! they were made, and bodies), their edges, the nodes an executable graph
//! runs disabled. Not covered, and refused by name before anything is
//! read: a capture under way, memory nodes, conditional nodes in child
//! graphs, executable graphs for launches from the device. A kernel node
//! keeps the launch attributes a guest may set (cluster dimensions,
//! priority, access-policy window...); edge data (ports, programmatic
//! launch edges) is not kept: a rebuilt edge is a plain dependency.

use super::{CopyCond, Graph, Node, Owner, params};
use crate::exec::graph::{ExecGraph, NodeParams};
use crate::exec::{CuRes, Executor};
use crate::session::Session;
use crate::session::checkpoint::CheckpointError;
use pvgpu_ctl::snapshot::{Body, CondBody, CondHandleRec, ExecGraphRec, GraphRec, NodeKind, NodeRec, hex};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::collections::HashMap;

/// Conditional nodes of a copy pvgpu built, by node.
pub(super) type Conds<E> = HashMap<Node<E>, CopyCond<Graph<E>>>;

/// The session's graphs and executable graphs as a snapshot holds them,
/// once [`coverable`] said it can.
pub(in crate::session) fn describe<E: Executor>(s: &mut Session<E>) -> Result<(Vec<GraphRec>, Vec<ExecGraphRec>), CheckpointError> {
    let held: Vec<(u64, u64, Graph<E>)> =
        s.graph.graphs.iter().filter(|(_, g)| g.owner == Owner::Guest).map(|(id, g)| (id, g.ctx, g.graph)).collect();
    let mut graphs = Vec::with_capacity(held.len());
    for (id, ctx, g) in held {
        let (body, _) = body(s, ctx, g, &HashMap::new(), 0)?;
        graphs.push(GraphRec { id, ctx, body, handles: handles_of(s, id) });
    }
    let mut execs = Vec::new();
    let listed: Vec<u64> = s.graph.execs.iter().map(|(id, _)| id).collect();
    for id in listed {
        let x = s.graph.execs.get(id).ok_or(CheckpointError::Unsupported("an executable graph that went away"))?;
        let (ctx, flags) = (x.ctx, x.flags);
        let Some(r) = x.recipe.as_ref() else { return Err(unfollowed()) };
        let (copy, source) = (r.graph, r.source);
        // The guest names the executable graph's nodes by the nodes of the
        // graph it came from (or, restored, by the handles kept then).
        let restored: Vec<(u64, Node<E>)> = r.named.iter().chain(&r.twins).map(|(&k, &v)| (k, v)).collect();
        let disabled: Vec<Node<E>> = r.disabled.iter().copied().collect();
        let (conds, handles) = (r.conds.clone(), r.handles.clone());
        let (body, order) = body(s, ctx, copy, &conds, 0)?;
        let index: HashMap<Node<E>, u32> = order.iter().enumerate().map(|(i, &n)| (n, i as u32)).collect();
        let mut named: Vec<(u64, u32)> = restored.iter().filter_map(|(id, n)| index.get(n).map(|&i| (*id, i))).collect();
        let sources: Vec<(u64, Node<E>)> =
            s.graph.nodes.iter().filter(|(_, n)| source != 0 && n.graph == source).map(|(id, n)| (id, n.node)).collect();
        // A node added to that graph since has no counterpart: it names
        // nothing the executable graph runs.
        for (nid, n) in sources {
            if let Ok(found) = s.enter(ctx).and_then(|c| c.node_in_clone(copy, n)) {
                named.extend(index.get(&found).map(|&i| (nid, i)));
            }
        }
        named.sort_unstable();
        named.dedup();
        let mut disabled: Vec<u32> = disabled.iter().filter_map(|n| index.get(n).copied()).collect();
        disabled.sort_unstable();
        execs.push(ExecGraphRec { id, ctx, flags, body, disabled, named, handles });
    }
    Ok((graphs, execs))
}

/// The conditional handles numbered with root graph `root`'s, in the order
/// they were made.
pub(super) fn handles_of<E: Executor>(s: &Session<E>, root: u64) -> Vec<CondHandleRec> {
    let of_root = s.graph.cond_handles.range((root, 0)..=(root, u64::MAX));
    of_root.map(|(&(_, value), h)| CondHandleRec { graph: h.graph, value, default: h.default, flags: h.flags }).collect()
}

fn unfollowed() -> CheckpointError {
    CheckpointError::Unsupported(
        "an executable graph whose work pvgpu could not keep a copy of (one with memory nodes, or updated in a way it could not follow)",
    )
}

/// Refuses, by name, graphs a snapshot cannot hold (before the contexts
/// are synchronised for the checkpoint: a capture under way would not
/// survive that).
pub(in crate::session) fn coverable<E: Executor>(s: &mut Session<E>) -> Result<(), CheckpointError> {
    if s.graph.graphs.iter().any(|(_, g)| g.owner == Owner::Capture) {
        return Err(CheckpointError::Unsupported("a stream capture under way"));
    }
    // A handle is kept with the graph that numbers it, one the guest holds.
    if s.graph.cond_handles.keys().any(|&(root, _)| s.graph.graphs.get(root).is_none_or(|g| g.owner != Owner::Guest)) {
        return Err(CheckpointError::Unsupported("conditional nodes in child graphs"));
    }
    for (_, x) in s.graph.execs.iter() {
        if x.device {
            return Err(CheckpointError::Unsupported("executable graphs made for launches from the device"));
        }
        if x.alloc_bytes > 0 || x.recipe.is_none() {
            return Err(unfollowed());
        }
    }
    let streams: Vec<(u64, crate::session::Stream<E>)> = s.streams.iter().map(|(_, st)| (st.ctx, st.value)).collect();
    let ctxs: Vec<u64> = s.ctxs.iter().map(|(id, _)| id).collect();
    let queues = streams.into_iter().map(|(c, st)| (c, Some(st))).chain(ctxs.into_iter().map(|c| (c, None)));
    for (ctx, st) in queues {
        let status = s.enter(ctx).and_then(|c| c.capture_info(st)).map(|i| i.status).map_err(CheckpointError::Device)?;
        if status != 0 {
            return Err(CheckpointError::Unsupported("a stream capture under way"));
        }
    }
    Ok(())
}

/// How deep graphs may nest in child-graph and conditional nodes for a
/// snapshot to read or rebuild them (each level a frame of its walk).
pub(super) const MAX_NESTING: u32 = 64;

/// Graph `g`'s nodes and edges, and its executor nodes in their order
/// (`conds`: the conditional nodes of a copy pvgpu built, if `g` is one or
/// is in one; `depth`: how deep `g` lies in child-graph and conditional
/// nodes).
pub(super) fn body<E: Executor>(
    s: &mut Session<E>,
    ctx: u64,
    g: Graph<E>,
    conds: &Conds<E>,
    depth: u32,
) -> Result<(Body, Vec<Node<E>>), CheckpointError> {
    if depth > MAX_NESTING {
        return Err(CheckpointError::Unsupported("graphs nested more than 64 deep in child-graph or conditional nodes"));
    }
    let device = CheckpointError::Device;
    let order = s.enter(ctx).and_then(|c| c.graph_nodes(g, false)).map_err(device)?;
    let index: HashMap<Node<E>, u32> = order.iter().enumerate().map(|(i, &n)| (n, i as u32)).collect();
    let mut nodes = Vec::with_capacity(order.len());
    for &n in &order {
        let kind = node_kind(s, ctx, n, conds, depth)?;
        nodes.push(NodeRec { id: s.graph.node_ids_get(ctx, n), kind });
    }
    let edges = s.enter(ctx).and_then(|c| c.graph_edges(g)).map_err(device)?;
    let edges = edges.iter().filter_map(|(a, b)| Some([*index.get(a)?, *index.get(b)?])).collect();
    Ok((Body { nodes, edges }, order))
}

/// What node `n` does, in the session's handles.
fn node_kind<E: Executor>(s: &mut Session<E>, ctx: u64, n: Node<E>, conds: &Conds<E>, depth: u32) -> Result<NodeKind, CheckpointError> {
    let device = CheckpointError::Device;
    let unknown = |_| CheckpointError::Unsupported("a graph node naming a function or event the session did not hand out");
    let (kind, child) = s.enter(ctx).and_then(|c| c.node_info(n)).map_err(device)?;
    let params = match CUgraphNodeType(kind) {
        CU_GRAPH_NODE_TYPE_EMPTY => return Ok(NodeKind::Empty),
        CU_GRAPH_NODE_TYPE_HOST => {
            let (func, data) = s.enter(ctx).and_then(|c| c.host_node_get(n)).map_err(device)?;
            return Ok(NodeKind::Host { func, data });
        }
        CU_GRAPH_NODE_TYPE_GRAPH => {
            let c = child.ok_or(CheckpointError::Device(CuError::INVALID_VALUE))?;
            let graph = s.graph.graph_ids_get(ctx, c);
            return Ok(NodeKind::Child { graph, body: body(s, ctx, c, conds, depth + 1)?.0 });
        }
        CU_GRAPH_NODE_TYPE_CONDITIONAL => return cond_kind(s, ctx, n, conds, depth + 1),
        CU_GRAPH_NODE_TYPE_KERNEL
        | CU_GRAPH_NODE_TYPE_MEMSET
        | CU_GRAPH_NODE_TYPE_MEMCPY
        | CU_GRAPH_NODE_TYPE_EVENT_RECORD
        | CU_GRAPH_NODE_TYPE_WAIT_EVENT
        | CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => s.enter(ctx).and_then(|c| c.node_params(n)).map_err(device)?,
        _ => return Err(CheckpointError::Unsupported("graphs with memory or external-semaphore nodes")),
    };
    Ok(match params {
        NodeParams::Kernel { f, dims, args } => {
            let (function, packed) = params::kernel_args(s, ctx, f, args).map_err(unknown)?;
            let mut attrs = Vec::new();
            for id in crate::session::launch::ALLOWED_ATTRS {
                // An attribute the driver does not answer for this node
                // is not set on it.
                match s.enter(ctx).and_then(|c| c.kernel_node_attr(n, id.0, None)) {
                    Ok(v) if v != [0; 64] => attrs.push((id.0, hex(&v))),
                    _ => {}
                }
            }
            let (grid, block, shared_mem) = (dims.grid, dims.block, dims.shared_mem);
            NodeKind::Kernel { function, grid, block, shared_mem, params: hex(&packed), attrs }
        }
        NodeParams::Memset { dst, pitch, width, height, value, elem_size } => {
            NodeKind::Memset { dst, pitch, width, height, value, elem_size }
        }
        NodeParams::Copy(c) if c.dst.host || c.src.host => {
            return Err(CheckpointError::Unsupported("graph copies of the program's pageable memory"));
        }
        NodeParams::Copy(c) => NodeKind::Copy {
            dst: [c.dst.addr, c.dst.pitch, c.dst.rows],
            src: [c.src.addr, c.src.pitch, c.src.rows],
            width: c.width,
            height: c.height,
            depth: c.depth,
        },
        NodeParams::Event { wait, event } => {
            let event = params::event_id(s, ctx, event).map_err(unknown)?;
            if wait { NodeKind::EventWait { event } } else { NodeKind::EventRecord { event } }
        }
        NodeParams::MemOps(ops) => NodeKind::MemOps { ops: ops.iter().map(|o| [o.kind.into(), o.flags.into(), o.addr, o.value]).collect() },
    })
}

/// Conditional node `n`: what the session noted when it made it (the
/// driver tells nothing of a conditional node back), its bodies read.
fn cond_kind<E: Executor>(s: &mut Session<E>, ctx: u64, n: Node<E>, conds: &Conds<E>, depth: u32) -> Result<NodeKind, CheckpointError> {
    // Each body: the guest's handle for it (none in a copy), the graph.
    let bodies: Vec<(Option<u64>, Graph<E>)>;
    let (handle, kind) = match conds.get(&n) {
        Some(c) => {
            bodies = c.bodies.iter().map(|&b| (None, b)).collect();
            (c.handle, c.kind)
        }
        None => {
            let noted = s.graph.node_ids_get(ctx, n).and_then(|id| s.graph.cond_nodes.get(&id)).cloned();
            // One the driver copied into a child graph.
            let c = noted.ok_or(CheckpointError::Unsupported("conditional nodes in child graphs"))?;
            let known = c.bodies.iter().map(|&b| s.graph.graph(b).map(|(_, g)| (Some(b), g))).collect::<CuRes<Vec<_>>>();
            bodies = known.map_err(CheckpointError::Device)?;
            (c.handle, c.kind)
        }
    };
    let mut recs = Vec::with_capacity(bodies.len());
    for (graph, g) in bodies {
        recs.push(CondBody { graph, body: body(s, ctx, g, conds, depth)?.0 });
    }
    Ok(NodeKind::Cond { handle, kind, bodies: recs })
}
