//! Stream capture and graphs: graphs, their nodes and executable graphs
//! are session handles, checked like every other, freed with the session
//! (before its contexts). Capture itself is the executor's (the driver
//! records work the session issues on a capturing stream); the session
//! names what it hands back: the captured graph, and the nodes capture
//! queries and graph queries return, registered the first time they are
//! seen. A graph a child-graph node owns is *borrowed*: it may be read and
//! added to, never destroyed on its own.

mod capture;
mod conditional;
mod exec;
mod host;
mod memory;
mod nodes;
mod params;
mod rebuild;
mod recipe;
mod snapshot;

pub(super) use capture::*;
pub(super) use conditional::{graph_add_cond_node, graph_cond_handle};
pub(super) use exec::*;
pub(super) use host::{graph_add_host_node, host_call_done, host_call_wait, host_node_params, launch_host_func};
pub(super) use memory::{graph_add_mem_node, graph_mem_attr, graph_memory_allowed, mem_node_params};
pub(super) use nodes::*;
pub(super) use params::*;
pub(super) use rebuild::rebuild;
pub(super) use snapshot::{coverable, describe};

use super::{Ctx, Session};
use crate::exec::graph::ExecGraph;
use crate::exec::{CuRes, Executor};
use crate::handles::HandleTable;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{HandleRep, IdsRep};
use std::collections::HashMap;

type Graph<E> = <Ctx<E> as ExecGraph>::Graph;
type Node<E> = <Ctx<E> as ExecGraph>::Node;
type GraphExec<E> = <Ctx<E> as ExecGraph>::GraphExec;
/// The session's entry for an executable graph.
type Exec<E> = ExecEntry<GraphExec<E>, Graph<E>, Node<E>>;

/// Who destroys a graph.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Owner {
    /// The guest (`cuGraphDestroy`), or the session when it ends.
    Guest,
    /// A child-graph node (`graph`'s node `node`), with it.
    Node {
        /// The graph the node belongs to.
        graph: u64,
        /// The node.
        node: u64,
    },
    /// A conditional node (`graph`'s node `node`), with it: one of its
    /// bodies, which work may also be captured into.
    Body {
        /// The graph the node belongs to.
        graph: u64,
        /// The node.
        node: u64,
    },
    /// A capture still under way: the driver, if it fails; the guest
    /// once it ends.
    Capture,
}

impl Owner {
    /// The node that owns the graph, if one does: (its graph, the node).
    fn node(self) -> Option<(u64, u64)> {
        match self {
            Owner::Node { graph, node } | Owner::Body { graph, node } => Some((graph, node)),
            Owner::Guest | Owner::Capture => None,
        }
    }
}

/// A graph of the session.
pub(super) struct GraphEntry<G> {
    /// The context its work runs in.
    pub(super) ctx: u64,
    pub(super) graph: G,
    pub(super) owner: Owner,
}

/// A node of a graph of the session.
pub(super) struct NodeEntry<N> {
    pub(super) ctx: u64,
    pub(super) graph: u64,
    pub(super) node: N,
}

/// An executable graph.
pub(super) struct ExecEntry<X, G, N> {
    pub(super) ctx: u64,
    pub(super) exec: X,
    /// Host nodes it runs.
    pub(super) host_nodes: u32,
    /// Bytes its allocation nodes ask for at each launch.
    pub(super) alloc_bytes: u64,
    /// Instantiated for launches from the device.
    pub(super) device: bool,
    /// Its instantiation flags.
    pub(super) flags: u64,
    /// A copy of what it runs, for checkpoints (none when the driver
    /// would not copy its graph, or an update could not be followed).
    pub(super) recipe: Option<Recipe<G, N>>,
}

/// What an executable graph runs, kept as a graph of its own: a clone of
/// the graph it was made from (or last updated from), changed as the
/// executable graph is. The driver has no way to read an executable graph
/// back, and the graph it was made from may be gone or changed since.
pub(super) struct Recipe<G, N> {
    /// The copy.
    pub(super) graph: G,
    /// The session graph whose nodes name the executable graph's (a node
    /// of it has its counterpart in the copy), 0 when restored.
    pub(super) source: u64,
    /// After a restore, the guest's node handles and the nodes of the
    /// copy they name (the executable graph was made from the copy).
    pub(super) named: HashMap<u64, N>,
    /// Nodes of the copy the executable graph runs disabled.
    pub(super) disabled: std::collections::HashSet<N>,
    /// For a copy pvgpu built itself, the driver copying no graph with a
    /// conditional node: the guest's nodes of the graph it was made from
    /// and their counterparts in it (the driver cannot find them).
    pub(super) twins: HashMap<u64, N>,
    /// Its conditional nodes, which the driver does not tell back.
    pub(super) conds: HashMap<N, CopyCond<G>>,
    /// Its conditional handles, in the order they were made.
    pub(super) handles: Vec<pvgpu_ctl::snapshot::CondHandleRec>,
}

/// A conditional node of a copy pvgpu built: its handle,
/// `CUgraphConditionalNodeType` and body graphs.
#[derive(Clone, Debug)]
pub(super) struct CopyCond<G> {
    pub(super) handle: u64,
    pub(super) kind: u32,
    pub(super) bodies: Vec<G>,
}

/// The session's graphs, nodes and executable graphs.
pub(super) struct Graphs<E: Executor> {
    pub(super) graphs: HandleTable<GraphEntry<Graph<E>>>,
    /// Session ids by context and executor handle (the host double's
    /// handles are numbers of one context).
    graph_ids: HashMap<(u64, Graph<E>), u64>,
    pub(super) nodes: HandleTable<NodeEntry<Node<E>>>,
    node_ids: HashMap<(u64, Node<E>), u64>,
    pub(super) execs: HandleTable<Exec<E>>,
    /// Conditional handles by (root graph, value): the driver numbers a
    /// root graph's handles, its bodies' included, 1, 2, 3... in the order
    /// they are made, so each root's come in that order here.
    pub(super) cond_handles: std::collections::BTreeMap<(u64, u64), CondHandle>,
    /// Conditional nodes by node id: what the driver cannot tell back.
    pub(super) cond_nodes: HashMap<u64, CondNode>,
}

/// A conditional handle the session made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CondHandle {
    /// The graph it was made for (the root, once a body it was made for
    /// is gone: its number stays taken).
    pub(super) graph: u64,
    pub(super) default: u32,
    pub(super) flags: u32,
}

/// A conditional node: its handle, `CUgraphConditionalNodeType` and body
/// graphs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CondNode {
    pub(super) handle: u64,
    pub(super) kind: u32,
    pub(super) bodies: Vec<u64>,
}

impl<E: Executor> Graphs<E> {
    pub(super) fn new(max: usize) -> Self {
        Graphs {
            graphs: HandleTable::new(max),
            graph_ids: HashMap::new(),
            nodes: HandleTable::new(max),
            node_ids: HashMap::new(),
            execs: HandleTable::new(max),
            cond_handles: Default::default(),
            cond_nodes: HashMap::new(),
        }
    }

    /// Makes ids of address space `space` ([`HandleTable::set_space`]).
    pub(super) fn set_space(&mut self, space: u16) {
        self.graphs.set_space(space);
        self.nodes.set_space(space);
        self.execs.set_space(space);
    }

    /// The id of executor graph `g` of context `ctx`, registered if new
    /// with owner `owner`.
    pub(super) fn graph_id(&mut self, ctx: u64, g: Graph<E>, owner: Owner) -> CuRes<u64> {
        if let Some(&id) = self.graph_ids.get(&(ctx, g)) {
            return Ok(id);
        }
        let id = self.graphs.insert(GraphEntry { ctx, graph: g, owner })?;
        self.graph_ids.insert((ctx, g), id);
        Ok(id)
    }

    /// Registers executor graph `g` of context `ctx` as graph `id` (a
    /// restore gives the guest's handles back).
    pub(super) fn graph_id_at(&mut self, id: u64, ctx: u64, g: Graph<E>, owner: Owner) -> CuRes<()> {
        self.graphs.insert_at(id, GraphEntry { ctx, graph: g, owner })?;
        self.graph_ids.insert((ctx, g), id);
        Ok(())
    }

    /// Registers executor node `n` of session graph `graph` as node `id`.
    pub(super) fn node_id_at(&mut self, id: u64, graph: u64, n: Node<E>) -> CuRes<()> {
        let ctx = self.graphs.get(graph).ok_or(CuError::INVALID_VALUE)?.ctx;
        self.nodes.insert_at(id, NodeEntry { ctx, graph, node: n })?;
        self.node_ids.insert((ctx, n), id);
        Ok(())
    }

    /// The id of executor graph `g` of context `ctx`, if the session
    /// knows it.
    pub(super) fn graph_ids_get(&self, ctx: u64, g: Graph<E>) -> Option<u64> {
        self.graph_ids.get(&(ctx, g)).copied()
    }

    /// The id of executor node `n` of context `ctx`, if the session knows
    /// it.
    pub(super) fn node_ids_get(&self, ctx: u64, n: Node<E>) -> Option<u64> {
        self.node_ids.get(&(ctx, n)).copied()
    }

    /// The id of node `n` of session graph `graph`, registered if new.
    pub(super) fn node_id(&mut self, graph: u64, n: Node<E>) -> CuRes<u64> {
        let ctx = self.graphs.get(graph).ok_or(CuError::INVALID_VALUE)?.ctx;
        if let Some(&id) = self.node_ids.get(&(ctx, n)) {
            return Ok(id);
        }
        let id = self.nodes.insert(NodeEntry { ctx, graph, node: n })?;
        self.node_ids.insert((ctx, n), id);
        Ok(id)
    }

    /// The context and executor graph of graph `id`.
    pub(super) fn graph(&self, id: u64) -> CuRes<(u64, Graph<E>)> {
        self.graphs.get(id).map(|g| (g.ctx, g.graph)).ok_or(CuError::INVALID_VALUE)
    }

    /// The executor nodes of `ids`, each a node of graph `graph`.
    pub(super) fn nodes_of(&self, graph: u64, ids: impl IntoIterator<Item = u64>) -> CuRes<Vec<Node<E>>> {
        ids.into_iter()
            .map(|id| match self.nodes.get(id) {
                Some(n) if n.graph == graph => Ok(n.node),
                _ => Err(CuError::INVALID_VALUE),
            })
            .collect()
    }

    /// Whether conditional handle `value` was made for graph `graph`.
    pub(super) fn has_cond_handle(&self, graph: u64, value: u64) -> bool {
        self.cond_handles.get(&(self.root(graph), value)).is_some_and(|h| h.graph == graph)
    }

    /// The root graph of graph `id`: the graph whose conditional handles
    /// a handle made for `id` is numbered with (a conditional body's is
    /// the graph its node is in, up to one no node owns).
    pub(super) fn root(&self, mut id: u64) -> u64 {
        while let Some(Owner::Body { graph, .. }) = self.graphs.get(id).map(|g| g.owner) {
            id = graph;
        }
        id
    }

    /// Whether graph `root` or one of its conditional bodies holds a
    /// conditional node.
    pub(super) fn has_cond_nodes(&self, root: u64) -> bool {
        self.cond_nodes.keys().any(|&n| self.nodes.get(n).is_some_and(|n| self.root(n.graph) == root))
    }

    /// How many nodes own graph `id` in turn (0 for a graph none owns).
    pub(super) fn depth(&self, mut id: u64) -> u32 {
        let mut depth = 0;
        while let Some((graph, _)) = self.graphs.get(id).and_then(|g| g.owner.node()) {
            (id, depth) = (graph, depth + 1);
        }
        depth
    }

    /// Forgets node `id` (destroyed), and the graph it owns if any.
    pub(super) fn forget_node(&mut self, id: u64) {
        if let Some(n) = self.nodes.remove(id) {
            self.node_ids.remove(&(n.ctx, n.node));
        }
        self.cond_nodes.remove(&id);
        let owned: Vec<u64> = self.graphs.iter().filter(|(_, g)| g.owner.node().is_some_and(|(_, n)| n == id)).map(|(g, _)| g).collect();
        owned.into_iter().for_each(|g| self.forget_graph(g));
    }

    /// Forgets graph `id` (destroyed), its nodes and the graphs they own.
    pub(super) fn forget_graph(&mut self, id: u64) {
        let Some(g) = self.graphs.remove(id) else { return };
        self.graph_ids.remove(&(g.ctx, g.graph));
        // A root's handles go with it; a body's stay its root's, whose
        // numbers they keep taken.
        self.cond_handles.retain(|&(root, _), _| root != id);
        for (&(root, _), h) in self.cond_handles.iter_mut().filter(|(_, h)| h.graph == id) {
            h.graph = root;
        }
        let gone: Vec<u64> = self.nodes.iter().filter(|(_, n)| n.graph == id).map(|(nid, _)| nid).collect();
        for nid in gone {
            if let Some(n) = self.nodes.remove(nid) {
                self.node_ids.remove(&(n.ctx, n.node));
            }
            self.cond_nodes.remove(&nid);
        }
        let children: Vec<u64> = self.graphs.iter().filter(|(_, c)| c.owner.node().is_some_and(|(g, _)| g == id)).map(|(c, _)| c).collect();
        for c in children {
            self.forget_graph(c);
        }
    }

    /// Replies with the ids of `nodes` of graph `graph`.
    pub(super) fn ids_rep(&mut self, graph: u64, nodes: Vec<Node<E>>) -> CuRes<IdsRep> {
        let ids = nodes.into_iter().map(|n| self.node_id(graph, n)).collect::<CuRes<Vec<u64>>>()?;
        Ok(IdsRep { ids })
    }
}

/// Frees every executable graph and graph of context `ctx` (all, with
/// `None`), before the context goes.
pub(super) fn forget<E: Executor>(s: &mut Session<E>, ctx: Option<u64>) {
    let mine = |c: u64| ctx.is_none_or(|x| x == c);
    for e in s.graph.execs.drain_where(|e| mine(e.ctx)) {
        let _ = s.enter(e.ctx).and_then(|c| c.graph_exec_destroy(e.exec));
        if let Some(r) = e.recipe {
            let _ = s.enter(e.ctx).and_then(|c| c.graph_destroy(r.graph));
        }
    }
    let owned: Vec<(u64, Owner)> = s.graph.graphs.iter().filter(|(_, g)| mine(g.ctx)).map(|(id, g)| (id, g.owner)).collect();
    for (id, owner) in owned {
        if let (Owner::Guest, Ok((c, g))) = (owner, s.graph.graph(id)) {
            let _ = s.enter(c).and_then(|x| x.graph_destroy(g));
        }
        s.graph.forget_graph(id);
    }
}

fn handle(id: u64) -> HandleRep {
    HandleRep { handle: id.into() }
}
