//! Graph memory: allocations and frees captured on a stream and added by
//! hand run at every launch, their addresses usable by the graph's other
//! nodes; offered where the backend measures each session's device memory
//! (process isolation), refused as the driver refuses unsupported capture
//! work elsewhere.

use super::*;
use crate::graphs::memset_head;
use pvgpu_ring::cuda::api::*;

fn read_f32(c: &Client, d: u64, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut b, d).unwrap();
    bytes_f32(&b)
}

pub(crate) fn graph_memory(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let n = 4096;
    let bytes = (n * 4) as u64;
    let [x, y] = [0; 2].map(|_| c.mem_alloc(g.ctx, bytes).unwrap());
    let xs: Vec<f32> = (0..n).map(|i| (i % 31) as f32).collect();
    c.memcpy_htod(x, &f32_bytes(&xs)).unwrap();
    let ax = g.func("saxpy").unwrap();
    let global = CU_STREAM_CAPTURE_MODE_GLOBAL.0;

    c.stream_begin_capture(s, global).unwrap();
    let tmp = c.mem_alloc_async(g.ctx, bytes, s);
    if !pvgpu_tests::process_isolation() {
        // Not measured per session: not offered.
        assert_eq!(code(tmp), CuResult::STREAM_CAPTURE_UNSUPPORTED);
        assert_eq!(code(c.stream_end_capture(s)), CuResult::STREAM_CAPTURE_INVALIDATED);
        let graph = c.graph_create(g.ctx).unwrap();
        assert_eq!(code(c.graph_add_mem_alloc_node(graph, &[], bytes)), CuResult::NOT_SUPPORTED);
        assert_eq!(c.graph_mem_attr(g.ctx, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH.0, 0).unwrap(), 0);
        c.graph_destroy(graph).unwrap();
        return;
    }
    // Captured: tmp = 1; tmp = 2x + tmp; y = tmp; free tmp.
    let tmp = tmp.unwrap();
    c.memset(tmp, 1.0f32.to_bits(), 4, n as u64, s).unwrap();
    c.launch(&ax, [(n as u32).div_ceil(256), 1, 1], [256, 1, 1], 0, s, &[arg(&2.0f32), arg(&x), arg(&tmp), arg(&(n as i32))]).unwrap();
    c.memcpy_dtod_async(y, tmp, bytes, s).unwrap();
    c.mem_free_async(tmp, s).unwrap();
    let graph = c.stream_end_capture(s).unwrap();
    let kinds: Vec<u32> = c.graph_nodes(graph, false).unwrap().iter().map(|n| c.graph_node_info(*n).unwrap().kind).collect();
    assert!(kinds.contains(&CU_GRAPH_NODE_TYPE_MEM_ALLOC.0) && kinds.contains(&CU_GRAPH_NODE_TYPE_MEM_FREE.0), "{kinds:?}");
    let exec = c.graph_instantiate(graph, 0).unwrap();
    for _ in 0..2 {
        c.memset(y, 0, 4, n as u64, s).unwrap();
        c.graph_launch(exec, s, false).unwrap();
        c.stream_synchronize(s).unwrap();
        assert_eq!(read_f32(&c, y, n), xs.iter().map(|v| 2.0 * v + 1.0).collect::<Vec<_>>());
    }

    // By hand: allocate, set, copy out, free.
    let hand = c.graph_create(g.ctx).unwrap();
    let (alloc, dptr) = c.graph_add_mem_alloc_node(hand, &[], bytes).unwrap();
    assert_eq!(c.mem_node_params(alloc).unwrap(), (dptr, bytes));
    let set = c.graph_add_memset_node(hand, &[alloc], memset_head(g.ctx.0, dptr, 7, n)).unwrap();
    let copy = c.graph_add_memcpy_node(hand, &[set], g.ctx, y, dptr, bytes).unwrap();
    let free = c.graph_add_mem_free_node(hand, &[copy], dptr).unwrap();
    assert_eq!(c.mem_node_params(free).unwrap(), (dptr, 0));
    assert_eq!(c.graph_node_info(alloc).unwrap().kind, CU_GRAPH_NODE_TYPE_MEM_ALLOC.0);
    assert_eq!(code(c.graph_add_mem_free_node(hand, &[], x)), CuResult::INVALID_VALUE, "not graph memory");
    let hand_exec = c.graph_instantiate(hand, 0).unwrap();
    c.graph_launch(hand_exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
    let mut back = vec![0u8; bytes as usize];
    c.memcpy_dtoh(&mut back, y).unwrap();
    assert!(back.chunks(4).all(|w| w == [7, 0, 0, 0]));

    let high = c.graph_mem_attr(g.ctx, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH.0, 0).unwrap();
    assert!(high >= bytes, "high-water mark {high}");
    c.graph_mem_attr(g.ctx, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH.0, 1).unwrap();
    assert_eq!(
        code(c.graph_mem_attr(g.ctx, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT.0, 1)),
        CuResult::INVALID_VALUE,
        "only high-water marks reset"
    );
    for e in [exec, hand_exec] {
        c.graph_exec_destroy(e).unwrap();
    }
    for gr in [graph, hand] {
        c.graph_destroy(gr).unwrap();
    }
    c.graph_mem_attr(g.ctx, 0, 2).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
}
