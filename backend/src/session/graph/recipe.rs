//! The copy of what each executable graph runs ([`Recipe`]), kept for
//! checkpoints: cloned from its graph at instantiation and at a successful
//! whole-graph update (built by pvgpu for a graph with conditional nodes,
//! which the driver does not copy), and changed as the guest changes the
//! executable graph's nodes. A change the copy cannot follow (a node with no
//! counterpart in it) drops the copy, and a checkpoint then refuses the
//! executable graph by name; the executable graph itself runs on as the
//! driver has it.

use super::{Graph, Node, Recipe};
use crate::exec::graph::ExecGraph;
use crate::exec::{CuRes, Executor};
use crate::session::{Ctx, Session};

/// A copy of graph `g` (session graph `source`) of context `ctx`: the
/// driver's, if it copies it (it refuses graphs with memory nodes), or for
/// a graph with conditional nodes, which it never copies, pvgpu's own.
pub(super) fn copy<E: Executor>(s: &mut Session<E>, ctx: u64, g: Graph<E>, source: u64) -> Option<Recipe<Graph<E>, Node<E>>> {
    if s.graph.has_cond_nodes(source) {
        return super::rebuild::build_copy(s, ctx, g, source);
    }
    let graph = s.enter(ctx).and_then(|c| c.graph_clone(g)).ok()?;
    let (named, twins, conds) = (Default::default(), Default::default(), Default::default());
    Some(Recipe { graph, source, named, disabled: Default::default(), twins, conds, handles: Vec::new() })
}

/// Destroys the copy `r` of context `ctx`.
pub(super) fn discard<E: Executor>(s: &mut Session<E>, ctx: u64, r: Option<Recipe<Graph<E>, Node<E>>>) {
    if let Some(r) = r {
        let _ = s.enter(ctx).and_then(|c| c.graph_destroy(r.graph));
    }
}

/// The node of executable graph `exec`'s copy that the guest's node `node`
/// names, if there is one.
fn counterpart<E: Executor>(s: &mut Session<E>, exec: u64, node: u64) -> Option<(u64, Node<E>)> {
    let x = s.graph.execs.get(exec)?;
    let (ctx, r) = (x.ctx, x.recipe.as_ref()?);
    if let Some(&n) = r.named.get(&node).or_else(|| r.twins.get(&node)) {
        return Some((ctx, n));
    }
    let entry = s.graph.nodes.get(node).filter(|n| n.graph == r.source)?;
    let (graph, n) = (r.graph, entry.node);
    s.enter(ctx).and_then(|c| c.node_in_clone(graph, n)).ok().map(|found| (ctx, found))
}

/// Makes `change` to the counterpart of `node` in executable graph
/// `exec`'s copy, after the guest made it to the executable graph;
/// drops the copy if it cannot follow.
pub(super) fn follow<E: Executor>(s: &mut Session<E>, exec: u64, node: u64, change: impl FnOnce(&mut Ctx<E>, Node<E>) -> CuRes<()>) {
    let followed = counterpart(s, exec, node).is_some_and(|(ctx, n)| s.enter(ctx).and_then(|c| change(c, n)).is_ok());
    if !followed {
        drop_copy(s, exec);
    }
}

/// Notes that executable graph `exec` runs `node` enabled or not.
pub(super) fn follow_enable<E: Executor>(s: &mut Session<E>, exec: u64, node: u64, enabled: bool) {
    let Some((_, n)) = counterpart(s, exec, node) else {
        return drop_copy(s, exec);
    };
    if let Some(r) = s.graph.execs.get_mut(exec).and_then(|x| x.recipe.as_mut()) {
        if enabled {
            r.disabled.remove(&n);
        } else {
            r.disabled.insert(n);
        }
    }
}

/// After executable graph `exec` was updated from session graph `source`:
/// its copy is a copy of that graph now.
pub(super) fn replace<E: Executor>(s: &mut Session<E>, exec: u64, source: u64) {
    drop_copy(s, exec);
    let Some(ctx) = s.graph.execs.get(exec).map(|x| x.ctx) else { return };
    let Ok((_, g)) = s.graph.graph(source) else { return };
    let r = copy(s, ctx, g, source);
    match s.graph.execs.get_mut(exec) {
        Some(x) => x.recipe = r,
        None => discard(s, ctx, r),
    }
}

fn drop_copy<E: Executor>(s: &mut Session<E>, exec: u64) {
    if let Some(x) = s.graph.execs.get_mut(exec) {
        let (ctx, r) = (x.ctx, x.recipe.take());
        discard(s, ctx, r);
    }
}
