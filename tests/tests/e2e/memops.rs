//! Stream memory operations: values written and waited for on a stream and
//! in a graph node (its operations read back and changed, in its graph and
//! in an executable graph), and addresses, flags and kinds checked by the
//! backend (a posted request's refusal comes back at the next call that
//! waits).

use super::*;
use pvgpu_frontend::NodeParams;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::MemOp;

fn op(kind: CUstreamBatchMemOpType, addr: u64, value: u64, flags: u32) -> MemOp {
    MemOp { kind: kind.0.into(), flags: flags.into(), addr: addr.into(), value: value.into() }
}

fn read_u32(c: &Client, d: u64, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut b, d).unwrap();
    b.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}

pub(crate) fn stream_memory_operations(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let d = c.mem_alloc(g.ctx, 64).unwrap();
    // On `s`: a non-blocking stream does not wait for the default one.
    c.memset(d, 0, 4, 16, s).unwrap();
    let ops = [
        op(CU_STREAM_MEM_OP_WRITE_VALUE_32, d, 7, 0),
        op(CU_STREAM_MEM_OP_WAIT_VALUE_32, d, 7, CU_STREAM_WAIT_VALUE_EQ.0),
        op(CU_STREAM_MEM_OP_WRITE_VALUE_64, d + 8, 0x1_0000_0002, 0),
        op(CU_STREAM_MEM_OP_BARRIER, 0, 0, 0),
        op(CU_STREAM_MEM_OP_WAIT_VALUE_64, d + 8, 3, CU_STREAM_WAIT_VALUE_AND.0),
    ];
    c.stream_mem_ops(&ops, s).unwrap();
    c.stream_synchronize(s).unwrap();
    assert_eq!(read_u32(&c, d, 4), [7, 0, 2, 1]);

    // A node runs its operations at every launch.
    let graph = c.graph_create(g.ctx).unwrap();
    let write11 = [op(CU_STREAM_MEM_OP_WRITE_VALUE_32, d + 4, 11, 0)];
    let node = c.graph_add_mem_op_node(graph, &[], g.ctx, &write11).unwrap();
    let e = c.graph_instantiate(graph, 0).unwrap();
    let launch_reads = |want: u32| {
        c.memset(d + 4, 0, 4, 1, s).unwrap();
        c.graph_launch(e, s, false).unwrap();
        c.stream_synchronize(s).unwrap();
        assert_eq!(read_u32(&c, d + 4, 1), [want]);
    };
    for _ in 0..2 {
        launch_reads(11);
    }
    // Its operations read back, and changed: in the graph (the executable
    // graph keeps what it was made from), then in the executable graph.
    assert_eq!(c.graph_node_params(node).unwrap(), NodeParams::MemOps { ctx: g.ctx, ops: write11.to_vec() });
    let write12 = [op(CU_STREAM_MEM_OP_BARRIER, 0, 0, 0), op(CU_STREAM_MEM_OP_WRITE_VALUE_32, d + 4, 12, 0)];
    c.graph_mem_op_node_set(None, node, g.ctx, &write12).unwrap();
    assert_eq!(c.graph_node_params(node).unwrap(), NodeParams::MemOps { ctx: g.ctx, ops: write12.to_vec() });
    launch_reads(11);
    c.graph_mem_op_node_set(Some(e), node, g.ctx, &[op(CU_STREAM_MEM_OP_WRITE_VALUE_32, d + 4, 13, 0)]).unwrap();
    launch_reads(13);
    // Refused: a value outside the session's memory, a node of another
    // kind.
    let far = [op(CU_STREAM_MEM_OP_WRITE_VALUE_32, d + (1 << 40), 1, 0)];
    assert_eq!(code(c.graph_mem_op_node_set(None, node, g.ctx, &far)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_mem_op_node_set(Some(e), node, g.ctx, &far)), CuResult::INVALID_VALUE);
    let empty = c.graph_add_node(graph, &[], CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();
    assert_eq!(code(c.graph_mem_op_node_set(None, empty, g.ctx, &write11)), CuResult::INVALID_VALUE);
    c.graph_exec_destroy(e).unwrap();
    c.graph_destroy(graph).unwrap();

    // Refused: memory not of the session, a value past an allocation's
    // end, a misaligned one, unknown flags, a write without a memory
    // barrier (the `_v2` API refuses it).
    let other = d + (1 << 40);
    for bad in [
        op(CU_STREAM_MEM_OP_WRITE_VALUE_32, other, 1, 0),
        op(CU_STREAM_MEM_OP_WAIT_VALUE_64, d + 60, 0, 0),
        op(CU_STREAM_MEM_OP_WRITE_VALUE_32, d + 2, 1, 0),
        op(CU_STREAM_MEM_OP_WAIT_VALUE_32, d, 0, 0x10),
        op(CU_STREAM_MEM_OP_WRITE_VALUE_32, d, 0, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER.0),
        op(CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES, 0, 0, 1),
    ] {
        c.stream_mem_ops(&[bad], s).unwrap();
        assert_eq!(code(c.stream_synchronize(s)), CuResult::INVALID_VALUE, "{bad:?}");
    }
    let graph = c.graph_create(g.ctx).unwrap();
    assert_eq!(
        code(c.graph_add_mem_op_node(graph, &[], g.ctx, &[op(CU_STREAM_MEM_OP_WRITE_VALUE_32, other, 1, 0)])),
        CuResult::INVALID_VALUE
    );
    c.graph_destroy(graph).unwrap();
    c.stream_synchronize(s).unwrap();
}
