//! Host nodes: the program's functions in its graphs, added by hand or
//! captured with `cuLaunchHostFunc`, run in the program at every launch
//! ([`crate::exec::host_call`]). The function and data are the program's
//! values, kept and handed back, never called here. The serving loop runs
//! the calls while the program waits in `HostCallWait`.

use super::{Node, handle};
use crate::exec::graph::{ExecGraph, NodeSpec};
use crate::exec::{CuRes, Executor};
use crate::session::{Io, Session};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, HandleRep, HostNodeRep};

pub(in crate::session) fn graph_add_host_node<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphAddHostNode<'_>,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let h = r.head;
    let id = h.graph.get();
    let (ctx, g) = s.graph.graph(id)?;
    let deps = s.graph.nodes_of(id, r.deps.iter().map(|d| d.get()))?;
    let spec = host_spec(h.func.get(), h.data.get())?;
    let n = s.enter(ctx)?.graph_add_node(g, &deps, spec)?;
    Ok(handle(s.graph.node_id(id, n)?))
}

/// A host node's spec; a null function is refused, as the driver does.
fn host_spec<C: ExecGraph>(func: u64, data: u64) -> CuRes<NodeSpec<'static, C>> {
    if func == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(NodeSpec::Host { func, data })
}

pub(in crate::session) fn host_node_params<E: Executor>(
    s: &mut Session<E>,
    r: proto::HostNodeParams,
    _: &mut Io<'_>,
) -> CuRes<HostNodeRep> {
    let n = s.graph.nodes.get(r.node.get()).ok_or(CuError::INVALID_VALUE)?;
    let (ctx, node): (u64, Node<E>) = (n.ctx, n.node);
    let (func, data) = (r.func.get(), r.data.get());
    match r.op.get() {
        0 => {
            let (func, data) = s.enter(ctx)?.host_node_get(node)?;
            return Ok(HostNodeRep { func: func.into(), data: data.into() });
        }
        1 => {
            host_spec::<crate::session::Ctx<E>>(func, data)?;
            s.enter(ctx)?.host_node_set(node, func, data)?;
        }
        _ => {
            let found = super::exec::exec_node(s, r.exec.get(), r.node.get())?;
            let spec = host_spec(func, data)?;
            super::exec::exec_set(s, r.exec.get(), r.node.get(), found, spec)?;
        }
    }
    Ok(HostNodeRep { func: func.into(), data: data.into() })
}

/// `cuLaunchHostFunc` on a capturing stream (the program runs host
/// functions of streams that are not capturing itself); a stream callback
/// there is refused and invalidates the capture, as the driver does.
pub(in crate::session) fn launch_host_func<E: Executor>(s: &mut Session<E>, r: proto::LaunchHostFunc, _: &mut Io<'_>) -> CuRes<()> {
    let st = s.streams.get(r.stream.get()).ok_or(CuError::INVALID_HANDLE)?;
    let (ctx, st) = (st.ctx, st.value);
    if !super::capturing(s, ctx, st)? {
        return Err(CuError::INVALID_VALUE);
    }
    if r.callback.get() == 1 {
        s.enter(ctx)?.invalidate_capture(st);
        return Err(CuError::STREAM_CAPTURE_UNSUPPORTED);
    }
    let Ok(NodeSpec::Host { func, data }) = host_spec::<crate::session::Ctx<E>>(r.func.get(), r.data.get()) else {
        return Err(CuError::INVALID_VALUE);
    };
    s.enter(ctx)?.launch_host_func(st, func, data)
}

/// The serving loop ran the host calls before this handler; nothing is
/// left to do.
pub(in crate::session) fn host_call_wait<E: Executor>(_: &mut Session<E>, _: proto::HostCallWait, _: &mut Io<'_>) -> CuRes<()> {
    Ok(())
}

/// An answer outside `HostCallWait` (the serving loop takes those it waits
/// for itself): one the session never asked for is refused.
pub(in crate::session) fn host_call_done<E: Executor>(s: &mut Session<E>, r: proto::HostCallDone, _: &mut Io<'_>) -> CuRes<()> {
    if s.host_calls.finish(r.id.get()) { Ok(()) } else { Err(CuError::INVALID_VALUE) }
}

/// Host nodes graph `g` of context `ctx` runs, its child graphs' included.
pub(super) fn count_host_nodes<E: Executor>(s: &mut Session<E>, ctx: u64, g: super::Graph<E>) -> CuRes<u32> {
    let mut count = 0u32;
    let mut stack = vec![g];
    while let Some(g) = stack.pop() {
        let c = s.enter(ctx)?;
        for n in c.graph_nodes(g, false)? {
            match c.node_info(n)? {
                (kind, _) if kind == CU_GRAPH_NODE_TYPE_HOST.0 => count = count.saturating_add(1),
                (_, Some(child)) => stack.push(child),
                _ => {}
            }
        }
    }
    Ok(count)
}
