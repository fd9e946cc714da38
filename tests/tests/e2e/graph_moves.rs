//! Graphs go with their session: a program holding a graph built node by
//! node and an executable graph changed since, and a captured executable
//! graph whose graph it destroyed (as PyTorch does), is moved to another
//! backend, or checkpointed through a restart of its own, and its graphs
//! run there with the same handles and results, never told.

use super::*;
use pvgpu_frontend::{Event, Graph, GraphExec, GraphNode, KernelNode};
use pvgpu_ring::cuda::api::*;

const N: usize = 4096;

/// What the program made before its session moved.
struct Held {
    ctx: pvgpu_frontend::Context,
    stream: Stream,
    /// x, y, z, w, v, u.
    bufs: [u64; 6],
    xs: Vec<f32>,
    graph: Graph,
    nodes: Vec<GraphNode>,
    /// Its kernel node and child-graph node.
    kernel: GraphNode,
    child: GraphNode,
    kernel_params: Vec<u8>,
    exec: GraphExec,
    captured: GraphExec,
    event: Event,
}

fn read(c: &Client, d: u64) -> Vec<f32> {
    let mut b = vec![0u8; N * 4];
    c.memcpy_dtoh(&mut b, d).unwrap();
    bytes_f32(&b)
}

fn grid() -> [u32; 3] {
    [(N as u32).div_ceil(256), 1, 1]
}

/// Graph: z = 0 (memset), then z = x + y (kernel), w = z (copy), then a
/// child graph v += w, an event recorded, an empty node. Its executable
/// graph computes z = x + x instead and runs the child disabled. Captured:
/// u += 3x, its graph destroyed once instantiated.
fn hold(c: &Client, g: &Gpu<'_>) -> Held {
    let bufs = [0; 6].map(|_| c.mem_alloc(g.ctx, (N * 4) as u64).unwrap());
    let [x, y, z, w, v, u] = bufs;
    let xs: Vec<f32> = (0..N).map(|i| (i % 17) as f32).collect();
    c.memcpy_htod(x, &f32_bytes(&xs)).unwrap();
    c.memcpy_htod(y, &f32_bytes(&vec![1.0; N])).unwrap();
    for d in [z, w, v, u] {
        c.memset(d, 0, 4, N as u64, Stream::DEFAULT).unwrap();
    }
    let stream = c.stream_create(g.ctx, 1, 0).unwrap();
    let event = c.event_create(g.ctx, 0).unwrap();
    let (sum, ax) = (g.func("mat_sum").unwrap(), g.func("saxpy").unwrap());
    let n32 = N as i32;
    let kernel_params = sum.pack(&[arg(&x), arg(&y), arg(&z), arg(&n32)]).unwrap();
    let twice = sum.pack(&[arg(&x), arg(&x), arg(&z), arg(&n32)]).unwrap();
    let add_w = ax.pack(&[arg(&1.0f32), arg(&w), arg(&v), arg(&n32)]).unwrap();
    let node = |f, params| KernelNode { f, grid: grid(), block: [256, 1, 1], shared_mem: 0, params };

    let graph = c.graph_create(g.ctx).unwrap();
    let zero = c.graph_add_memset_node(graph, &[], super::graphs::memset_head(g.ctx.0, z, 0, N)).unwrap();
    let kernel = c.graph_add_kernel_node(graph, &[zero], &node(&sum, &kernel_params)).unwrap();
    let copy = c.graph_add_memcpy_node(graph, &[kernel], g.ctx, w, z, (N * 4) as u64).unwrap();
    let body = c.graph_create(g.ctx).unwrap();
    c.graph_add_kernel_node(body, &[], &node(&ax, &add_w)).unwrap();
    let child = c.graph_add_node(graph, &[copy], CU_GRAPH_NODE_TYPE_GRAPH.0, body.0).unwrap();
    c.graph_destroy(body).unwrap();
    let record = c.graph_add_event_node(graph, &[child], event, false).unwrap();
    c.graph_add_node(graph, &[record], CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();
    let mut priority = [0u8; 64];
    priority[0] = 1;
    c.graph_kernel_node_attr(kernel, CU_LAUNCH_ATTRIBUTE_PRIORITY.0, Some(priority)).unwrap();
    let exec = c.graph_instantiate(graph, 0).unwrap();
    c.graph_exec_kernel_node_set(exec, kernel, &node(&sum, &twice)).unwrap();
    c.graph_node_enable(exec, child, false).unwrap();
    // A node added to the graph since names nothing the executable graph
    // runs.
    c.graph_add_node(graph, &[], CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();

    c.stream_begin_capture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    c.launch(&ax, grid(), [256, 1, 1], 0, stream, &[arg(&3.0f32), arg(&x), arg(&u), arg(&n32)]).unwrap();
    let taken = c.stream_end_capture(stream).unwrap();
    let captured = c.graph_instantiate(taken, 0).unwrap();
    c.graph_destroy(taken).unwrap();
    let nodes = c.graph_nodes(graph, false).unwrap();
    assert_eq!(nodes.len(), 7);
    Held { ctx: g.ctx, stream, bufs, xs, graph, nodes, kernel, child, kernel_params, exec, captured, event }
}

/// Runs the graphs where the session is now and checks every result.
fn run_on(c: &Client, g: &Gpu<'_>, h: &Held) {
    let [x, y, z, w, v, u] = h.bufs;
    let xs = &h.xs;
    let launch = |e| {
        c.graph_launch(e, h.stream, false).unwrap();
        c.stream_synchronize(h.stream).unwrap();
    };
    let plus = |a: &[f32], b: &[f32]| -> Vec<f32> { a.iter().zip(b).map(|(a, b)| a + b).collect() };
    let x2 = plus(xs, xs);
    let x1 = plus(xs, &vec![1.0; N]);

    // The executable graph as it was changed: z = 2x, the child disabled.
    launch(h.exec);
    assert_same(&read(c, z), &x2, "the changed kernel node, restored");
    assert_same(&read(c, w), &x2, "the copy node, restored");
    assert_same(&read(c, v), &vec![0.0; N], "the child stays disabled");
    c.event_synchronize(h.event).unwrap();
    // The guest's node handles still name its nodes.
    c.graph_node_enable(h.exec, h.child, true).unwrap();
    launch(h.exec);
    assert_same(&read(c, v), &x2, "the child enabled again after the move");
    let sum = g.func("mat_sum").unwrap();
    let params = sum.pack(&[arg(&x), arg(&y), arg(&z), arg(&(N as i32))]).unwrap();
    let k = KernelNode { f: &sum, grid: grid(), block: [256, 1, 1], shared_mem: 0, params: &params };
    c.graph_exec_kernel_node_set(h.exec, h.kernel, &k).unwrap();
    launch(h.exec);
    assert_same(&read(c, z), &x1, "the kernel node set again after the move");
    assert_same(&read(c, v), &plus(&x2, &x1), "the child ran on the new copy");

    // The captured graph's executable graph, its graph long gone.
    launch(h.captured);
    launch(h.captured);
    let x6: Vec<f32> = xs.iter().map(|x| 6.0 * x).collect();
    assert_same(&read(c, u), &x6, "the captured executable graph, twice");

    // The graph itself: the same nodes under the same handles, unchanged.
    assert_eq!(c.graph_nodes(h.graph, false).unwrap(), h.nodes);
    match c.graph_node_params(h.kernel).unwrap() {
        pvgpu_frontend::NodeParams::Kernel { params, .. } => assert_eq!(params, h.kernel_params),
        other => panic!("the kernel node reads back as {other:?}"),
    }
    let priority = c.graph_kernel_node_attr(h.kernel, CU_LAUNCH_ATTRIBUTE_PRIORITY.0, None).unwrap();
    assert_eq!(priority[..4], [1, 0, 0, 0], "the kernel node's launch attribute");
    assert_eq!(c.graph_edges(h.graph).unwrap().len(), 5);
    let info = c.graph_node_info(h.child).unwrap();
    assert_eq!(c.graph_nodes(info.child.expect("a child graph"), false).unwrap().len(), 1, "the child graph's node");
    c.memset(v, 0, 4, N as u64, Stream::DEFAULT).unwrap();
    let again = c.graph_instantiate(h.graph, 0).unwrap();
    launch(again);
    assert_same(&read(c, z), &x1, "the graph as built: z = x + y");
    assert_same(&read(c, v), &x1, "and its child enabled");
    for e in [again, h.exec, h.captured] {
        c.graph_exec_destroy(e).unwrap();
    }
    c.graph_destroy(h.graph).unwrap();
    for d in [x, y, z, w, v, u] {
        c.mem_free(d).unwrap();
    }
    c.ctx_synchronize(h.ctx).unwrap();
}

pub(crate) fn graphs_move_with_their_session(t: Transport) {
    moves_with_its_session(t, "holding graphs", hold, |c, g, held, report| {
        // Over the ring the memory stays on the device, handed over in place.
        assert!(report.state_bytes + report.handed_bytes >= 6 * (N * 4) as u64, "{report:?}");
        run_on(c, g, held);
    });
}

pub(crate) fn graphs_survive_a_backend_restart(t: Transport) {
    survives_a_restart(t, "holding graphs", hold, |c, g, held, described| {
        assert_eq!(described.state.graphs.len(), 1, "the graph the program holds");
        assert_eq!(described.state.graph_execs.len(), 2, "its two executable graphs");
        // The order things were made in, which a restore follows: the
        // module, then the stream, then the event.
        let st = &described.state;
        assert!(st.modules[0].seq > 0 && st.modules[0].seq < st.streams[0].seq && st.streams[0].seq < st.events[0].seq, "{st:?}");
        run_on(c, g, held);
    });
}
