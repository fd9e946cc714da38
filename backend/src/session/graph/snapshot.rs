//! The session's graphs in a snapshot ([`pvgpu_ctl::snapshot::GraphRec`]):
//! each graph the guest holds and what each executable graph runs (its
//! [`super::Recipe`]) read back node by node at a checkpoint, and rebuilt
//! at a restore, every node checked as the command that adds it is, with
//! the guest's graph and node handles.
//!
//! Covered: kernel, copy, memset, empty, child-graph, event, host and
//! memory-operation nodes, their edges, the nodes an executable graph runs
//! disabled. Not covered, and refused by name before anything is read: a
//! capture under way, conditional and memory nodes, executable graphs for
//! launches from the device. A kernel node keeps the launch attributes a
//! guest may set (cluster dimensions, priority, access-policy window...);
//! edge data (ports, programmatic launch edges) is not kept: a rebuilt
//! edge is a plain dependency.

use super::{Graph, Node, Owner, Recipe, nodes, params};
use crate::exec::graph::{ExecGraph, NodeParams, NodeSpec};
use crate::exec::{CuRes, Executor};
use crate::session::checkpoint::CheckpointError;
use crate::session::restore::RestoreError;
use crate::session::{Ctx, Session};
use pvgpu_ctl::snapshot::{Body, ExecGraphRec, GraphRec, NodeKind, NodeRec, from_hex, hex};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, CopyShape, GraphKernelHead, GraphMemsetHead};
use std::collections::HashMap;

/// The session's graphs and executable graphs as a snapshot holds them,
/// once [`coverable`] said it can.
pub(in crate::session) fn describe<E: Executor>(s: &mut Session<E>) -> Result<(Vec<GraphRec>, Vec<ExecGraphRec>), CheckpointError> {
    let held: Vec<(u64, u64, Graph<E>)> =
        s.graph.graphs.iter().filter(|(_, g)| g.owner == Owner::Guest).map(|(id, g)| (id, g.ctx, g.graph)).collect();
    let mut graphs = Vec::with_capacity(held.len());
    for (id, ctx, g) in held {
        let (body, _) = body(s, ctx, g)?;
        graphs.push(GraphRec { id, ctx, body });
    }
    let mut execs = Vec::new();
    let listed: Vec<u64> = s.graph.execs.iter().map(|(id, _)| id).collect();
    for id in listed {
        let x = s.graph.execs.get(id).ok_or(CheckpointError::Unsupported("an executable graph that went away"))?;
        let (ctx, flags) = (x.ctx, x.flags);
        let Some(r) = x.recipe.as_ref() else { return Err(unfollowed()) };
        let (copy, source) = (r.graph, r.source);
        let restored: Vec<(u64, Node<E>)> = r.named.iter().map(|(&k, &v)| (k, v)).collect();
        let disabled: Vec<Node<E>> = r.disabled.iter().copied().collect();
        let (body, order) = body(s, ctx, copy)?;
        let index: HashMap<Node<E>, u32> = order.iter().enumerate().map(|(i, &n)| (n, i as u32)).collect();
        // The guest names the executable graph's nodes by the nodes of the
        // graph it came from (or, restored, by the handles kept then).
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
        let mut disabled: Vec<u32> = disabled.iter().filter_map(|n| index.get(n).copied()).collect();
        disabled.sort_unstable();
        execs.push(ExecGraphRec { id, ctx, flags, body, disabled, named });
    }
    Ok((graphs, execs))
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
    if !s.graph.cond_handles.is_empty() || s.graph.graphs.iter().any(|(_, g)| matches!(g.owner, Owner::Body { .. })) {
        return Err(CheckpointError::Unsupported("conditional graph nodes"));
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

/// Graph `g`'s nodes and edges, and its executor nodes in their order.
fn body<E: Executor>(s: &mut Session<E>, ctx: u64, g: Graph<E>) -> Result<(Body, Vec<Node<E>>), CheckpointError> {
    let device = CheckpointError::Device;
    let order = s.enter(ctx).and_then(|c| c.graph_nodes(g, false)).map_err(device)?;
    let index: HashMap<Node<E>, u32> = order.iter().enumerate().map(|(i, &n)| (n, i as u32)).collect();
    let mut nodes = Vec::with_capacity(order.len());
    for &n in &order {
        let kind = node_kind(s, ctx, n)?;
        nodes.push(NodeRec { id: s.graph.node_ids_get(ctx, n), kind });
    }
    let edges = s.enter(ctx).and_then(|c| c.graph_edges(g)).map_err(device)?;
    let edges = edges.iter().filter_map(|(a, b)| Some([*index.get(a)?, *index.get(b)?])).collect();
    Ok((Body { nodes, edges }, order))
}

/// What node `n` does, in the session's handles.
fn node_kind<E: Executor>(s: &mut Session<E>, ctx: u64, n: Node<E>) -> Result<NodeKind, CheckpointError> {
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
            return Ok(NodeKind::Child { graph, body: body(s, ctx, c)?.0 });
        }
        CU_GRAPH_NODE_TYPE_KERNEL
        | CU_GRAPH_NODE_TYPE_MEMSET
        | CU_GRAPH_NODE_TYPE_MEMCPY
        | CU_GRAPH_NODE_TYPE_EVENT_RECORD
        | CU_GRAPH_NODE_TYPE_WAIT_EVENT
        | CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => s.enter(ctx).and_then(|c| c.node_params(n)).map_err(device)?,
        _ => return Err(CheckpointError::Unsupported("graphs with memory, conditional or external-semaphore nodes")),
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

fn failed(what: impl Into<String>) -> impl FnOnce(CuError) -> RestoreError {
    let what = what.into();
    move |error| RestoreError::Rebuild { what, error }
}

fn inconsistent(what: String) -> RestoreError {
    RestoreError::Inconsistent(what)
}

/// Rebuilds the snapshot's graphs, then its executable graphs, with the
/// guest's handles (after its functions, events and memory).
pub(in crate::session) fn rebuild<E: Executor>(
    s: &mut Session<E>,
    graphs: &[GraphRec],
    execs: &[ExecGraphRec],
) -> Result<(), RestoreError> {
    for r in graphs {
        let g = s.enter(r.ctx).and_then(|c| c.graph_create()).map_err(failed(format!("graph {:#x}", r.id)))?;
        if s.graph.graph_id_at(r.id, r.ctx, g, Owner::Guest).is_err() {
            let _ = s.enter(r.ctx).map(|c| c.graph_destroy(g));
            return Err(inconsistent(format!("graph handle {:#x} is not one a backend hands out, or comes twice", r.id)));
        }
        fill(s, r.ctx, g, Some(r.id), &r.body)?;
    }
    for x in execs {
        rebuild_exec(s, x)?;
    }
    Ok(())
}

fn rebuild_exec<E: Executor>(s: &mut Session<E>, x: &ExecGraphRec) -> Result<(), RestoreError> {
    let what = format!("executable graph {:#x}", x.id);
    if x.flags & !super::exec::INSTANTIATE_FLAGS != 0 || x.flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64 != 0 {
        return Err(inconsistent(format!("{what}: instantiation flags {:#x}", x.flags)));
    }
    let copy = s.enter(x.ctx).and_then(|c| c.graph_create()).map_err(failed(what.clone()))?;
    let entry = match instantiate_copy(s, x, copy, &what) {
        Ok(entry) => entry,
        Err(e) => {
            let _ = s.enter(x.ctx).map(|c| c.graph_destroy(copy));
            return Err(e);
        }
    };
    let (e, off): (_, Vec<Node<E>>) = (entry.exec, entry.recipe.iter().flat_map(|r| r.disabled.iter().copied()).collect());
    if s.graph.execs.insert_at(x.id, entry).is_err() {
        let c = s.enter(x.ctx).map_err(failed(what.clone()))?;
        let _ = c.graph_exec_destroy(e);
        let _ = c.graph_destroy(copy);
        return Err(inconsistent(format!("executable graph handle {:#x} is not one a backend hands out, or comes twice", x.id)));
    }
    for n in off {
        s.enter(x.ctx).and_then(|c| c.node_enable(e, n, false)).map_err(failed(what.clone()))?;
    }
    Ok(())
}

/// Fills `copy` with what executable graph `x` runs and instantiates it:
/// the session's entry for it, the copy as its recipe.
fn instantiate_copy<E: Executor>(s: &mut Session<E>, x: &ExecGraphRec, copy: Graph<E>, what: &str) -> Result<super::Exec<E>, RestoreError> {
    let made = fill(s, x.ctx, copy, None, &x.body)?;
    let at = |i: u32| made.get(i as usize).copied().ok_or_else(|| inconsistent(format!("{what}: node {i} of {}", made.len())));
    let named = x.named.iter().map(|&(id, i)| Ok((id, at(i)?))).collect::<Result<HashMap<u64, Node<E>>, RestoreError>>()?;
    let disabled = x.disabled.iter().map(|&i| at(i)).collect::<Result<std::collections::HashSet<Node<E>>, RestoreError>>()?;
    let host_nodes = super::host::count_host_nodes(s, x.ctx, copy).map_err(failed(what))?;
    let e = s.enter(x.ctx).and_then(|c| c.graph_instantiate(copy, x.flags)).map_err(failed(what))?;
    let recipe = Some(Recipe { graph: copy, source: 0, named, disabled });
    Ok(super::ExecEntry { ctx: x.ctx, exec: e, host_nodes, alloc_bytes: 0, device: false, flags: x.flags, recipe })
}

/// Adds `body`'s nodes and edges to graph `g` of context `ctx` (session
/// graph `gid`, whose node handles they get back); returns its nodes in
/// `body`'s order.
fn fill<E: Executor>(s: &mut Session<E>, ctx: u64, g: Graph<E>, gid: Option<u64>, body: &Body) -> Result<Vec<Node<E>>, RestoreError> {
    let mut made = Vec::with_capacity(body.nodes.len());
    for rec in &body.nodes {
        let what = || format!("a node of graph {:#x}", gid.unwrap_or(0));
        let n = match &rec.kind {
            NodeKind::Child { graph, body } => {
                // The child node gets an empty graph and is filled in
                // place, so that its nodes are the ones the guest named.
                let empty = s.enter(ctx).and_then(|c| c.graph_create()).map_err(failed(what()))?;
                let n = s.enter(ctx).and_then(|c| c.graph_add_node(g, &[], NodeSpec::Child(empty)));
                let _ = s.enter(ctx).map(|c| c.graph_destroy(empty));
                let n = n.map_err(failed(what()))?;
                let child = s.enter(ctx).and_then(|c| c.node_info(n)).map_err(failed(what()))?.1;
                let child = child.ok_or_else(|| inconsistent("a child-graph node without its graph".into()))?;
                name_node(s, gid, rec.id, n)?;
                let cid = match (graph, gid, rec.id) {
                    (Some(cid), Some(parent), Some(node)) => {
                        s.graph.graph_id_at(*cid, ctx, child, Owner::Node { graph: parent, node }).map_err(|_| bad("graph", *cid))?;
                        Some(*cid)
                    }
                    _ => None,
                };
                fill(s, ctx, child, cid, body)?;
                made.push(n);
                continue;
            }
            kind => add(s, ctx, g, kind).map_err(failed(what()))?,
        };
        if let NodeKind::Kernel { attrs, .. } = &rec.kind {
            set_attrs(s, ctx, n, attrs).map_err(failed(what()))?;
        }
        name_node(s, gid, rec.id, n)?;
        made.push(n);
    }
    let ends = |i: u32| made.get(i as usize).copied().ok_or_else(|| inconsistent(format!("an edge to node {i} of {}", made.len())));
    let (mut from, mut to) = (Vec::with_capacity(body.edges.len()), Vec::with_capacity(body.edges.len()));
    for &[a, b] in &body.edges {
        from.push(ends(a)?);
        to.push(ends(b)?);
    }
    if !from.is_empty() {
        s.enter(ctx).and_then(|c| c.graph_edges_change(g, &from, &to, false)).map_err(failed("a graph's edges"))?;
    }
    Ok(made)
}

/// Sets a rebuilt kernel node's launch attributes, each one a guest may
/// set.
fn set_attrs<E: Executor>(s: &mut Session<E>, ctx: u64, n: Node<E>, attrs: &[(u32, String)]) -> CuRes<()> {
    for (id, value) in attrs {
        crate::session::launch::check_attr(*id)?;
        let value: [u8; 64] = from_hex(value).and_then(|v| v.try_into().ok()).ok_or(CuError::INVALID_VALUE)?;
        s.enter(ctx)?.kernel_node_attr(n, *id, Some(&value))?;
    }
    Ok(())
}

fn bad(what: &'static str, id: u64) -> RestoreError {
    inconsistent(format!("{what} handle {id:#x} is not one a backend hands out, or comes twice"))
}

fn name_node<E: Executor>(s: &mut Session<E>, gid: Option<u64>, id: Option<u64>, n: Node<E>) -> Result<(), RestoreError> {
    match (gid, id) {
        (Some(g), Some(id)) => s.graph.node_id_at(id, g, n).map_err(|_| bad("node", id)),
        _ => Ok(()),
    }
}

/// Adds the node `kind` describes to `g`, checked as the command that adds
/// it is (functions, events and every byte it touches are the session's).
fn add<E: Executor>(s: &mut Session<E>, ctx: u64, g: Graph<E>, kind: &NodeKind) -> CuRes<Node<E>> {
    let ops;
    let params;
    let mut layout = Vec::new();
    let spec: NodeSpec<'_, Ctx<E>> = match kind {
        NodeKind::Kernel { function, grid, block, shared_mem, params: hexed, .. } => {
            params = from_hex(hexed).ok_or(CuError::INVALID_VALUE)?;
            let head = GraphKernelHead {
                function: (*function).into(),
                grid: grid.map(Into::into),
                block: block.map(Into::into),
                shared_mem: (*shared_mem).into(),
                ..Default::default()
            };
            let (fctx, spec) = nodes::kernel(s, &head, &params, &mut layout)?;
            if fctx != ctx {
                return Err(CuError::INVALID_CONTEXT);
            }
            spec
        }
        NodeKind::Memset { dst, pitch, width, height, value, elem_size } => {
            let head = GraphMemsetHead {
                ctx: ctx.into(),
                dst: (*dst).into(),
                pitch: (*pitch).into(),
                width: (*width).into(),
                height: (*height).into(),
                value: (*value).into(),
                elem_size: (*elem_size).into(),
                ..Default::default()
            };
            nodes::memset_spec(s, &head)?
        }
        NodeKind::Copy { dst, src, width, height, depth } => {
            let shape = CopyShape {
                dst: dst[0].into(),
                dst_pitch: dst[1].into(),
                dst_rows: dst[2].into(),
                src: src[0].into(),
                src_pitch: src[1].into(),
                src_rows: src[2].into(),
                width: (*width).into(),
                height: (*height).into(),
                depth: (*depth).into(),
            };
            nodes::copy_spec(s, ctx, &shape)?
        }
        NodeKind::Empty => NodeSpec::Empty,
        NodeKind::EventRecord { event } | NodeKind::EventWait { event } => {
            let ev = match s.events.get(*event) {
                Some(e) if e.ctx == ctx => e.value,
                _ => return Err(CuError::INVALID_HANDLE),
            };
            if matches!(kind, NodeKind::EventWait { .. }) { NodeSpec::EventWait(ev) } else { NodeSpec::EventRecord(ev) }
        }
        NodeKind::MemOps { ops: recs } => {
            let wire = recs
                .iter()
                .map(|&[kind, flags, addr, value]| {
                    let word = |v: u64| u32::try_from(v).map_err(|_| CuError::INVALID_VALUE);
                    Ok(proto::MemOp { kind: word(kind)?.into(), flags: word(flags)?.into(), addr: addr.into(), value: value.into() })
                })
                .collect::<CuRes<Vec<_>>>()?;
            let (named, checked) = crate::session::memop::checked(s, &wire, 0)?;
            if named.is_some_and(|c| c != ctx) {
                return Err(CuError::INVALID_VALUE);
            }
            ops = checked;
            NodeSpec::MemOps(&ops)
        }
        NodeKind::Host { func, data } if *func != 0 => NodeSpec::Host { func: *func, data: *data },
        NodeKind::Host { .. } | NodeKind::Child { .. } => return Err(CuError::INVALID_VALUE),
    };
    s.enter(ctx)?.graph_add_node(g, &[], spec)
}
