//! Stream capture and graphs: work captured across streams and replayed,
//! graphs built node by node and changed after instantiation, what capture
//! refuses, and graph handles checked like every other.

use super::*;
use pvgpu_frontend::{Function, Graph, GraphNode, KernelNode};
use pvgpu_ring::cuda::api::*;

fn f32s(v: &[f32]) -> Vec<u8> {
    f32_bytes(v)
}

fn read_f32(c: &Client, d: u64, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut b, d).unwrap();
    bytes_f32(&b)
}

fn saxpy<'a>(f: &'a Function, packed: &'a [u8], n: usize) -> KernelNode<'a> {
    KernelNode { f, grid: [(n as u32).div_ceil(256), 1, 1], block: [256, 1, 1], shared_mem: 0, params: packed }
}

fn saxpy_params(f: &Function, a: f32, x: u64, y: u64, n: usize) -> Vec<u8> {
    f.pack(&[arg(&a), arg(&x), arg(&y), arg(&(n as i32))]).unwrap()
}

/// Work captured on two streams (a fork and a join through events) runs
/// again at every launch of the executable graph, and only then.
pub(crate) fn captured_work_replays(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let (s1, s2) = (c.stream_create(g.ctx, 1, 0).unwrap(), c.stream_create(g.ctx, 1, 0).unwrap());
    let (fork, join) = (c.event_create(g.ctx, 0).unwrap(), c.event_create(g.ctx, 0).unwrap());
    let n = 1 << 14;
    let bytes = (n * 4) as u64;
    let [x, y, z, w] = [0; 4].map(|_| c.mem_alloc(g.ctx, bytes).unwrap());
    let xs: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
    let mut ys = vec![1.0f32; n];
    c.memcpy_htod(x, &f32s(&xs)).unwrap();
    c.memcpy_htod(y, &f32s(&ys)).unwrap();
    c.memset(w, 0, 4, n as u64, Stream::DEFAULT).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    let (ax, sum) = (g.func("saxpy").unwrap(), g.func("mat_sum").unwrap());
    let grid = [(n as u32).div_ceil(256), 1, 1];

    c.stream_begin_capture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    let first = c.stream_capture_info(s1).unwrap();
    assert_eq!(first.status, CU_STREAM_CAPTURE_STATUS_ACTIVE.0);
    assert!(first.graph.is_some() && first.deps.is_empty());
    // y = 2x + y on s1; then, forked, z = x + y and w = z on s2; joined,
    // y = z + y on s1.
    c.launch(&ax, grid, [256, 1, 1], 0, s1, &[arg(&2.0f32), arg(&x), arg(&y), arg(&(n as i32))]).unwrap();
    c.event_record(fork, s1).unwrap();
    c.stream_wait_event(s2, fork).unwrap();
    let forked = c.stream_capture_info(s2).unwrap();
    assert_eq!((forked.status, forked.id), (CU_STREAM_CAPTURE_STATUS_ACTIVE.0, first.id), "s2 joined the capture");
    assert_eq!(forked.deps.len(), 1);
    c.launch(&sum, grid, [256, 1, 1], 0, s2, &[arg(&x), arg(&y), arg(&z), arg(&(n as i32))]).unwrap();
    c.memcpy_dtod_async(w, z, bytes, s2).unwrap();
    c.event_record(join, s2).unwrap();
    c.stream_wait_event(s1, join).unwrap();
    c.launch(&ax, grid, [256, 1, 1], 0, s1, &[arg(&1.0f32), arg(&z), arg(&y), arg(&(n as i32))]).unwrap();
    let graph = c.stream_end_capture(s1).unwrap();
    assert_eq!(c.stream_capture_info(s1).unwrap().status, CU_STREAM_CAPTURE_STATUS_NONE.0);
    assert_eq!(c.stream_capture_info(s2).unwrap().status, CU_STREAM_CAPTURE_STATUS_NONE.0);

    let nodes = c.graph_nodes(graph, false).unwrap();
    assert_eq!(nodes.len(), 4);
    assert_eq!(c.graph_nodes(graph, true).unwrap().len(), 1, "one root: the first saxpy");
    // Three edges the work needs; the driver keeps the first saxpy's edge
    // to the last too (the join adds the forked stream's dependencies to
    // those s1 had).
    assert_eq!(c.graph_edges(graph).unwrap().len(), 4);
    let kinds: Vec<u32> = nodes.iter().map(|n| c.graph_node_info(*n).unwrap().kind).collect();
    assert_eq!(kinds.iter().filter(|k| **k == CU_GRAPH_NODE_TYPE_KERNEL.0).count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == CU_GRAPH_NODE_TYPE_MEMCPY.0).count(), 1);
    assert_eq!(read_f32(&c, y, n), ys, "captured work does not run");

    let exec = c.graph_instantiate(graph, 0).unwrap();
    // The executable graph is its own: destroying the graph leaves it.
    c.graph_destroy(graph).unwrap();
    for round in 0..3 {
        if round == 1 {
            c.graph_launch(exec, Stream::DEFAULT, false).unwrap();
            c.ctx_synchronize(g.ctx).unwrap();
        } else {
            c.graph_launch(exec, s1, false).unwrap();
            c.stream_synchronize(s1).unwrap();
        }
        let zs: Vec<f32> = ys.iter().zip(&xs).map(|(y, x)| 2.0 * x + y + x).collect();
        ys = ys.iter().zip(&xs).zip(&zs).map(|((y, x), z)| 2.0 * x + y + z).collect();
        assert_eq!(read_f32(&c, y, n), ys, "round {round}");
        assert_eq!(read_f32(&c, w, n), zs, "round {round}");
    }
    c.graph_exec_destroy(exec).unwrap();
    assert_eq!(code(c.graph_launch(exec, s1, false).and_then(|_| c.stream_synchronize(s1))), CuResult::INVALID_VALUE);
}

/// What capture refuses, as the driver refuses it: capturing the legacy
/// stream, beginning twice, ending on a stream that did not begin, host
/// copies whose bytes would be gone by the replay (the driver captures
/// pageable copies; pvgpu cannot read guest memory at replay), querying
/// or synchronising what is capturing (which invalidates the capture),
/// and a fork left unjoined.
pub(crate) fn capture_refusals(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let (s1, s2) = (c.stream_create(g.ctx, 1, 0).unwrap(), c.stream_create(g.ctx, 1, 0).unwrap());
    let e = c.event_create(g.ctx, 0).unwrap();
    let d = c.mem_alloc(g.ctx, 4096).unwrap();
    let global = CU_STREAM_CAPTURE_MODE_GLOBAL.0;
    assert_eq!(code(c.stream_begin_capture(Stream::DEFAULT, global)), CuResult::STREAM_CAPTURE_UNSUPPORTED);

    c.stream_begin_capture(s1, global).unwrap();
    assert_eq!(code(c.stream_begin_capture(s1, global)), CuResult::ILLEGAL_STATE);
    assert_eq!(code(c.memcpy_htod_async(d, &[1u8; 4096], s1)), CuResult::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(c.stream_capture_info(s1).unwrap().status, CU_STREAM_CAPTURE_STATUS_INVALIDATED.0);
    assert_eq!(code(c.stream_end_capture(s1)), CuResult::STREAM_CAPTURE_INVALIDATED);

    // During capture, addresses are recorded, not checked (frameworks
    // capture with placeholders and set the real ones in the executable
    // graph); outside, they are checked.
    c.stream_begin_capture(s1, global).unwrap();
    c.memset(128, 0, 1, 4096, s1).unwrap();
    let placeholder = c.stream_end_capture(s1).unwrap();
    assert_eq!(c.graph_nodes(placeholder, false).unwrap().len(), 1);
    c.graph_destroy(placeholder).unwrap();
    assert_eq!(code(c.memset(128, 0, 1, 4096, s1).and_then(|_| c.stream_synchronize(s1))), CuResult::INVALID_VALUE);

    // A free of ordinary memory during capture is refused; graph
    // memory (where offered) is in `graph_memory`.
    c.stream_begin_capture(s1, global).unwrap();
    assert_eq!(code(c.mem_free_async(d, s1)), CuResult::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(code(c.stream_end_capture(s1)), CuResult::STREAM_CAPTURE_INVALIDATED);

    c.stream_begin_capture(s1, global).unwrap();
    assert_eq!(code(c.stream_query(s1)), CuResult::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(code(c.stream_end_capture(s1)), CuResult::STREAM_CAPTURE_INVALIDATED);

    c.stream_begin_capture(s1, global).unwrap();
    c.memset(d, 1, 1, 4096, s1).unwrap();
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(code(c.stream_end_capture(s1)), CuResult::STREAM_CAPTURE_INVALIDATED);

    c.stream_begin_capture(s1, global).unwrap();
    c.memset(d, 2, 1, 4096, s1).unwrap();
    c.event_record(e, s1).unwrap();
    c.stream_wait_event(s2, e).unwrap();
    c.memset(d, 3, 1, 4096, s2).unwrap();
    assert_eq!(code(c.stream_end_capture(s2)), CuResult::STREAM_CAPTURE_UNMATCHED);
    // The driver answers an unjoined fork as any invalidated capture.
    assert_eq!(code(c.stream_end_capture(s1)), CuResult::STREAM_CAPTURE_INVALIDATED);
    assert_eq!(c.stream_capture_info(s2).unwrap().status, CU_STREAM_CAPTURE_STATUS_NONE.0);

    // A relaxed capture lets memory be allocated; nothing captured ran.
    c.memset(d, 9, 1, 4096, Stream::DEFAULT).unwrap();
    c.stream_begin_capture(s1, CU_STREAM_CAPTURE_MODE_RELAXED.0).unwrap();
    c.memset(d, 4, 1, 4096, s1).unwrap();
    let extra = c.mem_alloc(g.ctx, 4096).unwrap();
    c.mem_free(extra).unwrap();
    let graph = c.stream_end_capture(s1).unwrap();
    let mut b = vec![0u8; 4096];
    c.memcpy_dtoh(&mut b, d).unwrap();
    assert!(b.iter().all(|&v| v == 9));
    // Synchronising the context is refused in any mode.
    c.stream_begin_capture(s1, CU_STREAM_CAPTURE_MODE_RELAXED.0).unwrap();
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(code(c.stream_end_capture(s1)), CuResult::STREAM_CAPTURE_INVALIDATED);
    c.graph_destroy(graph).unwrap();
    // Every call works again once the captures are over.
    c.memcpy_htod_async(d, &[5u8; 4096], s1).unwrap();
    c.stream_synchronize(s1).unwrap();
    c.memcpy_dtoh(&mut b, d).unwrap();
    assert!(b.iter().all(|&v| v == 5));
}

/// A graph built node by node: memset, kernel, copy, a child graph and an
/// event node; its queries; parameters changed in the graph, in the
/// executable graph, and by updating it from a changed copy.
pub(crate) fn explicit_graphs(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let n = 4096;
    let bytes = (n * 4) as u64;
    let [x, y, out] = [0; 3].map(|_| c.mem_alloc(g.ctx, bytes).unwrap());
    let xs: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    c.memcpy_htod(x, &f32s(&xs)).unwrap();
    let ax = g.func("saxpy").unwrap();
    let done = c.event_create(g.ctx, 0).unwrap();

    let graph = c.graph_create(g.ctx).unwrap();
    let one = memset_head(g.ctx.0, y, 1.0f32.to_bits(), n);
    let set = c.graph_add_memset_node(graph, &[], one).unwrap();
    let p3 = saxpy_params(&ax, 3.0, x, y, n);
    let k = c.graph_add_kernel_node(graph, &[set], &saxpy(&ax, &p3, n)).unwrap();
    let copy = c.graph_add_memcpy_node(graph, &[k], g.ctx, out, y, bytes).unwrap();
    let record = c.graph_add_event_node(graph, &[copy], done, false).unwrap();
    assert_eq!(c.graph_node_edges(k, false).unwrap(), vec![set]);
    assert_eq!(c.graph_node_edges(k, true).unwrap(), vec![copy]);
    assert_eq!(c.graph_node_info(record).unwrap().kind, CU_GRAPH_NODE_TYPE_EVENT_RECORD.0);
    assert_eq!(c.graph_node_info(set).unwrap().graph, graph);
    let dot = String::from_utf8(c.graph_dot(graph, 0).unwrap()).unwrap();
    assert!(dot.starts_with("digraph"), "{dot}");

    let expect = |a: f32| -> Vec<f32> { xs.iter().map(|v| a * v + 1.0).collect() };
    let exec = c.graph_instantiate(graph, 0).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.event_synchronize(done).unwrap();
    assert_eq!(read_f32(&c, out, n), expect(3.0));

    // Changed in the executable graph only.
    let p5 = saxpy_params(&ax, 5.0, x, y, n);
    c.graph_exec_kernel_node_set(exec, k, &saxpy(&ax, &p5, n)).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
    assert_eq!(read_f32(&c, out, n), expect(5.0));

    // Changed in the graph: the executable graph keeps what it had until
    // updated from it.
    let p7 = saxpy_params(&ax, 7.0, x, y, n);
    c.graph_kernel_node_set(k, &saxpy(&ax, &p7, n)).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
    assert_eq!(read_f32(&c, out, n), expect(5.0));
    assert_eq!(c.graph_exec_update(exec, graph).unwrap(), (CU_GRAPH_EXEC_UPDATE_SUCCESS.0, None));
    c.graph_launch(exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
    assert_eq!(read_f32(&c, out, n), expect(7.0));

    // A clone with a node more cannot update it.
    let bigger = c.graph_clone(graph).unwrap();
    assert_eq!(c.graph_nodes(bigger, false).unwrap().len(), 4);
    c.graph_add_node(bigger, &[], CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();
    let (result, _) = c.graph_exec_update(exec, bigger).unwrap();
    assert_ne!(result, CU_GRAPH_EXEC_UPDATE_SUCCESS.0);

    // The graph as one node of another, twice in a row.
    let outer = c.graph_create(g.ctx).unwrap();
    let first = c.graph_add_node(outer, &[], CU_GRAPH_NODE_TYPE_GRAPH.0, graph.0).unwrap();
    let child = c.graph_node_info(first).unwrap().child.expect("a child-graph node has its graph");
    assert_eq!(c.graph_nodes(child, false).unwrap().len(), 4);
    assert_eq!(code(c.graph_destroy(child).and_then(|_| c.ctx_synchronize(g.ctx))), CuResult::INVALID_VALUE, "the node owns its graph");
    let twice = c.graph_add_kernel_node(outer, &[first], &saxpy(&ax, &saxpy_params(&ax, 1.0, x, out, n), n)).unwrap();
    let exec2 = c.graph_instantiate(outer, 0).unwrap();
    c.graph_launch(exec2, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
    let seven = expect(7.0);
    assert_eq!(read_f32(&c, out, n), seven.iter().zip(&xs).map(|(o, x)| o + x).collect::<Vec<_>>());

    // Edges change; a destroyed node leaves with its edges.
    c.graph_edges_change(outer, &[first], &[twice], true).unwrap();
    assert!(c.graph_edges(outer).unwrap().is_empty());
    c.graph_edges_change(outer, &[first], &[twice], false).unwrap();
    assert_eq!(c.graph_edges(outer).unwrap(), vec![(first, twice)]);
    c.graph_node_destroy(first).unwrap();
    assert_eq!(c.graph_nodes(outer, false).unwrap(), vec![twice]);
    assert_eq!(code(c.graph_nodes(child, false)), CuResult::INVALID_VALUE, "gone with its node");

    for e in [exec, exec2] {
        c.graph_exec_destroy(e).unwrap();
    }
    for gr in [graph, bigger, outer] {
        c.graph_destroy(gr).unwrap();
    }
    c.ctx_synchronize(g.ctx).unwrap();
}

pub(crate) fn memset_head(ctx: u64, dst: u64, value: u32, n: usize) -> pvgpu_ring::proto::GraphMemsetHead {
    pvgpu_ring::proto::GraphMemsetHead {
        graph: 0.into(),
        ctx: ctx.into(),
        dst: dst.into(),
        pitch: 0.into(),
        width: (n as u64).into(),
        height: 1.into(),
        value: value.into(),
        elem_size: 4.into(),
        dep_count: 0.into(),
        reserved: 0.into(),
    }
}

/// Graph handles are checked like every other: unknown ids, nodes of
/// another graph, device ranges outside the session's memory, kernel
/// parameters that do not match, a graph of another context.
pub(crate) fn graph_handles_are_checked(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let d = c.mem_alloc(g.ctx, 4096).unwrap();
    let (a, b) = (c.graph_create(g.ctx).unwrap(), c.graph_create(g.ctx).unwrap());
    let na = c.graph_add_node(a, &[], CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();
    let bad = Graph(0xdead_beef);
    assert_eq!(code(c.graph_nodes(bad, false)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_instantiate(bad, 0)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_node_info(GraphNode(0xdead))), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_add_node(b, &[na], CU_GRAPH_NODE_TYPE_EMPTY.0, 0)), CuResult::INVALID_VALUE, "a node of another graph");
    assert_eq!(code(c.graph_add_node(a, &[], 0x7777, 0)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_add_node(a, &[], CU_GRAPH_NODE_TYPE_GRAPH.0, a.0)), CuResult::INVALID_VALUE, "itself as a child");
    assert_eq!(code(c.graph_add_memcpy_node(a, &[], g.ctx, d, d + 4096, 16)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_add_memcpy_node(a, &[], g.ctx, d, 0x1000, 16)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_add_memset_node(a, &[], memset_head(g.ctx.0, d, 0, 1025))), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_instantiate(a, 1 << 20)), CuResult::INVALID_VALUE, "unknown flags");
    let ax = g.func("saxpy").unwrap();
    let short = vec![0u8; ax.param_bytes - 4];
    let k = KernelNode { f: &ax, grid: [1, 1, 1], block: [1, 1, 1], shared_mem: 0, params: &short };
    assert_eq!(code(c.graph_add_kernel_node(a, &[], &k)), CuResult::INVALID_VALUE);
    let other = c.ctx_create(0, 0).unwrap();
    let foreign = c.graph_create(other).unwrap();
    assert_eq!(code(c.graph_add_memcpy_node(foreign, &[], g.ctx, d, d, 16)), CuResult::INVALID_CONTEXT);
    c.ctx_destroy(other).unwrap();
    assert_eq!(code(c.graph_nodes(foreign, false)), CuResult::INVALID_VALUE, "gone with its context");
    c.graph_destroy(a).unwrap();
    assert_eq!(code(c.graph_destroy(a).and_then(|_| c.ctx_synchronize(g.ctx))), CuResult::INVALID_VALUE);
    c.graph_destroy(b).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
}

/// What an executable graph lets change without instantiating again: a
/// memset's value, a copy's destination, a node disabled and enabled, a
/// child graph swapped for a changed one; and capture into a graph the
/// program made.
pub(crate) fn executable_graph_setters(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let n = 4096;
    let bytes = (n * 4) as u64;
    let [x, y, out, other] = [0; 4].map(|_| c.mem_alloc(g.ctx, bytes).unwrap());
    let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    c.memcpy_htod(x, &f32s(&xs)).unwrap();
    let ax = g.func("saxpy").unwrap();
    let line = |a: f32, b: f32| -> Vec<f32> { xs.iter().map(|v| a * v + b).collect() };
    let run = |e| {
        c.graph_launch(e, s, false).unwrap();
        c.stream_synchronize(s).unwrap();
    };

    let graph = c.graph_create(g.ctx).unwrap();
    let set = c.graph_add_memset_node(graph, &[], memset_head(g.ctx.0, y, 2.0f32.to_bits(), n)).unwrap();
    let p2 = saxpy_params(&ax, 2.0, x, y, n);
    let k = c.graph_add_kernel_node(graph, &[set], &saxpy(&ax, &p2, n)).unwrap();
    let copy = c.graph_add_memcpy_node(graph, &[k], g.ctx, out, y, bytes).unwrap();
    let e = c.graph_instantiate(graph, 0).unwrap();
    run(e);
    assert_eq!(read_f32(&c, out, n), line(2.0, 2.0));

    c.graph_exec_memset_set(e, set, memset_head(g.ctx.0, y, 3.0f32.to_bits(), n)).unwrap();
    run(e);
    assert_eq!(read_f32(&c, out, n), line(2.0, 3.0), "memset value set");
    c.graph_node_enable(e, k, false).unwrap();
    run(e);
    assert_eq!(read_f32(&c, out, n), line(0.0, 3.0), "kernel skipped");
    c.graph_node_enable(e, k, true).unwrap();
    c.graph_exec_memcpy_set(e, copy, g.ctx, other, y, bytes).unwrap();
    run(e);
    assert_eq!(read_f32(&c, other, n), line(2.0, 3.0), "copy moved");
    assert_eq!(read_f32(&c, out, n), line(0.0, 3.0));
    assert!(c.graph_exec_memset_set(e, k, memset_head(g.ctx.0, y, 0, n)).is_err(), "a kernel node is not a memset");
    assert_eq!(code(c.graph_exec_memcpy_set(e, copy, g.ctx, other, y, bytes + 4096)), CuResult::INVALID_VALUE);

    // A child graph, then swapped for the graph as changed since.
    let outer = c.graph_create(g.ctx).unwrap();
    let child = c.graph_add_node(outer, &[], CU_GRAPH_NODE_TYPE_GRAPH.0, graph.0).unwrap();
    let e2 = c.graph_instantiate(outer, 0).unwrap();
    let p6 = saxpy_params(&ax, 6.0, x, y, n);
    c.graph_kernel_node_set(k, &saxpy(&ax, &p6, n)).unwrap();
    run(e2);
    assert_eq!(read_f32(&c, out, n), line(2.0, 2.0), "the child as instantiated");
    c.graph_exec_child_set(e2, child, graph).unwrap();
    run(e2);
    assert_eq!(read_f32(&c, out, n), line(6.0, 2.0), "the child swapped");

    // Capture into a graph of the program, after one of its nodes.
    let h = c.graph_create(g.ctx).unwrap();
    let first = c.graph_add_memset_node(h, &[], memset_head(g.ctx.0, y, 1.0f32.to_bits(), n)).unwrap();
    c.stream_begin_capture_to_graph(s, h, &[first], CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    c.launch(&ax, [(n as u32).div_ceil(256), 1, 1], [256, 1, 1], 0, s, &[arg(&4.0f32), arg(&x), arg(&y), arg(&(n as i32))]).unwrap();
    assert_eq!(c.stream_end_capture(s).unwrap(), h, "the graph given comes back");
    assert_eq!(c.graph_nodes(h, false).unwrap().len(), 2);
    assert_eq!(c.graph_node_edges(first, true).unwrap().len(), 1, "the capture went after the node");
    let e3 = c.graph_instantiate(h, 0).unwrap();
    run(e3);
    assert_eq!(read_f32(&c, y, n), line(4.0, 1.0));
    for x in [e, e2, e3] {
        c.graph_exec_destroy(x).unwrap();
    }
    for gr in [graph, outer, h] {
        c.graph_destroy(gr).unwrap();
    }
    c.ctx_synchronize(g.ctx).unwrap();
}
