//! [`ExecGraph`] of the host test double, on [`super::graph::Graphs`]:
//! handles are numbers, and an executable graph is replayed node by node
//! with the context's own operations.
//!
//! A launch runs at once up to its first host node; there the double
//! queues the host call and holds the rest of the launch back until the
//! program has answered it, when the session next asks
//! ([`ExecGraph::host_work_pending`], while the program waits in
//! `HostCallWait`).

use super::HostContext;
use super::graph::Op;
use crate::exec::graph::{CaptureInfo, Copy3D, ExecGraph, NodeParams, NodeSpec};
use crate::exec::host_call::HostCalls;
use crate::exec::{CuRes, ExecContext, Rect};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// Launched work held back behind a host node.
#[derive(Default)]
pub(super) struct HostWork {
    calls: Option<Arc<HostCalls>>,
    /// What is left to run, in order.
    held: VecDeque<Op>,
    /// The host call the held work waits for.
    waiting: Option<u64>,
    /// Graph memory: the addresses of allocation nodes and captured
    /// allocations, with their sizes. Mapped at each launch reaching the
    /// node; a free node leaves it mapped (the pool keeps it), a free
    /// outside a graph unmaps it.
    pub(super) graph_mem: std::collections::BTreeMap<u64, u64>,
    /// High-water mark of graph memory.
    graph_mem_high: u64,
    /// Held work is being run (work launched meanwhile, from the device,
    /// joins the queue rather than running it again).
    advancing: bool,
}

impl HostContext {
    /// If stream `s` is capturing, records `op` instead of running it
    /// (`true`); a legacy-stream call that waits for the host during a
    /// capture that forbids it fails.
    pub(super) fn captured(&mut self, s: Option<u64>, op: impl FnOnce() -> Op) -> CuRes<bool> {
        match s {
            Some(s) if self.graphs.capturing(Some(s)) => {
                self.graphs.record(s, op())?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The operations of one run of graph `g`, child graphs unrolled, in
    /// a topological order.
    pub(super) fn unroll(&self, g: u64, out: &mut Vec<Op>) -> CuRes<()> {
        for n in self.graphs.topological(g)? {
            if !self.graphs.enabled(n) {
                continue;
            }
            match &self.graphs.graph(g)?.ops[&n] {
                Op::Child(c) => self.unroll(*c, out)?,
                op => out.push(op.clone()),
            }
        }
        Ok(())
    }

    /// Runs graph `g` once: at once up to its first host node.
    fn replay(&mut self, g: u64) -> CuRes<()> {
        let mut ops = Vec::new();
        self.unroll(g, &mut ops)?;
        self.host_work.held.extend(ops);
        self.advance().map(drop)
    }

    /// Runs held work until it is done (`false`) or waits for a host call
    /// the program has not answered (`true`).
    pub(super) fn advance(&mut self) -> CuRes<bool> {
        let was = std::mem::replace(&mut self.host_work.advancing, true);
        let r = self.advance_held();
        self.host_work.advancing = was;
        r
    }

    /// Whether held work is being run.
    pub(super) fn advancing(&self) -> bool {
        self.host_work.advancing
    }

    /// Queues `ops` after the held work.
    pub(super) fn hold(&mut self, ops: Vec<Op>) {
        self.host_work.held.extend(ops);
    }

    fn advance_held(&mut self) -> CuRes<bool> {
        loop {
            if let Some(id) = self.host_work.waiting {
                match &self.host_work.calls {
                    Some(q) if !q.is_finished(id) => return Ok(true),
                    _ => self.host_work.waiting = None,
                }
            }
            let Some(op) = self.host_work.held.pop_front() else { return Ok(false) };
            match op {
                Op::Host { func, data } => self.host_work.waiting = self.host_work.calls.as_ref().and_then(|q| q.queue(func, data)),
                Op::Cond { root, handle, kind, bodies } => match self.cond_run(root, handle, kind, &bodies) {
                    Ok(ops) => ops.into_iter().rev().for_each(|op| self.host_work.held.push_front(op)),
                    Err(e) => {
                        self.host_work.held.clear();
                        return Err(e);
                    }
                },
                op => {
                    if let Err(e) = self.run(op) {
                        self.host_work.held.clear();
                        return Err(e);
                    }
                }
            }
        }
    }

    fn run(&mut self, op: Op) -> CuRes<()> {
        match op {
            Op::Kernel { f, dims, params, layout, .. } => self.launch(f, dims, &params, &layout, &[], None),
            Op::Copy(c) => self.copy_3d(&c),
            Op::Memset { rect, value, elem } => self.memset2d(rect, value, elem),
            Op::Child(c) => self.replay(c),
            Op::EventRecord(e) => self.event_record(e, None),
            Op::MemAlloc { dptr } => self.graph_map(dptr),
            Op::MemOps(ops) => self.run_mem_ops(&ops),
            Op::Empty | Op::EventWait(_) | Op::MemFree { .. } | Op::Host { .. } | Op::Cond { .. } => Ok(()),
        }
    }

    /// Runs a copy node row by row. A host side is the session's data area
    /// or a mirror of the program's memory, mapped for the session's life,
    /// which outlives its graphs.
    fn copy_3d(&mut self, c: &Copy3D) -> CuRes<()> {
        let len = usize::try_from(c.width).map_err(|_| CuError::INVALID_VALUE)?;
        for z in 0..c.depth {
            for y in 0..c.height {
                let (dst, src) = (c.dst.row(y, z), c.src.row(y, z));
                match (c.dst.host, c.src.host) {
                    (false, false) => self.dtod(dst, src, c.width, None, false)?,
                    // SAFETY: as said above; the session checked the span.
                    (false, true) => unsafe { self.htod(dst, src as usize as *const u8, len, None, true)? },
                    // SAFETY: as above.
                    (true, false) => unsafe { self.dtoh(dst as usize as *mut u8, src, len, None, true)? },
                    (true, true) => return Err(CuError::INVALID_VALUE),
                }
            }
        }
        Ok(())
    }

    /// The op a node spec describes.
    pub(super) fn op(spec: NodeSpec<'_, Self>) -> Op {
        match spec {
            NodeSpec::Kernel { f, dims, params, layout } => {
                Op::Kernel { f, dims, params: params.to_vec(), layout: layout.to_vec(), attrs: Vec::new() }
            }
            NodeSpec::Copy(c) => Op::Copy(c),
            NodeSpec::Memset { dst, pitch, width, height, value, elem_size } => {
                Op::Memset { rect: Rect { ptr: dst, pitch, width, height }, value, elem: elem_size }
            }
            NodeSpec::Empty => Op::Empty,
            NodeSpec::Child(c) => Op::Child(c),
            NodeSpec::EventRecord(e) => Op::EventRecord(e),
            NodeSpec::EventWait(e) => Op::EventWait(e),
            NodeSpec::Host { func, data } => Op::Host { func, data },
            NodeSpec::MemFree { dptr } => Op::MemFree { dptr },
            NodeSpec::MemOps(ops) => Op::MemOps(ops.to_vec()),
        }
    }
}

impl ExecGraph for HostContext {
    type Graph = u64;
    type Node = u64;
    type GraphExec = u64;

    fn begin_capture(&mut self, s: u64, mode: u32) -> CuRes<()> {
        self.ok()?;
        self.graphs.begin(s, mode)
    }

    fn begin_capture_to_graph(&mut self, s: u64, g: u64, deps: &[u64], mode: u32) -> CuRes<()> {
        self.ok()?;
        self.graphs.begin_into(s, g, deps, mode)
    }

    fn end_capture(&mut self, s: u64) -> CuRes<u64> {
        self.graphs.end(s)
    }

    fn update_capture_deps(&mut self, s: u64, deps: &[u64], flags: u32) -> CuRes<()> {
        self.ok()?;
        self.graphs.update_deps(s, deps, flags == 1)
    }

    fn invalidate_capture(&mut self, s: u64) {
        self.graphs.invalidate(s);
    }

    fn capture_info(&mut self, s: Option<u64>) -> CuRes<CaptureInfo<Self>> {
        let (status, id, graph, deps) = self.graphs.info_of(s);
        Ok(CaptureInfo { status, id, graph, deps })
    }

    fn exchange_capture_mode(&mut self, mode: u32) -> CuRes<u32> {
        Ok(std::mem::replace(&mut self.graphs.mode, mode))
    }

    fn graph_create(&mut self) -> CuRes<u64> {
        Ok(self.graphs.create())
    }

    fn graph_destroy(&mut self, g: u64) -> CuRes<()> {
        if self.graphs.graph(g)?.borrowed {
            return Err(CuError::INVALID_VALUE);
        }
        self.graphs.destroy(g)
    }

    fn graph_clone(&mut self, g: u64) -> CuRes<u64> {
        // The driver copies no graph with a conditional node (CUDA 13.0,
        // measured on the H200).
        if self.graphs.has_conditional(g)? {
            return Err(CuError::NOT_SUPPORTED);
        }
        let (c, pairs) = self.graphs.copy(g, false)?;
        self.graphs.clones.extend(pairs.into_iter().map(|(original, copy)| ((c, original), copy)));
        Ok(c)
    }

    fn graph_nodes(&mut self, g: u64, roots: bool) -> CuRes<Vec<u64>> {
        let graph = self.graphs.graph(g)?;
        Ok(graph.order.iter().copied().filter(|n| !roots || !graph.edges.iter().any(|(_, b)| b == n)).collect())
    }

    fn graph_edges(&mut self, g: u64) -> CuRes<Vec<(u64, u64)>> {
        Ok(self.graphs.graph(g)?.edges.clone())
    }

    fn node_info(&mut self, n: u64) -> CuRes<(u32, Option<u64>)> {
        self.graphs.info(n)
    }

    fn node_edges(&mut self, n: u64, dependents: bool) -> CuRes<Vec<u64>> {
        let g = self.graphs.owner(n)?;
        let edges = &self.graphs.graph(g)?.edges;
        Ok(edges.iter().filter_map(|&(a, b)| if dependents { (a == n).then_some(b) } else { (b == n).then_some(a) }).collect())
    }

    fn graph_edges_change(&mut self, g: u64, from: &[u64], to: &[u64], remove: bool) -> CuRes<()> {
        self.graphs.edges_change(g, from, to, remove)
    }

    fn node_destroy(&mut self, n: u64) -> CuRes<()> {
        self.graphs.remove_node(n)
    }

    fn graph_dot(&mut self, g: u64, _flags: u32) -> CuRes<Vec<u8>> {
        self.graphs.dot(g)
    }

    fn graph_add_node(&mut self, g: u64, deps: &[u64], spec: NodeSpec<'_, Self>) -> CuRes<u64> {
        self.ok()?;
        self.graphs.add(g, deps, Self::op(spec))
    }

    fn node_set(&mut self, n: u64, spec: NodeSpec<'_, Self>) -> CuRes<()> {
        self.set_node(n, spec)
    }

    fn node_params(&mut self, n: u64) -> CuRes<NodeParams<Self>> {
        self.params_of(n)
    }

    fn node_enabled(&mut self, e: u64, n: u64) -> CuRes<bool> {
        let copy = self.exec_node(e, n)?;
        Ok(self.graphs.enabled(copy))
    }

    fn node_in_clone(&mut self, clone: u64, n: u64) -> CuRes<u64> {
        self.in_clone(clone, n)
    }

    fn kernel_node_attr(&mut self, n: u64, attr: u32, value: Option<&[u8; 64]>) -> CuRes<[u8; 64]> {
        self.node_attr(n, attr, value)
    }

    fn kernel_node_copy_attrs(&mut self, dst: u64, src: u64) -> CuRes<()> {
        self.copy_node_attrs(dst, src)
    }

    fn graph_instantiate(&mut self, g: u64, flags: u64) -> CuRes<u64> {
        self.ok()?;
        self.graphs.topological(g)?;
        if self.cond_unused(g)? {
            return Err(CuError::INVALID_VALUE);
        }
        let (copy, pairs) = self.graphs.copy(g, false)?;
        let e = copy;
        self.graphs.execs.insert(e, copy);
        self.device_instantiated(e, flags);
        // The copy's nodes answer for the original's in updates.
        self.exec_nodes.insert(e, pairs.into_iter().collect());
        Ok(e)
    }

    fn graph_launch(&mut self, e: u64, s: Option<u64>, upload: bool) -> CuRes<()> {
        self.ok()?;
        let g = *self.graphs.execs.get(&e).ok_or(CuError::INVALID_VALUE)?;
        self.device_uploaded(e);
        if upload {
            return Ok(());
        }
        // Launched into a capture: the graph becomes a child-graph node.
        if self.captured(s, || Op::Empty)? {
            return self.record_child(s, g);
        }
        self.cond_defaults(g)?;
        self.replay(g)
    }

    fn graph_device_handle(&mut self, e: u64) -> CuRes<u64> {
        self.device_handle(e)
    }

    fn graph_exec_destroy(&mut self, e: u64) -> CuRes<()> {
        let g = self.graphs.execs.remove(&e).ok_or(CuError::INVALID_VALUE)?;
        self.exec_nodes.remove(&e);
        self.device_gone(e);
        self.graphs.destroy(g)
    }

    fn exec_node_set(&mut self, e: u64, n: u64, spec: NodeSpec<'_, Self>) -> CuRes<()> {
        let copy = self.exec_node(e, n)?;
        let new = match spec {
            // The executable graph runs its own copy of the child.
            NodeSpec::Child(c) => Op::Child(self.graphs.copy(c, true)?.0),
            other => Self::op(other),
        };
        let op = self.graphs.op_mut(copy)?;
        // A copy made pitched at instantiation stays so, as the driver's.
        let pitched = |op: &Op| matches!(op, Op::Copy(c) if c.height != 1 || c.depth != 1);
        if op.kind() != new.kind() || matches!(new, Op::Empty) || pitched(op) || pitched(&new) {
            if let Op::Child(c) = new {
                let _ = self.graphs.destroy(c);
            }
            return Err(CuError::INVALID_VALUE);
        }
        if let Op::Child(old) = std::mem::replace(op, new) {
            self.graphs.destroy(old)?;
        }
        Ok(())
    }

    fn node_enable(&mut self, e: u64, n: u64, enabled: bool) -> CuRes<()> {
        let copy = self.exec_node(e, n)?;
        self.graphs.set_enabled(copy, enabled);
        Ok(())
    }

    fn exec_update(&mut self, e: u64, g: u64) -> CuRes<(u32, Option<u64>)> {
        let copy = *self.graphs.execs.get(&e).ok_or(CuError::INVALID_VALUE)?;
        let (old, new) = (self.graphs.topological(copy)?, self.graphs.topological(g)?);
        if old.len() != new.len() {
            return Ok((CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED.0, None));
        }
        // Same shape, node for node in order: take the new parameters.
        let mut ops = Vec::new();
        for (&o, &n) in old.iter().zip(&new) {
            let (a, b) = (self.graphs.graph(copy)?.ops[&o].clone(), self.graphs.graph(g)?.ops[&n].clone());
            if std::mem::discriminant(&a) != std::mem::discriminant(&b) {
                return Ok((CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED.0, Some(n)));
            }
            match (&a, &b) {
                // The executable graph keeps its own bodies.
                (Op::Cond { handle: h1, kind: k1, bodies: b1, .. }, Op::Cond { handle: h2, kind: k2, bodies: b2, .. }) => {
                    if (h1, k1, b1.len()) != (h2, k2, b2.len()) {
                        return Ok((CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED.0, Some(n)));
                    }
                }
                _ => ops.push((o, b)),
            }
        }
        for (o, op) in ops {
            *self.graphs.op_mut(o)? = op;
        }
        self.exec_nodes.entry(e).or_default().extend(new.into_iter().zip(old));
        Ok((CU_GRAPH_EXEC_UPDATE_SUCCESS.0, None))
    }

    fn attach_host_calls(&mut self, calls: Arc<HostCalls>) {
        self.host_work.calls = Some(calls);
    }

    fn launch_host_func(&mut self, s: u64, func: u64, data: u64) -> CuRes<()> {
        if self.captured(Some(s), || Op::Host { func, data })? { Ok(()) } else { Err(CuError::NOT_SUPPORTED) }
    }

    fn host_node_get(&mut self, n: u64) -> CuRes<(u64, u64)> {
        match self.graphs.op_mut(n)? {
            Op::Host { func, data } => Ok((*func, *data)),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    fn host_node_set(&mut self, n: u64, func: u64, data: u64) -> CuRes<()> {
        match self.graphs.op_mut(n)? {
            op @ Op::Host { .. } => {
                *op = Op::Host { func, data };
                Ok(())
            }
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    fn host_fence(&mut self, _: Option<u64>) -> CuRes<()> {
        Ok(())
    }

    fn host_work_pending(&mut self) -> CuRes<bool> {
        self.advance()
    }

    fn graph_add_mem_alloc(&mut self, g: u64, deps: &[u64], size: u64) -> CuRes<(u64, u64)> {
        self.ok()?;
        self.graphs.graph(g)?;
        let dptr = self.graph_alloc(size)?;
        match self.graphs.add(g, deps, Op::MemAlloc { dptr }) {
            Ok(n) => Ok((n, dptr)),
            Err(e) => {
                self.graph_free(dptr);
                Err(e)
            }
        }
    }

    fn mem_node_get(&mut self, n: u64) -> CuRes<(u64, u64)> {
        match self.graphs.op_mut(n)? {
            Op::MemAlloc { dptr } => {
                let d = *dptr;
                Ok((d, self.host_work.graph_mem.get(&d).copied().unwrap_or(0)))
            }
            Op::MemFree { dptr } => Ok((*dptr, 0)),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    fn cond_handle_create(&mut self, g: u64, default: u32, flags: u32) -> CuRes<u64> {
        self.cond_create(g, default, flags)
    }

    fn graph_add_conditional(&mut self, g: u64, deps: &[u64], handle: u64, kind: u32, size: u32) -> CuRes<(u64, Vec<u64>)> {
        self.ok()?;
        self.graphs.add_conditional(g, deps, handle, kind, size)
    }

    fn graph_mem(&mut self, attr: u32, op: u32) -> CuRes<u64> {
        let current = self.graph_mapped();
        match (op, attr) {
            // Used and reserved are one here: nothing is kept past a free.
            (0, 0 | 2) => Ok(current),
            (0, _) => Ok(self.host_work.graph_mem_high.max(current)),
            (1, 1 | 3) => {
                self.host_work.graph_mem_high = current;
                Ok(0)
            }
            (2, _) => Ok(0),
            _ => Err(CuError::INVALID_VALUE),
        }
    }
}

impl HostContext {
    /// Hands out an address for graph memory, backed when a launch
    /// reaches its allocation node (as a GPU maps it).
    pub(super) fn graph_alloc(&mut self, size: u64) -> CuRes<u64> {
        self.ok()?;
        if size == 0 || usize::try_from(size).is_err() {
            return Err(CuError::INVALID_VALUE);
        }
        let dptr = self.mem.reserve(size).ok_or(CuError::OUT_OF_MEMORY)?;
        self.host_work.graph_mem.insert(dptr, size);
        Ok(dptr)
    }

    /// Maps graph memory at `dptr` again if a free outside a graph unmapped
    /// it (a launch reaching its allocation node).
    fn graph_map(&mut self, dptr: u64) -> CuRes<()> {
        let size = *self.host_work.graph_mem.get(&dptr).ok_or(CuError::INVALID_VALUE)?;
        if !self.mem.allocs.contains_key(&dptr) {
            if size > self.free_bytes() {
                return Err(CuError::OUT_OF_MEMORY);
            }
            self.mem.allocs.insert(dptr, vec![0; size as usize].into());
            self.used.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
            self.held += size;
            self.note_graph_high();
        }
        Ok(())
    }

    /// Bytes of graph memory mapped now.
    fn graph_mapped(&self) -> u64 {
        self.host_work.graph_mem.iter().filter(|(d, _)| self.mem.allocs.contains_key(d)).map(|(_, s)| s).sum()
    }

    fn note_graph_high(&mut self) {
        self.host_work.graph_mem_high = self.host_work.graph_mem_high.max(self.graph_mapped());
    }

    /// Unmaps graph memory (a free outside a graph); the address stays the
    /// graph's.
    pub(super) fn graph_free(&mut self, dptr: u64) {
        if self.host_work.graph_mem.contains_key(&dptr) && self.mem.allocs.contains_key(&dptr) {
            let _ = self.free_unchecked(dptr);
        }
    }
}

impl HostContext {
    /// The copy in executable graph `e` of node `n` of its graph.
    fn exec_node(&self, e: u64, n: u64) -> CuRes<u64> {
        self.exec_nodes.get(&e).and_then(|m| m.get(&n)).copied().ok_or(CuError::INVALID_VALUE)
    }

    /// Replaces the placeholder just recorded on capturing stream `s` with
    /// a node running a copy of graph `g`.
    fn record_child(&mut self, s: Option<u64>, g: u64) -> CuRes<()> {
        let (_, _, _, deps) = self.graphs.info_of(s);
        let Some(&placeholder) = deps.first() else { return Err(CuError::INVALID_VALUE) };
        let (child, _) = self.graphs.copy(g, true)?;
        *self.graphs.op_mut(placeholder)? = Op::Child(child);
        Ok(())
    }
}
