//! Rebuilding a snapshot's graphs ([`pvgpu_ctl::snapshot::GraphRec`]) at
//! a restore, every node checked as the command that adds it is, with the
//! guest's graph and node handles; conditional handles made again in the
//! order they were made, so that the driver numbers them as before. The
//! same rebuild makes the copy of an executable graph with conditional
//! nodes at its instantiation ([`build_copy`]), the driver copying none.

use super::snapshot::{Conds, MAX_NESTING, body, handles_of};
use super::{CondHandle, CondNode, CopyCond, Graph, Node, Owner, Recipe, nodes};
use crate::exec::graph::{ExecGraph, NodeSpec};
use crate::exec::{CuRes, Executor};
use crate::session::restore::RestoreError;
use crate::session::{Ctx, Session};
use pvgpu_ctl::snapshot::{Body, CondBody, CondHandleRec, ExecGraphRec, GraphRec, NodeKind, from_hex};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, CopyShape, GraphKernelHead, GraphMemsetHead, MAX_COND_BODIES};
use std::collections::HashMap;

/// `CU_GRAPH_COND_ASSIGN_DEFAULT`, the one flag a handle may have.
const ASSIGN_DEFAULT: u32 = 1;

/// What a fill made beyond its nodes: for a copy (no guest graph), the
/// guest's node handles it rebuilt and the conditional nodes it made; the
/// handle values its conditional nodes may use.
struct Made<E: Executor> {
    named: HashMap<u64, Node<E>>,
    conds: Conds<E>,
    handles: Vec<u64>,
    /// How deep the fill is in child-graph and conditional nodes.
    depth: u32,
}

impl<E: Executor> Made<E> {
    fn new(handles: Vec<u64>) -> Self {
        Made { named: HashMap::new(), conds: HashMap::new(), handles, depth: 0 }
    }
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
    let handles = graphs.iter().map(|g| g.handles.len()).sum::<usize>() + s.graph.cond_handles.len();
    if handles > s.limits.max_objects {
        return Err(inconsistent(format!("{handles} conditional handles, more than a session may hold")));
    }
    for r in graphs {
        let g = s.enter(r.ctx).and_then(|c| c.graph_create()).map_err(failed(format!("graph {:#x}", r.id)))?;
        if s.graph.graph_id_at(r.id, r.ctx, g, Owner::Guest).is_err() {
            let _ = s.enter(r.ctx).map(|c| c.graph_destroy(g));
            return Err(inconsistent(format!("graph handle {:#x} is not one a backend hands out, or comes twice", r.id)));
        }
        let values = make_handles(s, r.ctx, g, &r.handles)?;
        for h in &r.handles {
            s.graph.cond_handles.insert((r.id, h.value), CondHandle { graph: h.graph, default: h.default, flags: h.flags });
        }
        fill(s, r.ctx, g, Some(r.id), &r.body, &mut Made::new(values))?;
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
    let mut extra = Made::new(make_handles(s, x.ctx, copy, &x.handles)?);
    let made = fill(s, x.ctx, copy, None, &x.body, &mut extra)?;
    let at = |i: u32| made.get(i as usize).copied().ok_or_else(|| inconsistent(format!("{what}: node {i} of {}", made.len())));
    let named = x.named.iter().map(|&(id, i)| Ok((id, at(i)?))).collect::<Result<HashMap<u64, Node<E>>, RestoreError>>()?;
    let disabled = x.disabled.iter().map(|&i| at(i)).collect::<Result<std::collections::HashSet<Node<E>>, RestoreError>>()?;
    let host_nodes = super::host::count_host_nodes(s, x.ctx, copy).map_err(failed(what))?;
    let e = s.enter(x.ctx).and_then(|c| c.graph_instantiate(copy, x.flags)).map_err(failed(what))?;
    let (twins, conds, handles) = (HashMap::new(), extra.conds, x.handles.clone());
    let recipe = Some(Recipe { graph: copy, source: 0, named, disabled, twins, conds, handles });
    Ok(super::ExecEntry { ctx: x.ctx, exec: e, host_nodes, alloc_bytes: 0, device: false, flags: x.flags, recipe })
}

/// A copy of session graph `source` (executor graph `g` of context `ctx`)
/// that pvgpu builds itself, for a graph with conditional nodes, which
/// the driver does not copy: read as a checkpoint reads it, rebuilt as a
/// restore does. None if it cannot be (a node a snapshot cannot hold).
pub(super) fn build_copy<E: Executor>(s: &mut Session<E>, ctx: u64, g: Graph<E>, source: u64) -> Option<Recipe<Graph<E>, Node<E>>> {
    if s.graph.graphs.get(source)?.owner != Owner::Guest {
        return None;
    }
    let (body, _) = body(s, ctx, g, &HashMap::new(), 0).ok()?;
    let handles = handles_of(s, source);
    let copy = s.enter(ctx).and_then(|c| c.graph_create()).ok()?;
    let built = make_handles(s, ctx, copy, &handles).and_then(|values| {
        let mut made = Made::new(values);
        fill(s, ctx, copy, None, &body, &mut made).map(|_| made)
    });
    match built {
        Ok(made) => {
            let (twins, conds) = (made.named, made.conds);
            Some(Recipe { graph: copy, source, named: HashMap::new(), disabled: Default::default(), twins, conds, handles })
        }
        Err(e) => {
            tracing::debug!("no copy of graph {source:#x} for checkpoints: {e}");
            let _ = s.enter(ctx).map(|c| c.graph_destroy(copy));
            None
        }
    }
}

/// Makes conditional handles `recs` for root graph `g`, in their order,
/// each with the value it had: their values.
fn make_handles<E: Executor>(s: &mut Session<E>, ctx: u64, g: Graph<E>, recs: &[CondHandleRec]) -> Result<Vec<u64>, RestoreError> {
    let mut values = Vec::with_capacity(recs.len());
    for h in recs {
        if h.flags & !ASSIGN_DEFAULT != 0 {
            return Err(inconsistent(format!("conditional handle flags {:#x}", h.flags)));
        }
        let v = s.enter(ctx).and_then(|c| c.cond_handle_create(g, h.default, h.flags)).map_err(failed("a conditional handle"))?;
        if v != h.value {
            return Err(RestoreError::CondHandle { from: h.value, to: v });
        }
        values.push(v);
    }
    Ok(values)
}

/// Adds `body`'s nodes and edges to graph `g` of context `ctx` (session
/// graph `gid`, whose node handles they get back; with none, a copy, whose
/// nodes `extra` notes); returns its nodes in `body`'s order.
fn fill<E: Executor>(
    s: &mut Session<E>,
    ctx: u64,
    g: Graph<E>,
    gid: Option<u64>,
    body: &Body,
    extra: &mut Made<E>,
) -> Result<Vec<Node<E>>, RestoreError> {
    if extra.depth > MAX_NESTING {
        return Err(inconsistent("graphs nested more than 64 deep in child-graph or conditional nodes".into()));
    }
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
                extra.depth += 1;
                fill(s, ctx, child, cid, body, extra)?;
                extra.depth -= 1;
                note_twin(extra, gid, rec.id, n);
                made.push(n);
                continue;
            }
            NodeKind::Cond { handle, kind, bodies } => {
                let n = add_cond(s, (ctx, g, gid, rec.id), (*handle, *kind, bodies), extra)?;
                note_twin(extra, gid, rec.id, n);
                made.push(n);
                continue;
            }
            kind => add(s, ctx, g, kind).map_err(failed(what()))?,
        };
        if let NodeKind::Kernel { attrs, .. } = &rec.kind {
            set_attrs(s, ctx, n, attrs).map_err(failed(what()))?;
        }
        name_node(s, gid, rec.id, n)?;
        note_twin(extra, gid, rec.id, n);
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

/// Notes the node a copy (no guest graph, `gid` none) made for the
/// guest's node `id`.
fn note_twin<E: Executor>(extra: &mut Made<E>, gid: Option<u64>, id: Option<u64>, n: Node<E>) {
    if let (None, Some(id)) = (gid, id) {
        extra.named.insert(id, n);
    }
}

/// Adds conditional node (`handle`, `kind`, `bodies`) to graph `g` of
/// context `ctx` (session graph `gid`, node `id` there), and fills its
/// bodies: for a guest graph with the guest's handles for them.
fn add_cond<E: Executor>(
    s: &mut Session<E>,
    (ctx, g, gid, id): (u64, Graph<E>, Option<u64>, Option<u64>),
    (handle, kind, bodies): (u64, u32, &[CondBody]),
    extra: &mut Made<E>,
) -> Result<Node<E>, RestoreError> {
    let size = u32::try_from(bodies.len()).ok().filter(|&n| (1..=MAX_COND_BODIES).contains(&n) && kind <= 2);
    let size = size.ok_or_else(|| inconsistent(format!("a conditional node of type {kind} with {} bodies", bodies.len())))?;
    if !extra.handles.contains(&handle) {
        return Err(inconsistent(format!("a conditional node of handle {handle:#x}, which its graph never made")));
    }
    let what = || format!("a conditional node of graph {:#x}", gid.unwrap_or(0));
    let (n, made) = s.enter(ctx).and_then(|c| c.graph_add_conditional(g, &[], handle, kind, size)).map_err(failed(what()))?;
    if made.len() != bodies.len() {
        return Err(failed(what())(CuError::UNKNOWN));
    }
    name_node(s, gid, id, n)?;
    let mut ids = Vec::with_capacity(bodies.len());
    for (b, &bg) in bodies.iter().zip(&made) {
        let bid = match (gid, id, b.graph) {
            (Some(parent), Some(node), Some(bid)) => {
                s.graph.graph_id_at(bid, ctx, bg, Owner::Body { graph: parent, node }).map_err(|_| bad("graph", bid))?;
                Some(bid)
            }
            (Some(_), ..) => return Err(inconsistent("a conditional node of a graph the guest holds, without its handles".into())),
            (None, ..) => None,
        };
        ids.extend(bid);
        extra.depth += 1;
        fill(s, ctx, bg, bid, &b.body, extra)?;
        extra.depth -= 1;
    }
    match (gid, id) {
        (Some(_), Some(node)) => {
            s.graph.cond_nodes.insert(node, CondNode { handle, kind, bodies: ids });
        }
        _ => {
            extra.conds.insert(n, CopyCond { handle, kind, bodies: made });
        }
    }
    Ok(n)
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
        NodeKind::Host { .. } | NodeKind::Child { .. } | NodeKind::Cond { .. } => return Err(CuError::INVALID_VALUE),
    };
    s.enter(ctx)?.graph_add_node(g, &[], spec)
}
