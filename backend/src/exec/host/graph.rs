//! Graphs of the host test double: what the driver does on a GPU, done
//! here in the open so the whole path runs in CI. A graph is its nodes in
//! the order they were added and its edges; an executable graph is a
//! private copy, replayed node by node in a topological order (work here
//! runs at once, so one order is as good as any the GPU might choose).
//! Capture, which builds graphs from stream work, is in [`super::capture`].

use super::HostFunction;
use crate::exec::graph::Copy3D;
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
        /// Attributes set on the node (or on its captured launch): id and
        /// value, as `CUkernelNodeAttrValue` lays it out.
        attrs: Vec<(u32, [u8; 64])>,
    },
    /// A copy; a host side is memory of this process at a fixed address
    /// (the session's data area, or a mirror of the program's memory).
    Copy(Copy3D),
    Memset {
        rect: Rect,
        value: u32,
        elem: u32,
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
    /// handle whose value decides (of root graph `root`'s), and the body
    /// graphs it owns.
    Cond {
        root: u64,
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
            Op::Copy(c) => {
                let side = |s: &crate::exec::graph::CopySide| if s.host { format!("host {:#x}", s.addr) } else { format!("{:#x}", s.addr) };
                format!("memcpy {}x{}x{} bytes {} to {}", c.width, c.height, c.depth, side(&c.src), side(&c.dst))
            }
            Op::Memset { rect, value, elem } => {
                format!("memset {:#x} {}x{} of {elem} bytes = {value:#x}", rect.ptr, rect.width, rect.height)
            }
            Op::Empty => "empty".into(),
            Op::Child(g) => format!("graph {g}"),
            Op::EventRecord(e) => format!("record event {e}"),
            Op::EventWait(e) => format!("wait event {e}"),
            Op::MemAlloc { dptr } => format!("alloc {dptr:#x}"),
            Op::MemFree { dptr } => format!("free {dptr:#x}"),
            Op::Host { func, data } => format!("host {func:#x}({data:#x})"),
            Op::Cond { handle, kind, bodies, .. } => format!("conditional {kind} of handle {handle:#x}, bodies {bodies:?}"),
            Op::MemOps(ops) => format!("{} memory operations", ops.len()),
        }
    }

    /// The node type it is.
    pub(super) fn kind(&self) -> CUgraphNodeType {
        match self {
            Op::Kernel { .. } => CU_GRAPH_NODE_TYPE_KERNEL,
            Op::Copy(_) => CU_GRAPH_NODE_TYPE_MEMCPY,
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
    /// The graph whose conditional handles it numbers (itself, or for a
    /// body the graph its node is in, up to one no node owns).
    pub(super) root: u64,
    /// Conditional handles made for it and its bodies, when it is a root.
    handles: u64,
}

/// A conditional handle: the value each launch starts with (if it assigns
/// one).
pub(super) struct CondHandle {
    pub(super) default: Option<u32>,
}

/// Every graph, executable graph and capture of one context.
#[derive(Default)]
pub(super) struct Graphs {
    next: u64,
    pub(super) graphs: HashMap<u64, Graph>,
    pub(super) node_graph: HashMap<u64, u64>,
    pub(super) execs: HashMap<u64, u64>,
    /// Capturing streams.
    pub(super) captures: HashMap<u64, super::capture::Capture>,
    /// Events recorded during a capture: its id and the nodes before them.
    pub(super) marks: HashMap<u64, (u64, Vec<u64>)>,
    /// This thread's capture mode (the session's one thread).
    pub(super) mode: u32,
    /// Nodes of executable graphs that are skipped.
    disabled: HashSet<u64>,
    /// Conditional handles by root graph and value. As the driver does,
    /// each root graph numbers its own 1, 2, 3..., so that values repeat
    /// from graph to graph; the context keeps one value per number
    /// (`Mem::conds`), which is right while launches run one after the
    /// other, as here.
    pub(super) cond_handles: HashMap<(u64, u64), CondHandle>,
    /// The nodes of clones: (clone, original node) to the clone's node.
    pub(super) clones: HashMap<(u64, u64), u64>,
    /// Executable graphs instantiated for launches from the device.
    pub(super) device: HashSet<u64>,
}

impl Graphs {
    pub(super) fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// A new, empty graph.
    pub(super) fn create(&mut self) -> u64 {
        let g = self.id();
        self.graphs.insert(g, Graph { root: g, ..Graph::default() });
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
        let root = self.graph(g)?.root;
        let r = self.graph_mut(root)?;
        r.handles += 1;
        let h = r.handles;
        self.cond_handles.insert((root, h), CondHandle { default });
        Ok(h)
    }

    /// Whether graph `g` or a graph its nodes own has a conditional node.
    pub(super) fn has_conditional(&self, g: u64) -> CuRes<bool> {
        for op in self.graph(g)?.ops.values() {
            match op {
                Op::Cond { .. } => return Ok(true),
                Op::Child(c) if self.has_conditional(*c)? => return Ok(true),
                _ => {}
            }
        }
        Ok(false)
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
        // A handle of the root's serves its bodies too, as on the GPU.
        let root = self.graph(g)?.root;
        if !sizes_ok || !self.cond_handles.contains_key(&(root, handle)) {
            return Err(CuError::INVALID_VALUE);
        }
        let bodies: Vec<u64> = (0..size)
            .map(|_| {
                let b = self.id();
                self.graphs.insert(b, Graph { borrowed: true, body: true, root, ..Graph::default() });
                b
            })
            .collect();
        let n = self.insert(g, deps, Op::Cond { root, handle, kind, bodies: bodies.clone() })?;
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
        let mut copy = Graph { borrowed, root: c, ..Graph::default() };
        for n in &src.order {
            let id = self.id();
            map.insert(*n, id);
            let op = match &src.ops[n] {
                Op::Child(child) => Op::Child(self.copy(*child, true)?.0),
                Op::Cond { root, handle, kind, bodies } => {
                    let bodies = bodies.iter().map(|b| self.copy_body(*b, c)).collect::<CuRes<Vec<u64>>>()?;
                    Op::Cond { root: *root, handle: *handle, kind: *kind, bodies }
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
    fn copy_body(&mut self, b: u64, root: u64) -> CuRes<u64> {
        let c = self.copy(b, true)?.0;
        let body = self.graph_mut(c)?;
        (body.body, body.root) = (true, root);
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
}
