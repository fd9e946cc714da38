//! Executable graphs: instantiation, launches and uploads on the session's
//! streams, updates.

use super::{ExecEntry, GraphExec, Node, Owner, nodes, recipe};
use crate::exec::graph::ExecGraph;
use crate::exec::graph::NodeSpec;
use crate::exec::{CuRes, Executor};
use crate::session::{Io, Session};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, CopyShape, ExecUpdateRep, InstantiateRep, U64Rep};

/// Instantiation flags a guest may pass (an upload at instantiation is a
/// separate `GraphLaunch` with `upload`).
pub(super) const INSTANTIATE_FLAGS: u64 = (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0
    | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0
    | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0) as u64;

pub(in crate::session) fn graph_instantiate<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphInstantiate,
    _: &mut Io<'_>,
) -> CuRes<InstantiateRep> {
    let id = r.graph.get();
    if r.flags.get() & !INSTANTIATE_FLAGS != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let entry = s.graph.graphs.get(id).ok_or(CuError::INVALID_VALUE)?;
    if entry.owner == Owner::Capture {
        return Err(CuError::INVALID_VALUE);
    }
    let (ctx, g) = (entry.ctx, entry.graph);
    let host_nodes = super::host::count_host_nodes(s, ctx, g)?;
    let alloc_bytes = if super::graph_memory_allowed(s) { super::memory::alloc_bytes(s, ctx, g)? } else { 0 };
    let flags = r.flags.get();
    let e = s.enter(ctx)?.graph_instantiate(g, flags)?;
    let device = flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64 != 0;
    let copy = recipe::copy(s, ctx, g, id);
    let copied = copy.as_ref().map(|r| r.graph);
    match s.graph.execs.insert(ExecEntry { ctx, exec: e, host_nodes, alloc_bytes, device, flags, recipe: copy }) {
        Ok(x) => Ok(InstantiateRep { handle: x.into(), host_nodes: host_nodes.into(), reserved: 0.into() }),
        Err(err) => {
            let c = s.enter(ctx)?;
            let _ = c.graph_exec_destroy(e);
            let _ = copied.map(|g| c.graph_destroy(g));
            Err(err)
        }
    }
}

pub(in crate::session) fn graph_launch<E: Executor>(s: &mut Session<E>, r: proto::GraphLaunch, _: &mut Io<'_>) -> CuRes<()> {
    let x = s.graph.execs.get(r.exec.get()).ok_or(CuError::INVALID_VALUE)?;
    let (ctx, e, host_nodes, alloc_bytes) = (x.ctx, x.exec, x.host_nodes, x.alloc_bytes);
    let st = s.stream(r.stream.get(), ctx)?;
    let upload = r.upload.get() == 1;
    super::memory::check_launch(s, ctx, alloc_bytes)?;
    s.enter(ctx)?.graph_launch(e, st, upload)?;
    if let (false, Some(m)) = (upload, s.meter()) {
        m.graph_launch();
    }
    if alloc_bytes > 0 {
        s.remeasure();
    }
    // The end of a launch that runs host nodes is watched while the
    // program waits for them (none runs while the launch is captured).
    let captured = match st {
        Some(st) => super::capturing(s, ctx, st)?,
        None => false,
    };
    if host_nodes > 0 && !upload && !captured {
        s.enter(ctx)?.host_fence(st)?;
    }
    Ok(())
}

/// The handle kernels launch a device-launchable graph by: the driver's
/// own, an address in the backend's process. Only a process that serves
/// this session alone (a worker) hands it out: it says nothing of any
/// other session's, and a kernel that passes another value launches
/// nothing of another session (the device runtime looks it up in the
/// session's own context).
pub(in crate::session) fn graph_device_handle<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphDeviceHandle,
    _: &mut Io<'_>,
) -> CuRes<U64Rep> {
    if !s.own_process() {
        return Err(CuError::NOT_SUPPORTED);
    }
    let x = s.graph.execs.get(r.exec.get()).ok_or(CuError::INVALID_VALUE)?;
    if !x.device {
        return Err(CuError::INVALID_VALUE);
    }
    let (ctx, e) = (x.ctx, x.exec);
    Ok(U64Rep { value: s.enter(ctx)?.graph_device_handle(e)?.into() })
}

pub(in crate::session) fn graph_exec_destroy<E: Executor>(s: &mut Session<E>, r: proto::GraphExecDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let x = s.graph.execs.remove(r.exec.get()).ok_or(CuError::INVALID_VALUE)?;
    let done = s.enter(x.ctx)?.graph_exec_destroy(x.exec);
    recipe::discard(s, x.ctx, x.recipe);
    done
}

/// The context, executable graph and node of (`exec`, `node`): after a
/// restore, the executable graph's own node the guest's handle names.
pub(super) fn exec_node<E: Executor>(s: &Session<E>, exec: u64, node: u64) -> CuRes<(u64, GraphExec<E>, Node<E>)> {
    let x = s.graph.execs.get(exec).ok_or(CuError::INVALID_VALUE)?;
    if let Some(&n) = x.recipe.as_ref().and_then(|r| r.named.get(&node)) {
        return Ok((x.ctx, x.exec, n));
    }
    let n = s.graph.nodes.get(node).ok_or(CuError::INVALID_VALUE)?;
    if n.ctx != x.ctx {
        return Err(CuError::INVALID_VALUE);
    }
    Ok((x.ctx, x.exec, n.node))
}

pub(in crate::session) fn graph_exec_kernel_node_set<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphExecKernelNodeSet<'_>,
    _: &mut Io<'_>,
) -> CuRes<()> {
    let (ctx, e, n) = exec_node(s, r.head.target.get(), r.head.node.get())?;
    let mut layout = Vec::new();
    let (fctx, spec) = nodes::kernel(s, &r.head, r.params, &mut layout)?;
    if fctx != ctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    exec_set(s, r.head.target.get(), r.head.node.get(), (ctx, e, n), spec)
}

/// Sets node `node` (the executor's `n`) of executable graph `exec` to
/// `spec`, and its copy's counterpart with it.
pub(super) fn exec_set<E: Executor>(
    s: &mut Session<E>,
    exec: u64,
    node: u64,
    (ctx, e, n): (u64, GraphExec<E>, Node<E>),
    spec: NodeSpec<'_, crate::session::Ctx<E>>,
) -> CuRes<()> {
    s.enter(ctx)?.exec_node_set(e, n, spec)?;
    recipe::follow(s, exec, node, |c, n| match spec {
        NodeSpec::Host { func, data } => c.host_node_set(n, func, data),
        spec => c.node_set(n, spec),
    });
    Ok(())
}

pub(in crate::session) fn graph_exec_memset_set<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphExecMemsetSet,
    _: &mut Io<'_>,
) -> CuRes<()> {
    if r.exec.get() == 0 {
        // `cuGraphMemsetNodeSetParams`: the node in its graph.
        let (ctx, _, n) = nodes::node(s, r.node.get())?;
        if r.memset.ctx.get() != ctx {
            return Err(CuError::INVALID_CONTEXT);
        }
        let spec = nodes::memset_spec(s, &r.memset)?;
        return s.enter(ctx)?.node_set(n, spec);
    }
    let (ctx, e, n) = exec_node(s, r.exec.get(), r.node.get())?;
    if r.memset.ctx.get() != ctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    let spec = nodes::memset_spec(s, &r.memset)?;
    exec_set(s, r.exec.get(), r.node.get(), (ctx, e, n), spec)
}

pub(in crate::session) fn graph_exec_memcpy_set<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphExecMemcpySet,
    _: &mut Io<'_>,
) -> CuRes<()> {
    let shape = nodes::linear_shape(&r.memcpy);
    copy_set(s, r.exec.get(), r.node.get(), r.memcpy.ctx.get(), &shape)
}

pub(in crate::session) fn graph_copy_node_set<E: Executor>(s: &mut Session<E>, r: proto::GraphCopyNodeSet, _: &mut Io<'_>) -> CuRes<()> {
    copy_set(s, r.exec.get(), r.node.get(), r.ctx.get(), &r.shape)
}

/// Sets copy node `node`, in its graph (`exec` 0: `cuGraphMemcpyNodeSetParams`)
/// or in executable graph `exec`, to a copy of `shape` in context `ctx`.
/// (An executable graph's copy stays one-dimensional: the driver refuses
/// any other there with `CUDA_ERROR_INVALID_VALUE`, measured on the H100,
/// and so does the host double.)
fn copy_set<E: Executor>(s: &mut Session<E>, exec: u64, node: u64, ctx: u64, shape: &CopyShape) -> CuRes<()> {
    let (nctx, e, n) = match exec {
        0 => nodes::node(s, node).map(|(c, _, n)| (c, None, n))?,
        x => exec_node(s, x, node).map(|(c, e, n)| (c, Some(e), n))?,
    };
    if ctx != nctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    let spec = nodes::copy_spec(s, ctx, shape)?;
    match e {
        None => s.enter(ctx)?.node_set(n, spec),
        Some(e) => exec_set(s, exec, node, (ctx, e, n), spec),
    }
}

pub(in crate::session) fn graph_exec_child_set<E: Executor>(s: &mut Session<E>, r: proto::GraphExecChildSet, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, e, n) = exec_node(s, r.exec.get(), r.node.get())?;
    let (gctx, g) = s.graph.graph(r.graph.get())?;
    if gctx != ctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    exec_set(s, r.exec.get(), r.node.get(), (ctx, e, n), NodeSpec::Child(g))
}

pub(in crate::session) fn graph_node_enable<E: Executor>(s: &mut Session<E>, r: proto::GraphNodeEnable, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, e, n) = exec_node(s, r.exec.get(), r.node.get())?;
    let enabled = r.enabled.get() == 1;
    s.enter(ctx)?.node_enable(e, n, enabled)?;
    recipe::follow_enable(s, r.exec.get(), r.node.get(), enabled);
    Ok(())
}

pub(in crate::session) fn graph_exec_update<E: Executor>(
    s: &mut Session<E>,
    r: proto::GraphExecUpdate,
    _: &mut Io<'_>,
) -> CuRes<ExecUpdateRep> {
    let x = s.graph.execs.get(r.exec.get()).ok_or(CuError::INVALID_VALUE)?;
    let (ctx, e) = (x.ctx, x.exec);
    let gid = r.graph.get();
    let (gctx, g) = s.graph.graph(gid)?;
    if gctx != ctx {
        return Err(CuError::INVALID_CONTEXT);
    }
    let (result, node) = s.enter(ctx)?.exec_update(e, g)?;
    if result == CU_GRAPH_EXEC_UPDATE_SUCCESS.0 {
        recipe::replace(s, r.exec.get(), gid);
    }
    let error_node = match node {
        Some(n) => s.graph.node_id(gid, n)?,
        None => 0,
    };
    Ok(ExecUpdateRep { result: result.into(), reserved: 0.into(), error_node: error_node.into() })
}
