//! Conditional nodes: if (with an else body), while and switch nodes whose
//! condition a kernel of the same launch sets through the handle, bodies
//! built by hand and captured, the default value assigned at each launch;
//! handles and bodies checked like every other graph object.

use super::*;
use crate::graphs::memset_head;
use pvgpu_frontend::{Function, GraphNode, KernelNode};
use pvgpu_ring::cuda::api::*;

pub(crate) fn read_i32(c: &Client, d: u64, n: usize) -> Vec<i32> {
    let mut b = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut b, d).unwrap();
    b.chunks_exact(4).map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}

pub(crate) fn one_thread<'a>(f: &'a Function, params: &'a [u8]) -> KernelNode<'a> {
    KernelNode { f, grid: [1, 1, 1], block: [1, 1, 1], shared_mem: 0, params }
}

pub(crate) fn conditional_nodes(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let n = 256;
    let [flag, counter, out] = [4, 4, n as u64 * 4].map(|b| c.mem_alloc(g.ctx, b).unwrap());
    let from_flag = g.func("pvgpu_cond_from_flag").unwrap();
    let count_down = g.func("pvgpu_cond_count_down").unwrap();
    let set_flag = |v: i32| c.memcpy_htod(flag, &v.to_le_bytes()).unwrap();
    let fill = |body, v: u32| c.graph_add_memset_node(body, &[], memset_head(g.ctx.0, out, v, n)).unwrap();

    // if / else: the kernel before the node sets the condition from the flag.
    let graph = c.graph_create(g.ctx).unwrap();
    let h = c.graph_cond_handle(graph, 0, false).unwrap();
    let p = from_flag.pack(&[arg(&flag), arg(&h)]).unwrap();
    let k = c.graph_add_kernel_node(graph, &[], &one_thread(&from_flag, &p)).unwrap();
    let (node, bodies) = c.graph_add_cond_node(graph, &[k], h, CU_GRAPH_COND_TYPE_IF.0, 2).unwrap();
    assert_eq!(c.graph_node_info(node).unwrap().kind, CU_GRAPH_NODE_TYPE_CONDITIONAL.0);
    fill(bodies[0], 11);
    fill(bodies[1], 22);
    let e = c.graph_instantiate(graph, 0).unwrap();
    for (v, want) in [(1, 11), (0, 22), (5, 11)] {
        set_flag(v);
        c.graph_launch(e, s, false).unwrap();
        c.stream_synchronize(s).unwrap();
        assert!(read_i32(&c, out, n).iter().all(|&x| x == want), "if: flag {v}");
    }

    // while: the condition starts at 1 at each launch; the body counts
    // down (captured into the body) and fills.
    let loop_graph = c.graph_create(g.ctx).unwrap();
    let w = c.graph_cond_handle(loop_graph, 1, true).unwrap();
    let (_, body) = c.graph_add_cond_node(loop_graph, &[], w, CU_GRAPH_COND_TYPE_WHILE.0, 1).unwrap();
    let cap = c.stream_create(g.ctx, 1, 0).unwrap();
    c.stream_begin_capture_to_graph(cap, body[0], &[], CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    c.launch(&count_down, [1, 1, 1], [1, 1, 1], 0, cap, &[arg(&counter), arg(&w)]).unwrap();
    c.memset(out, 33, 4, n as u64, cap).unwrap();
    c.stream_end_capture(cap).unwrap();
    let le = c.graph_instantiate(loop_graph, 0).unwrap();
    for start in [3i32, 1] {
        c.memcpy_htod(counter, &start.to_le_bytes()).unwrap();
        c.memset(out, 0, 4, n as u64, s).unwrap();
        c.graph_launch(le, s, false).unwrap();
        c.stream_synchronize(s).unwrap();
        assert_eq!(read_i32(&c, counter, 1), [0], "while from {start}: ran once per count");
        assert!(read_i32(&c, out, n).iter().all(|&x| x == 33));
    }

    // switch: body i fills i + 1; a value past the last body runs none.
    let sw = c.graph_create(g.ctx).unwrap();
    let hs = c.graph_cond_handle(sw, 0, false).unwrap();
    let p = from_flag.pack(&[arg(&flag), arg(&hs)]).unwrap();
    let k = c.graph_add_kernel_node(sw, &[], &one_thread(&from_flag, &p)).unwrap();
    let (_, cases) = c.graph_add_cond_node(sw, &[k], hs, CU_GRAPH_COND_TYPE_SWITCH.0, 3).unwrap();
    for (i, case) in cases.iter().enumerate() {
        fill(*case, i as u32 + 1);
    }
    let se = c.graph_instantiate(sw, 0).unwrap();
    for (v, want) in [(2, 3), (0, 1), (7, 1)] {
        set_flag(v);
        c.graph_launch(se, s, false).unwrap();
        c.stream_synchronize(s).unwrap();
        assert!(read_i32(&c, out, n).iter().all(|&x| x == want), "switch: value {v}");
    }

    // Handles and bodies are checked: another graph's handle, a bad kind
    // or size, and destroying a body are refused.
    let other = c.graph_create(g.ctx).unwrap();
    assert_eq!(code(c.graph_add_cond_node(other, &[], h, CU_GRAPH_COND_TYPE_IF.0, 1)), CuResult::INVALID_VALUE);
    let ho = c.graph_cond_handle(other, 0, false).unwrap();
    assert_eq!(code(c.graph_add_cond_node(other, &[], ho, 3, 1)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_add_cond_node(other, &[], ho, CU_GRAPH_COND_TYPE_SWITCH.0, 0)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_add_cond_node(other, &[GraphNode(k.0)], ho, CU_GRAPH_COND_TYPE_IF.0, 1)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_destroy(bodies[0]).and_then(|_| c.ctx_synchronize(g.ctx))), CuResult::INVALID_VALUE);
    let (_, ob) = c.graph_add_cond_node(other, &[], ho, CU_GRAPH_COND_TYPE_IF.0, 1).unwrap();
    c.graph_add_node(ob[0], &[], CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();

    // A graph with a handle no node uses is not instantiated, as the
    // driver refuses it.
    let unused = c.graph_create(g.ctx).unwrap();
    c.graph_cond_handle(unused, 0, false).unwrap();
    assert_eq!(code(c.graph_instantiate(unused, 0)), CuResult::INVALID_VALUE);
    c.graph_destroy(unused).unwrap();

    // Bodies nest 64 deep (what a checkpoint reads), no deeper.
    let mut inner = ob[0];
    for _ in 1..64 {
        let h = c.graph_cond_handle(inner, 0, false).unwrap();
        inner = c.graph_add_cond_node(inner, &[], h, CU_GRAPH_COND_TYPE_IF.0, 1).unwrap().1[0];
    }
    let h = c.graph_cond_handle(inner, 0, false).unwrap();
    assert_eq!(code(c.graph_add_cond_node(inner, &[], h, CU_GRAPH_COND_TYPE_IF.0, 1)), CuResult::NOT_SUPPORTED);

    for e in [e, le, se] {
        c.graph_exec_destroy(e).unwrap();
    }
    for gr in [graph, loop_graph, sw, other] {
        c.graph_destroy(gr).unwrap();
    }
    c.ctx_synchronize(g.ctx).unwrap();
}
