//! Stream capture and graphs of the host test double: what the driver does
//! on a GPU, done here in the open so the whole path runs in CI. Work
//! issued on a capturing stream becomes a node depending on the stream's
//! current dependencies; an event recorded during capture carries them to
//! the streams that wait for it (which join the capture); ending the
//! capture hands back the graph. An executable graph is a private copy,
//! replayed node by node in a topological order (work here runs at once,
//! so one order is as good as any the GPU might choose).

use super::HostFunction;
use crate::exec::{CuRes, LaunchDims, Param, Rect};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::collections::{HashMap, HashSet, VecDeque};

/// What a node does.
#[derive(Clone)]
pub(super) enum Op {
    Kernel {
        f: HostFunction,
        dims: LaunchDims,
        params: Vec<u8>,
        layout: Vec<Param>,
    },
    Memcpy {
        dst: u64,
        src: u64,
        len: u64,
    },
    Memset {
        rect: Rect,
        value: u32,
        elem: u32,
    },
    /// Host memory at a fixed address (the session's data area) to device.
    Htod {
        dst: u64,
        src: usize,
        len: usize,
    },
    /// Device to host memory at a fixed address.
    Dtoh {
        dst: usize,
        src: u64,
        len: usize,
    },
    Empty,
    Child(u64),
    EventRecord(u64),
    EventWait(u64),
    MemAlloc {
        dptr: u64,
    },
    MemFree {
        dptr: u64,
    },
    Host {
        func: u64,
        data: u64,
    },
    /// Stream memory operations.
    MemOps(Vec<crate::exec::MemOp>),
    /// A conditional node: `CUgraphConditionalNodeType` `kind`, the
    /// handle whose value decides, and the body graphs it owns.
    Cond {
        handle: u64,
        kind: u32,
        bodies: Vec<u64>,
    },
}

impl Op {
    /// A DOT label.
    fn label(&self) -> String {
        match self {
            Op::Kernel { dims, .. } => format!("kernel grid {:?} block {:?}", dims.grid, dims.block),
            Op::Memcpy { dst, src, len } => format!("memcpy {len} bytes {src:#x} to {dst:#x}"),
            Op::Memset { rect, value, elem } => {
                format!("memset {:#x} {}x{} of {elem} bytes = {value:#x}", rect.ptr, rect.width, rect.height)
            }
            Op::Htod { dst, len, .. } => format!("memcpy {len} bytes host to {dst:#x}"),
            Op::Dtoh { src, len, .. } => format!("memcpy {len} bytes {src:#x} to host"),
            Op::Empty => "empty".into(),
            Op::Child(g) => format!("graph {g}"),
            Op::EventRecord(e) => format!("record event {e}"),
            Op::EventWait(e) => format!("wait event {e}"),
            Op::MemAlloc { dptr } => format!("alloc {dptr:#x}"),
            Op::MemFree { dptr } => format!("free {dptr:#x}"),
            Op::Host { func, data } => format!("host {func:#x}({data:#x})"),
            Op::Cond { handle, kind, bodies } => format!("conditional {kind} of handle {handle:#x}, bodies {bodies:?}"),
            Op::MemOps(ops) => format!("{} memory operations", ops.len()),
        }
    }

    /// The node type it is.
    pub(super) fn kind(&self) -> CUgraphNodeType {
        match self {
            Op::Kernel { .. } => CU_GRAPH_NODE_TYPE_KERNEL,
            Op::Memcpy { .. } | Op::Htod { .. } | Op::Dtoh { .. } => CU_GRAPH_NODE_TYPE_MEMCPY,
            Op::Memset { .. } => CU_GRAPH_NODE_TYPE_MEMSET,
            Op::Empty => CU_GRAPH_NODE_TYPE_EMPTY,
            Op::Child(_) => CU_GRAPH_NODE_TYPE_GRAPH,
            Op::EventRecord(_) => CU_GRAPH_NODE_TYPE_EVENT_RECORD,
            Op::EventWait(_) => CU_GRAPH_NODE_TYPE_WAIT_EVENT,
            Op::MemAlloc { .. } => CU_GRAPH_NODE_TYPE_MEM_ALLOC,
            Op::MemFree { .. } => CU_GRAPH_NODE_TYPE_MEM_FREE,
            Op::Host { .. } => CU_GRAPH_NODE_TYPE_HOST,
            Op::Cond { .. } => CU_GRAPH_NODE_TYPE_CONDITIONAL,
            Op::MemOps(_) => CU_GRAPH_NODE_TYPE_BATCH_MEM_OP,
        }
    }
}

/// A graph: nodes in the order they were added, and edges.
#[derive(Clone, Default)]
pub(super) struct Graph {
    pub(super) order: Vec<u64>,
    pub(super) ops: HashMap<u64, Op>,
    pub(super) edges: Vec<(u64, u64)>,
    /// Owned by a child-graph or conditional node (destroyed with it,
    /// never alone).
    pub(super) borrowed: bool,
    /// A conditional node's body: work may be captured into it.
    pub(super) body: bool,
}

/// A conditional handle: the graph it was made for, and the value each
/// launch starts with (if it assigns one).
pub(super) struct CondHandle {
    pub(super) graph: u64,
    pub(super) default: Option<u32>,
}

struct Capture {
    id: u64,
    graph: u64,
    deps: Vec<u64>,
    mode: u32,
    origin: u64,
    invalidated: bool,
    /// The capture made its graph (else it captures into the program's).
    owned: bool,
}

/// Every graph, executable graph and capture of one context.
#[derive(Default)]
pub(super) struct Graphs {
    next: u64,
    pub(super) graphs: HashMap<u64, Graph>,
    node_graph: HashMap<u64, u64>,
    pub(super) execs: HashMap<u64, u64>,
    /// Capturing streams.
    captures: HashMap<u64, Capture>,
    /// Events recorded during a capture: its id and the nodes before them.
    marks: HashMap<u64, (u64, Vec<u64>)>,
    /// This thread's capture mode (the session's one thread).
    pub(super) mode: u32,
    /// Nodes of executable graphs that are skipped.
    disabled: HashSet<u64>,
    /// Conditional handles by value.
    pub(super) cond_handles: HashMap<u64, CondHandle>,
    /// The nodes of clones: (clone, original node) to the clone's node.
    pub(super) clones: HashMap<(u64, u64), u64>,
}

impl Graphs {
    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// A new, empty graph.
    pub(super) fn create(&mut self) -> u64 {
        let g = self.id();
        self.graphs.insert(g, Graph::default());
        g
    }

    /// The graph `g`.
    pub(super) fn graph(&self, g: u64) -> CuRes<&Graph> {
        self.graphs.get(&g).ok_or(CuError::INVALID_VALUE)
    }

    fn graph_mut(&mut self, g: u64) -> CuRes<&mut Graph> {
        self.graphs.get_mut(&g).ok_or(CuError::INVALID_VALUE)
    }

    /// Adds `op` to `g` after `deps` (nodes of `g`).
    pub(super) fn add(&mut self, g: u64, deps: &[u64], op: Op) -> CuRes<u64> {
        if deps.iter().any(|d| self.node_graph.get(d) != Some(&g)) {
            return Err(CuError::INVALID_VALUE);
        }
        if let Op::Child(c) = op {
            self.graph(c)?;
        }
        let op = match op {
            // The node runs a copy of the child graph, as the driver's does.
            Op::Child(c) => Op::Child(self.copy(c, true)?.0),
            other => other,
        };
        self.insert(g, deps, op)
    }

    /// A conditional handle for `g`, whose value each launch sets to
    /// `default` (if any).
    pub(super) fn cond_handle(&mut self, g: u64, default: Option<u32>) -> CuRes<u64> {
        self.graph(g)?;
        let h = self.id();
        self.cond_handles.insert(h, CondHandle { graph: g, default });
        Ok(h)
    }

    /// Adds a conditional node of `handle` to `g` after `deps`, with
    /// `size` empty body graphs: the node and its bodies.
    pub(super) fn add_conditional(&mut self, g: u64, deps: &[u64], handle: u64, kind: u32, size: u32) -> CuRes<(u64, Vec<u64>)> {
        if deps.iter().any(|d| self.node_graph.get(d) != Some(&g)) {
            return Err(CuError::INVALID_VALUE);
        }
        let sizes_ok = match CUgraphConditionalNodeType(kind) {
            CU_GRAPH_COND_TYPE_IF => matches!(size, 1 | 2),
            CU_GRAPH_COND_TYPE_WHILE => size == 1,
            CU_GRAPH_COND_TYPE_SWITCH => size >= 1,
            _ => false,
        };
        if !sizes_ok || self.cond_handles.get(&handle).is_none_or(|h| h.graph != g) {
            return Err(CuError::INVALID_VALUE);
        }
        let bodies: Vec<u64> = (0..size)
            .map(|_| {
                let b = self.id();
                self.graphs.insert(b, Graph { borrowed: true, body: true, ..Graph::default() });
                b
            })
            .collect();
        let n = self.insert(g, deps, Op::Cond { handle, kind, bodies: bodies.clone() })?;
        Ok((n, bodies))
    }

    /// Inserts node `op` into `g` after `deps` (checked by the caller).
    fn insert(&mut self, g: u64, deps: &[u64], op: Op) -> CuRes<u64> {
        let n = self.id();
        let graph = self.graph_mut(g)?;
        graph.order.push(n);
        graph.ops.insert(n, op);
        graph.edges.extend(deps.iter().map(|&d| (d, n)));
        self.node_graph.insert(n, g);
        Ok(n)
    }

    /// A copy of graph `g` (child graphs copied too), and each node with
    /// its copy.
    pub(super) fn copy(&mut self, g: u64, borrowed: bool) -> CuRes<(u64, Vec<(u64, u64)>)> {
        let src = self.graph(g)?.clone();
        let c = self.id();
        let mut map = HashMap::new();
        let mut copy = Graph { borrowed, ..Graph::default() };
        for n in &src.order {
            let id = self.id();
            map.insert(*n, id);
            let op = match &src.ops[n] {
                Op::Child(child) => Op::Child(self.copy(*child, true)?.0),
                Op::Cond { handle, kind, bodies } => {
                    let bodies = bodies.iter().map(|b| self.copy_body(*b)).collect::<CuRes<Vec<u64>>>()?;
                    Op::Cond { handle: *handle, kind: *kind, bodies }
                }
                other => other.clone(),
            };
            copy.order.push(id);
            copy.ops.insert(id, op);
            self.node_graph.insert(id, c);
        }
        copy.edges = src.edges.iter().map(|(a, b)| (map[a], map[b])).collect();
        self.graphs.insert(c, copy);
        Ok((c, src.order.iter().map(|n| (*n, map[n])).collect()))
    }

    /// A copy of conditional body `b`.
    fn copy_body(&mut self, b: u64) -> CuRes<u64> {
        let c = self.copy(b, true)?.0;
        self.graph_mut(c)?.body = true;
        Ok(c)
    }

    /// Destroys graph `g` and the graphs its nodes own. Conditional
    /// handles made for it stay: executable graphs made from it use them.
    pub(super) fn destroy(&mut self, g: u64) -> CuRes<()> {
        let graph = self.graphs.remove(&g).ok_or(CuError::INVALID_VALUE)?;
        self.clones.retain(|(clone, _), _| *clone != g);
        for (n, op) in &graph.ops {
            self.node_graph.remove(n);
            self.disabled.remove(n);
            for owned in Self::owned(op) {
                let _ = self.destroy(owned);
            }
        }
        Ok(())
    }

    /// The graphs node `op` owns.
    fn owned(op: &Op) -> Vec<u64> {
        match op {
            Op::Child(c) => vec![*c],
            Op::Cond { bodies, .. } => bodies.clone(),
            _ => Vec::new(),
        }
    }

    /// Whether node `n` runs when its executable graph does.
    pub(super) fn enabled(&self, n: u64) -> bool {
        !self.disabled.contains(&n)
    }

    /// Enables or disables node `n` of an executable graph.
    pub(super) fn set_enabled(&mut self, n: u64, enabled: bool) {
        if enabled {
            self.disabled.remove(&n);
        } else {
            self.disabled.insert(n);
        }
    }

    /// The graph node `n` belongs to.
    pub(super) fn owner(&self, n: u64) -> CuRes<u64> {
        self.node_graph.get(&n).copied().ok_or(CuError::INVALID_VALUE)
    }

    /// The op of node `n`, to change it.
    pub(super) fn op_mut(&mut self, n: u64) -> CuRes<&mut Op> {
        let g = self.owner(n)?;
        self.graph_mut(g)?.ops.get_mut(&n).ok_or(CuError::INVALID_VALUE)
    }

    /// A node's type and child graph.
    pub(super) fn info(&self, n: u64) -> CuRes<(u32, Option<u64>)> {
        let g = self.owner(n)?;
        let op = &self.graph(g)?.ops[&n];
        Ok((op.kind().0, if let Op::Child(c) = op { Some(*c) } else { None }))
    }

    /// Adds or removes edges of `g`.
    pub(super) fn edges_change(&mut self, g: u64, from: &[u64], to: &[u64], remove: bool) -> CuRes<()> {
        if from.iter().chain(to).any(|n| self.node_graph.get(n) != Some(&g)) {
            return Err(CuError::INVALID_VALUE);
        }
        let graph = self.graph_mut(g)?;
        for e in from.iter().copied().zip(to.iter().copied()) {
            match (remove, graph.edges.iter().position(|x| *x == e)) {
                (false, None) => graph.edges.push(e),
                (false, Some(_)) => return Err(CuError::INVALID_VALUE),
                (true, Some(i)) => {
                    graph.edges.remove(i);
                }
                (true, None) => return Err(CuError::INVALID_VALUE),
            }
        }
        Ok(())
    }

    /// Removes node `n` and its edges.
    pub(super) fn remove_node(&mut self, n: u64) -> CuRes<()> {
        let g = self.owner(n)?;
        let graph = self.graph_mut(g)?;
        graph.order.retain(|x| *x != n);
        let op = graph.ops.remove(&n);
        graph.edges.retain(|(a, b)| *a != n && *b != n);
        self.node_graph.remove(&n);
        for owned in op.as_ref().map(Self::owned).unwrap_or_default() {
            self.destroy(owned)?;
        }
        Ok(())
    }

    /// The nodes of `g` in an order that respects its edges; a cycle is
    /// an error.
    pub(super) fn topological(&self, g: u64) -> CuRes<Vec<u64>> {
        let graph = self.graph(g)?;
        let mut indegree: HashMap<u64, usize> = graph.order.iter().map(|n| (*n, 0)).collect();
        for (_, b) in &graph.edges {
            *indegree.get_mut(b).ok_or(CuError::INVALID_VALUE)? += 1;
        }
        let mut ready: VecDeque<u64> = graph.order.iter().copied().filter(|n| indegree[n] == 0).collect();
        let mut out = Vec::with_capacity(graph.order.len());
        while let Some(n) = ready.pop_front() {
            out.push(n);
            for (_, b) in graph.edges.iter().filter(|(a, _)| *a == n) {
                let d = indegree.get_mut(b).ok_or(CuError::INVALID_VALUE)?;
                *d -= 1;
                if *d == 0 {
                    ready.push_back(*b);
                }
            }
        }
        if out.len() != graph.order.len() {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(out)
    }

    /// DOT text of `g`.
    pub(super) fn dot(&self, g: u64) -> CuRes<Vec<u8>> {
        let graph = self.graph(g)?;
        let mut s = format!("digraph graph_{g} {{\n");
        for n in &graph.order {
            s += &format!("  node_{n} [label=\"{n}: {}\"];\n", graph.ops[n].label());
        }
        for (a, b) in &graph.edges {
            s += &format!("  node_{a} -> node_{b};\n");
        }
        s += "}\n";
        Ok(s.into_bytes())
    }

    // Capture.

    /// Whether stream `s` is capturing (invalidated captures count).
    pub(super) fn capturing(&self, s: Option<u64>) -> bool {
        s.is_some_and(|s| self.captures.contains_key(&s))
    }

    /// Whether a capture that forbids unsafe calls is under way.
    pub(super) fn strict_capture(&self) -> bool {
        self.captures.values().any(|c| c.mode != CU_STREAM_CAPTURE_MODE_RELAXED.0)
    }

    /// An unsafe call during a strict capture: every such capture is
    /// invalidated, and the call fails; unless the calling thread is in
    /// relaxed mode, which the driver lets make such calls.
    pub(super) fn refuse_unsafe(&mut self) -> CuRes<()> {
        if !self.strict_capture() || self.mode == CU_STREAM_CAPTURE_MODE_RELAXED.0 {
            return Ok(());
        }
        for c in self.captures.values_mut().filter(|c| c.mode != CU_STREAM_CAPTURE_MODE_RELAXED.0) {
            c.invalidated = true;
        }
        Err(CuError::STREAM_CAPTURE_UNSUPPORTED)
    }

    /// Synchronising the context waits for capturing streams too: illegal
    /// in any capture mode, it invalidates every capture.
    pub(super) fn refuse_sync(&mut self) -> CuRes<()> {
        if self.captures.is_empty() {
            return Ok(());
        }
        self.captures.values_mut().for_each(|c| c.invalidated = true);
        Err(CuError::STREAM_CAPTURE_UNSUPPORTED)
    }

    /// Invalidates the capture of stream `s` (an illegal call on it).
    pub(super) fn invalidate(&mut self, s: u64) -> CuError {
        if let Some(id) = self.captures.get(&s).map(|c| c.id) {
            self.captures.values_mut().filter(|c| c.id == id).for_each(|c| c.invalidated = true);
        }
        CuError::STREAM_CAPTURE_UNSUPPORTED
    }

    /// Records `op` as work on capturing stream `s`.
    pub(super) fn record(&mut self, s: u64, op: Op) -> CuRes<u64> {
        let c = self.captures.get(&s).ok_or(CuError::INVALID_VALUE)?;
        if c.invalidated {
            return Err(CuError::STREAM_CAPTURE_INVALIDATED);
        }
        let (g, deps) = (c.graph, c.deps.clone());
        let n = self.add(g, &deps, op)?;
        if let Some(c) = self.captures.get_mut(&s) {
            c.deps = vec![n];
        }
        Ok(n)
    }

    pub(super) fn begin(&mut self, s: u64, mode: u32) -> CuRes<()> {
        if self.captures.contains_key(&s) {
            return Err(CuError::ILLEGAL_STATE);
        }
        let graph = self.create();
        let id = self.id();
        self.captures.insert(s, Capture { id, graph, deps: Vec::new(), mode, origin: s, invalidated: false, owned: true });
        Ok(())
    }

    /// Begins a capture into graph `g`, after its nodes `deps`.
    pub(super) fn begin_into(&mut self, s: u64, g: u64, deps: &[u64], mode: u32) -> CuRes<()> {
        if self.captures.contains_key(&s) {
            return Err(CuError::ILLEGAL_STATE);
        }
        let graph = self.graph(g)?;
        if deps.iter().any(|d| self.node_graph.get(d) != Some(&g)) || (graph.borrowed && !graph.body) {
            return Err(CuError::INVALID_VALUE);
        }
        let id = self.id();
        self.captures.insert(s, Capture { id, graph: g, deps: deps.to_vec(), mode, origin: s, invalidated: false, owned: false });
        Ok(())
    }

    /// What the next work captured on `s` follows: `deps` added, or
    /// instead of what it followed (`set`).
    pub(super) fn update_deps(&mut self, s: u64, deps: &[u64], set: bool) -> CuRes<()> {
        let c = self.captures.get(&s).ok_or(CuError::ILLEGAL_STATE)?;
        if deps.iter().any(|d| self.node_graph.get(d) != Some(&c.graph)) {
            return Err(CuError::INVALID_VALUE);
        }
        let c = self.captures.get_mut(&s).ok_or(CuError::ILLEGAL_STATE)?;
        if set {
            c.deps.clear();
        }
        for &d in deps {
            if !c.deps.contains(&d) {
                c.deps.push(d);
            }
        }
        Ok(())
    }

    pub(super) fn end(&mut self, s: u64) -> CuRes<u64> {
        let c = self.captures.get(&s).ok_or(CuError::ILLEGAL_STATE)?;
        if c.origin != s {
            return Err(CuError::STREAM_CAPTURE_UNMATCHED);
        }
        let (id, graph, invalidated, owned) = (c.id, c.graph, c.invalidated, c.owned);
        let unjoined = self.captures.iter().any(|(&o, other)| o != s && other.id == id && !self.joined(other, c));
        let streams: Vec<u64> = self.captures.iter().filter(|(_, x)| x.id == id).map(|(&o, _)| o).collect();
        for o in streams {
            self.captures.remove(&o);
        }
        self.marks.retain(|_, (cid, _)| *cid != id);
        if invalidated || unjoined {
            // The driver answers an unjoined fork as it answers any
            // invalidated capture.
            if owned {
                let _ = self.destroy(graph);
            }
            return Err(CuError::STREAM_CAPTURE_INVALIDATED);
        }
        Ok(graph)
    }

    /// Whether every node a forked stream added precedes the origin's
    /// current dependencies.
    fn joined(&self, forked: &Capture, origin: &Capture) -> bool {
        let Ok(graph) = self.graph(origin.graph) else { return false };
        let mut before: HashSet<u64> = origin.deps.iter().copied().collect();
        let mut stack: Vec<u64> = origin.deps.clone();
        while let Some(n) = stack.pop() {
            for (a, _) in graph.edges.iter().filter(|(_, b)| *b == n) {
                if before.insert(*a) {
                    stack.push(*a);
                }
            }
        }
        forked.deps.iter().all(|d| before.contains(d))
    }

    /// (status, id, graph, deps) of stream `s`.
    pub(super) fn info_of(&self, s: Option<u64>) -> (u32, u64, Option<u64>, Vec<u64>) {
        match s.and_then(|s| self.captures.get(&s)) {
            None => (CU_STREAM_CAPTURE_STATUS_NONE.0, 0, None, Vec::new()),
            Some(c) if c.invalidated => (CU_STREAM_CAPTURE_STATUS_INVALIDATED.0, c.id, Some(c.graph), Vec::new()),
            Some(c) => (CU_STREAM_CAPTURE_STATUS_ACTIVE.0, c.id, Some(c.graph), c.deps.clone()),
        }
    }

    /// An event recorded on capturing stream `s`: it carries the
    /// stream's dependencies to whoever waits for it.
    pub(super) fn mark(&mut self, e: u64, s: u64) -> CuRes<()> {
        let c = self.captures.get(&s).ok_or(CuError::INVALID_VALUE)?;
        self.marks.insert(e, (c.id, c.deps.clone()));
        Ok(())
    }

    /// Event `e` was recorded outside any capture.
    pub(super) fn unmark(&mut self, e: u64) {
        self.marks.remove(&e);
    }

    /// Whether event `e` was last recorded during a capture.
    pub(super) fn marked(&self, e: u64) -> bool {
        self.marks.contains_key(&e)
    }

    /// Stream `s` waits for event `e`: a marked event makes `s` join its
    /// capture (or adds its dependencies). Returns whether it was marked.
    pub(super) fn wait(&mut self, s: Option<u64>, e: u64) -> CuRes<bool> {
        let Some((id, deps)) = self.marks.get(&e).cloned() else { return Ok(false) };
        let s = s.ok_or(CuError::STREAM_CAPTURE_IMPLICIT)?;
        match self.captures.get_mut(&s) {
            Some(c) if c.id == id => {
                for d in deps {
                    if !c.deps.contains(&d) {
                        c.deps.push(d);
                    }
                }
            }
            Some(_) => return Err(CuError::STREAM_CAPTURE_MERGE),
            None => {
                let origin = self.captures.values().find(|c| c.id == id).ok_or(CuError::INVALID_VALUE)?;
                let (graph, mode, origin) = (origin.graph, origin.mode, origin.origin);
                self.captures.insert(s, Capture { id, graph, deps, mode, origin, invalidated: false, owned: false });
            }
        }
        Ok(true)
    }
}
