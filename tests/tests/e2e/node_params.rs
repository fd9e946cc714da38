//! Node parameters read back and set in a graph: kernel nodes (built by
//! hand and captured: their function and packed arguments), memset, copy
//! and event nodes; whether an executable graph runs a node; a node's
//! counterpart in a clone; kernel node attributes.

use super::*;
use crate::graphs::memset_head;
use pvgpu_frontend::{KernelNode, NodeParams};
use pvgpu_ring::cuda::api::*;

fn read_f32(c: &Client, d: u64, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut b, d).unwrap();
    bytes_f32(&b)
}

pub(crate) fn node_parameters(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let n = 1024;
    let bytes = (n * 4) as u64;
    let [x, y, out] = [0; 3].map(|_| c.mem_alloc(g.ctx, bytes).unwrap());
    c.memcpy_htod(x, &f32_bytes(&vec![2.0; n])).unwrap();
    let ax = g.func("saxpy").unwrap();
    let (e1, e2) = (c.event_create(g.ctx, 0).unwrap(), c.event_create(g.ctx, 0).unwrap());

    let graph = c.graph_create(g.ctx).unwrap();
    let set = c.graph_add_memset_node(graph, &[], memset_head(g.ctx.0, y, 1.0f32.to_bits(), n)).unwrap();
    let p3 = ax.pack(&[arg(&3.0f32), arg(&x), arg(&y), arg(&(n as i32))]).unwrap();
    let kn = KernelNode { f: &ax, grid: [4, 1, 1], block: [256, 1, 1], shared_mem: 0, params: &p3 };
    let k = c.graph_add_kernel_node(graph, &[set], &kn).unwrap();
    let copy = c.graph_add_memcpy_node(graph, &[k], g.ctx, out, y, bytes).unwrap();
    let record = c.graph_add_event_node(graph, &[copy], e1, false).unwrap();

    let want_kernel = NodeParams::Kernel { function: ax.id, grid: [4, 1, 1], block: [256, 1, 1], shared_mem: 0, params: p3.clone() };
    assert_eq!(c.graph_node_params(k).unwrap(), want_kernel);
    assert!(c.graph_node_params(k).unwrap().is_kernel_of(&ax));
    let want_set = NodeParams::Memset { dst: y, pitch: 0, value: 1.0f32.to_bits(), elem_size: 4, width: n as u64, height: 1 };
    assert_eq!(c.graph_node_params(set).unwrap(), want_set);
    assert_eq!(c.graph_node_params(copy).unwrap(), NodeParams::Memcpy { dst: out, src: y, len: bytes });
    assert_eq!(c.graph_node_params(record).unwrap(), NodeParams::Event { wait: false, event: e1 });

    // Set in the graph: the memset writes 4, the node records the other
    // event.
    c.graph_memset_node_set(set, memset_head(g.ctx.0, y, 4.0f32.to_bits(), n)).unwrap();
    c.graph_event_node_set(None, record, e2).unwrap();
    assert_eq!(c.graph_node_params(record).unwrap(), NodeParams::Event { wait: false, event: e2 });
    let exec = c.graph_instantiate(graph, 0).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.event_synchronize(e2).unwrap();
    assert_eq!(read_f32(&c, out, n), vec![3.0 * 2.0 + 4.0; n]);
    // In the executable graph.
    c.graph_event_node_set(Some(exec), record, e1).unwrap();
    assert!(c.graph_node_enabled(exec, k).unwrap());
    c.graph_node_enable(exec, k, false).unwrap();
    assert!(!c.graph_node_enabled(exec, k).unwrap());
    c.graph_memcpy_node_set(copy, g.ctx, out, x, bytes).unwrap();
    assert_eq!(c.graph_node_params(copy).unwrap(), NodeParams::Memcpy { dst: out, src: x, len: bytes });
    // Refused: another kind's parameters, an event of no node kind.
    assert_eq!(code(c.graph_event_node_set(None, k, e1)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_memset_node_set(copy, memset_head(g.ctx.0, y, 0, n))), CuResult::INVALID_VALUE);

    // A clone's nodes, found from the original's.
    let clone = c.graph_clone(graph).unwrap();
    let kc = c.graph_node_find_in_clone(clone, k).unwrap();
    assert_ne!(kc, k);
    assert_eq!(c.graph_node_params(kc).unwrap(), want_kernel);
    assert_eq!(code(c.graph_node_find_in_clone(graph, kc)), CuResult::INVALID_VALUE);

    // A captured launch: its function and arguments.
    c.stream_begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    c.launch(&ax, [2, 1, 1], [128, 1, 1], 0, s, &[arg(&7.0f32), arg(&x), arg(&out), arg(&(n as i32))]).unwrap();
    let cap = c.stream_end_capture(s).unwrap();
    let nodes = c.graph_nodes(cap, false).unwrap();
    let p7 = ax.pack(&[arg(&7.0f32), arg(&x), arg(&out), arg(&(n as i32))]).unwrap();
    assert_eq!(
        c.graph_node_params(nodes[0]).unwrap(),
        NodeParams::Kernel { function: ax.id, grid: [2, 1, 1], block: [128, 1, 1], shared_mem: 0, params: p7 }
    );

    c.graph_exec_destroy(exec).unwrap();
    for gr in [graph, clone, cap] {
        c.graph_destroy(gr).unwrap();
    }
    c.ctx_synchronize(g.ctx).unwrap();
}

/// An attribute value whose first member is the 32-bit `v`.
fn attr_value(v: i32) -> [u8; 64] {
    let mut value = [0u8; 64];
    value[..4].copy_from_slice(&v.to_le_bytes());
    value
}

pub(crate) fn kernel_node_attributes(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let n: i32 = 256;
    let [x, y] = [0; 2].map(|_| c.mem_alloc(g.ctx, (n * 4) as u64).unwrap());
    let ax = g.func("saxpy").unwrap();
    let p = ax.pack(&[arg(&1.0f32), arg(&x), arg(&y), arg(&n)]).unwrap();
    let kn = KernelNode { f: &ax, grid: [1, 1, 1], block: [256, 1, 1], shared_mem: 0, params: &p };
    let graph = c.graph_create(g.ctx).unwrap();
    let (k1, k2) = (c.graph_add_kernel_node(graph, &[], &kn).unwrap(), c.graph_add_kernel_node(graph, &[], &kn).unwrap());
    let priority = CU_LAUNCH_ATTRIBUTE_PRIORITY.0;
    let carveout = CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT.0;

    // Never set: zero. Set: read back, and kept by new parameters.
    assert_eq!(c.graph_kernel_node_attr(k1, priority, None).unwrap(), attr_value(0));
    assert_eq!(c.graph_kernel_node_attr(k1, priority, Some(attr_value(-1))).unwrap(), attr_value(-1));
    c.graph_kernel_node_attr(k1, carveout, Some(attr_value(50))).unwrap();
    c.graph_kernel_node_set(k1, &kn).unwrap();
    assert_eq!(c.graph_kernel_node_attr(k1, priority, None).unwrap(), attr_value(-1));
    // Copied to another node, and into a clone.
    c.graph_kernel_node_copy_attrs(k2, k1).unwrap();
    assert_eq!(c.graph_kernel_node_attr(k2, priority, None).unwrap(), attr_value(-1));
    assert_eq!(c.graph_kernel_node_attr(k2, carveout, None).unwrap(), attr_value(50));
    let clone = c.graph_clone(graph).unwrap();
    let k1c = c.graph_node_find_in_clone(clone, k1).unwrap();
    assert_eq!(c.graph_kernel_node_attr(k1c, priority, None).unwrap(), attr_value(-1));
    // The graph still runs.
    let exec = c.graph_instantiate(graph, 0).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();

    // A launch's attributes become its captured node's.
    c.stream_begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    let la = pvgpu_ring::proto::LaunchAttr { id: priority.into(), reserved: 0.into(), value: attr_value(-1) };
    c.launch_ex(&ax, [1, 1, 1], [256, 1, 1], 0, s, &[la], &p).unwrap();
    let cap = c.stream_end_capture(s).unwrap();
    let captured = c.graph_nodes(cap, false).unwrap();
    assert_eq!(c.graph_kernel_node_attr(captured[0], priority, None).unwrap(), attr_value(-1));

    // Refused: an attribute naming the driver's objects (a programmatic
    // event), a node that is not a kernel's.
    let event = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT.0;
    assert_eq!(code(c.graph_kernel_node_attr(k1, event, Some(attr_value(0)))), CuResult::NOT_SUPPORTED);
    let empty = c.graph_add_node(graph, &[], CU_GRAPH_NODE_TYPE_EMPTY.0, 0).unwrap();
    assert_eq!(code(c.graph_kernel_node_attr(empty, priority, None)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.graph_kernel_node_copy_attrs(empty, k1)), CuResult::INVALID_VALUE);

    c.graph_exec_destroy(exec).unwrap();
    for gr in [graph, clone, cap] {
        c.graph_destroy(gr).unwrap();
    }
}

/// The handle kernels launch a graph by: handed out for a graph made for
/// device launch, by a backend that serves the session in a process of its
/// own (it is an address of that process); refused otherwise.
pub(crate) fn device_launch_handles(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let graph = c.graph_create(g.ctx).unwrap();
    let (x, ax) = (c.mem_alloc(g.ctx, 1024).unwrap(), g.func("saxpy").unwrap());
    let p = ax.pack(&[arg(&1.0f32), arg(&x), arg(&x), arg(&256i32)]).unwrap();
    c.graph_add_kernel_node(graph, &[], &KernelNode { f: &ax, grid: [1, 1, 1], block: [256, 1, 1], shared_mem: 0, params: &p }).unwrap();
    let device = c.graph_instantiate(graph, CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64).unwrap();
    let host = c.graph_instantiate(graph, 0).unwrap();
    if pvgpu_tests::process_isolation() {
        assert_ne!(c.graph_device_handle(device).unwrap(), 0);
        assert_eq!(code(c.graph_device_handle(host)), CuResult::INVALID_VALUE);
    } else {
        assert_eq!(code(c.graph_device_handle(device)), CuResult::NOT_SUPPORTED);
    }
    c.graph_exec_destroy(device).unwrap();
    c.graph_exec_destroy(host).unwrap();
    c.graph_destroy(graph).unwrap();
    c.mem_free(x).unwrap();
}
