//! Conditional nodes go with their session: a graph whose while loop runs
//! an if/else node in its body (a handle made for the graph, one for its
//! body), and an executable if/else graph changed since and whose graph
//! the program destroyed, move to another backend or through a restart
//! of their own. The driver copies no graph with a conditional node, so
//! pvgpu keeps its own copy of what the executable graphs run; after the
//! move they run there with the same handles and results, never told.

use super::*;
use crate::conditional::{one_thread as one, read_i32};
use crate::graphs::memset_head;
use pvgpu_frontend::{Graph, GraphExec, GraphNode};
use pvgpu_ring::cuda::api::*;

const N: usize = 64;

/// What the program made before its session moved.
struct Held {
    ctx: pvgpu_frontend::Context,
    stream: Stream,
    /// flag, other flag, counter, out.
    bufs: [u64; 4],
    /// The while graph, its body (by the guest's handle) and the if/else
    /// node's bodies in it.
    looped: Graph,
    body: Graph,
    branches: Vec<Graph>,
    /// Its handles: the loop's (made for the graph), the branch's (made
    /// for the body).
    handles: [u64; 2],
    looping: GraphExec,
    /// The if/else graph's executable graph, its kernel node changed to
    /// read the other flag, the graph destroyed.
    branching: GraphExec,
    picker: GraphNode,
}

fn hold(c: &Client, g: &Gpu<'_>) -> Held {
    let bufs = [4, 4, 4, N as u64 * 4].map(|b| c.mem_alloc(g.ctx, b).unwrap());
    let [flag, other, counter, out] = bufs;
    let from_flag = g.func("pvgpu_cond_from_flag").unwrap();
    let count_down = g.func("pvgpu_cond_count_down").unwrap();
    let stream = c.stream_create(g.ctx, 1, 0).unwrap();
    let fill = |body, v: u32| c.graph_add_memset_node(body, &[], memset_head(g.ctx.0, out, v, N)).unwrap();

    // while (counter-- > 0) { if (flag) out = 11 else out = 22 }
    let looped = c.graph_create(g.ctx).unwrap();
    let w = c.graph_cond_handle(looped, 1, true).unwrap();
    let (_, body) = c.graph_add_cond_node(looped, &[], w, CU_GRAPH_COND_TYPE_WHILE.0, 1).unwrap();
    let body = body[0];
    let hb = c.graph_cond_handle(body, 0, false).unwrap();
    assert_eq!([w, hb], [1, 2], "a graph's handles and its body's are numbered together");
    let p = count_down.pack(&[arg(&counter), arg(&w)]).unwrap();
    let k1 = c.graph_add_kernel_node(body, &[], &one(&count_down, &p)).unwrap();
    let p = from_flag.pack(&[arg(&flag), arg(&hb)]).unwrap();
    let k2 = c.graph_add_kernel_node(body, &[k1], &one(&from_flag, &p)).unwrap();
    let (_, branches) = c.graph_add_cond_node(body, &[k2], hb, CU_GRAPH_COND_TYPE_IF.0, 2).unwrap();
    fill(branches[0], 11);
    fill(branches[1], 22);
    let looping = c.graph_instantiate(looped, 0).unwrap();

    // if (flag) out = 33 else out = 44, then made to read the other flag in
    // the executable graph; the graph destroyed.
    let g2 = c.graph_create(g.ctx).unwrap();
    let h = c.graph_cond_handle(g2, 0, false).unwrap();
    let p = from_flag.pack(&[arg(&flag), arg(&h)]).unwrap();
    let picker = c.graph_add_kernel_node(g2, &[], &one(&from_flag, &p)).unwrap();
    let (_, sides) = c.graph_add_cond_node(g2, &[picker], h, CU_GRAPH_COND_TYPE_IF.0, 2).unwrap();
    fill(sides[0], 33);
    fill(sides[1], 44);
    let branching = c.graph_instantiate(g2, 0).unwrap();
    let p = from_flag.pack(&[arg(&other), arg(&h)]).unwrap();
    c.graph_exec_kernel_node_set(branching, picker, &one(&from_flag, &p)).unwrap();
    c.graph_destroy(g2).unwrap();
    Held { ctx: g.ctx, stream, bufs, looped, body, branches, handles: [w, hb], looping, branching, picker }
}

/// Runs the graphs where the session is now and checks every result.
fn run_on(c: &Client, g: &Gpu<'_>, h: &Held) {
    let [flag, other, counter, out] = h.bufs;
    let set = |d: u64, v: i32| c.memcpy_htod(d, &v.to_le_bytes()).unwrap();
    let launch = |e| {
        c.memset(out, 0, 4, N as u64, h.stream).unwrap();
        c.graph_launch(e, h.stream, false).unwrap();
        c.stream_synchronize(h.stream).unwrap();
        read_i32(c, out, N)
    };
    for (count, f, want) in [(3, 1, 11), (2, 0, 22), (1, 1, 11)] {
        set(counter, count);
        set(flag, f);
        assert!(launch(h.looping).iter().all(|&x| x == want), "while {count} times, if {f}");
        assert_eq!(read_i32(c, counter, 1), [0], "the loop counted down");
    }
    for (f, o, want) in [(1, 0, 44), (0, 1, 33)] {
        set(flag, f);
        set(other, o);
        assert!(launch(h.branching).iter().all(|&x| x == want), "the changed if/else: flag {f}, other {o}");
    }
    // Its kernel node, named by the guest's handle, set back.
    let from_flag = g.func("pvgpu_cond_from_flag").unwrap();
    let p = from_flag.pack(&[arg(&flag), arg(&h.handles[0])]).unwrap();
    c.graph_exec_kernel_node_set(h.branching, h.picker, &one(&from_flag, &p)).unwrap();
    set(flag, 1);
    assert!(launch(h.branching).iter().all(|&x| x == 33), "the if/else set back to the flag");

    // The graph itself, under the same handles: its body and branches
    // take new nodes, and it is instantiated again.
    assert_eq!(c.graph_node_info(c.graph_nodes(h.looped, false).unwrap()[0]).unwrap().kind, CU_GRAPH_NODE_TYPE_CONDITIONAL.0);
    assert_eq!(c.graph_nodes(h.body, false).unwrap().len(), 3, "the body's nodes");
    let other_branch = c.graph_nodes(h.branches[1], false).unwrap();
    c.graph_add_node(h.branches[1], &other_branch, CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();
    let again = c.graph_instantiate(h.looped, 0).unwrap();
    set(counter, 1);
    set(flag, 0);
    assert!(launch(again).iter().all(|&x| x == 22), "the graph instantiated again");
    for e in [again, h.looping, h.branching] {
        c.graph_exec_destroy(e).unwrap();
    }
    c.graph_destroy(h.looped).unwrap();
    for d in h.bufs {
        c.mem_free(d).unwrap();
    }
    c.ctx_synchronize(h.ctx).unwrap();
}

pub(crate) fn conditional_graphs_move_with_their_session(t: Transport) {
    moves_with_its_session(t, "holding conditional graphs", hold, |c, g, held, _| run_on(c, g, held));
}

pub(crate) fn conditional_graphs_survive_a_backend_restart(t: Transport) {
    survives_a_restart(t, "holding conditional graphs", hold, |c, g, held, described| {
        let st = &described.state;
        assert_eq!(st.graphs.len(), 1, "the while graph");
        let handles: Vec<(u64, u64)> = st.graphs[0].handles.iter().map(|h| (h.graph, h.value)).collect();
        assert_eq!(handles, [(held.looped.0, 1), (held.body.0, 2)], "its handles, in the order they were made");
        assert_eq!(st.graph_execs.len(), 2, "its two executable graphs");
        assert!(st.graph_execs.iter().all(|x| !x.handles.is_empty()), "each with its handles");
        run_on(c, g, held);
    });
}
