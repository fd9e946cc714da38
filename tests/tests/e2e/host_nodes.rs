//! Host nodes: the program's functions in its graphs run in the program at
//! every launch, in graph order, between the device work around them;
//! added by hand or captured with `cuLaunchHostFunc`, read back and
//! changed as the driver allows.

use super::*;
use pvgpu_frontend::{HostFn, KernelNode};
use pvgpu_ring::cuda::api::*;
use std::ffi::c_void;
use std::sync::Mutex;

/// What one host node records when it runs: its tag, in a log shared by
/// the nodes of a test.
struct Tag<'a> {
    log: &'a Mutex<Vec<u32>>,
    tag: u32,
}

unsafe extern "C" fn record(data: *mut c_void) {
    // SAFETY: every node of these tests is given a live `Tag`.
    let t = unsafe { &*(data as *const Tag<'_>) };
    t.log.lock().unwrap().push(t.tag);
}

fn data(t: &Tag<'_>) -> *mut c_void {
    t as *const Tag<'_> as *mut c_void
}

const RECORD: HostFn = record;

pub(crate) fn host_nodes_run_at_every_launch(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let log = Mutex::new(Vec::new());
    let tags: Vec<Tag<'_>> = (0..5).map(|tag| Tag { log: &log, tag }).collect();
    let n = 1024;
    let y = c.mem_alloc(g.ctx, (n * 4) as u64).unwrap();
    c.memset(y, 0, 4, n as u64, Stream::DEFAULT).unwrap();
    let ax = g.func("saxpy").unwrap();
    let p = ax.pack(&[arg(&1.0f32), arg(&y), arg(&y), arg(&(n as i32))]).unwrap();
    let k = KernelNode { f: &ax, grid: [(n as u32).div_ceil(256), 1, 1], block: [256, 1, 1], shared_mem: 0, params: &p };

    // kernel -> host 1 -> kernel -> host 2: y doubles twice per launch.
    let graph = c.graph_create(g.ctx).unwrap();
    let k1 = c.graph_add_kernel_node(graph, &[], &k).unwrap();
    // SAFETY: `record` takes a live `Tag`; the tags outlive the graphs.
    let h1 = unsafe { c.graph_add_host_node(graph, &[k1], RECORD, data(&tags[1])) }.unwrap();
    let k2 = c.graph_add_kernel_node(graph, &[h1], &k).unwrap();
    // SAFETY: as above.
    let h2 = unsafe { c.graph_add_host_node(graph, &[k2], RECORD, data(&tags[2])) }.unwrap();
    assert_eq!(c.graph_node_info(h1).unwrap().kind, CU_GRAPH_NODE_TYPE_HOST.0);
    assert_eq!(c.host_node_params(h2).unwrap(), (RECORD as *const () as usize, data(&tags[2]) as usize));
    // SAFETY: as above.
    assert_eq!(code(unsafe { c.host_node_set(None, k1, RECORD, data(&tags[0])) }), CuResult::INVALID_VALUE, "not a host node");
    assert!(log.lock().unwrap().is_empty(), "nothing runs before a launch");

    let ones = f32_bytes(&vec![1.0f32; n]);
    c.memcpy_htod(y, &ones).unwrap();
    let exec = c.graph_instantiate(graph, 0).unwrap();
    for _ in 0..3 {
        c.graph_launch(exec, s, false).unwrap();
    }
    assert!(c.host_calls_pending());
    c.stream_synchronize(s).unwrap();
    assert_eq!(*log.lock().unwrap(), [1, 2, 1, 2, 1, 2]);
    let mut back = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut back, y).unwrap();
    assert_eq!(bytes_f32(&back), vec![64.0f32; n], "six doublings, in order with the host nodes");

    // Changed in the executable graph only; the graph keeps its function.
    log.lock().unwrap().clear();
    // SAFETY: as above.
    unsafe { c.host_node_set(Some(exec), h2, RECORD, data(&tags[3])) }.unwrap();
    c.graph_launch(exec, s, false).unwrap();
    assert!(c.stream_query(s).unwrap(), "the query waits for the launch's host nodes");
    assert_eq!(*log.lock().unwrap(), [1, 3]);
    assert_eq!(c.host_node_params(h2).unwrap().1, data(&tags[2]) as usize);

    // Captured: a host function on a capturing stream is a node of the
    // graph, run at each launch and not at capture.
    log.lock().unwrap().clear();
    c.stream_begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    c.launch(&ax, k.grid, k.block, 0, s, &[arg(&1.0f32), arg(&y), arg(&y), arg(&(n as i32))]).unwrap();
    // SAFETY: as above.
    unsafe { c.launch_host_func_captured(s, RECORD, data(&tags[4])) }.unwrap();
    let captured = c.stream_end_capture(s).unwrap();
    assert!(log.lock().unwrap().is_empty());
    let kinds: Vec<u32> = c.graph_nodes(captured, false).unwrap().iter().map(|n| c.graph_node_info(*n).unwrap().kind).collect();
    assert!(kinds.contains(&CU_GRAPH_NODE_TYPE_HOST.0), "{kinds:?}");
    // Inside another graph, as a child: its host node still runs.
    let outer = c.graph_create(g.ctx).unwrap();
    c.graph_add_node(outer, &[], CU_GRAPH_NODE_TYPE_GRAPH.0, captured.0).unwrap();
    let outer_exec = c.graph_instantiate(outer, 0).unwrap();
    let exec2 = c.graph_instantiate(captured, 0).unwrap();
    c.graph_launch(exec2, s, false).unwrap();
    c.graph_launch(outer_exec, Stream::DEFAULT, false).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    assert_eq!(*log.lock().unwrap(), [4, 4]);
    // On a stream that is not capturing, the backend refuses it (the
    // program's library runs those itself).
    // SAFETY: as above.
    assert_eq!(code(unsafe { c.launch_host_func_captured(s, RECORD, data(&tags[4])) }), CuResult::INVALID_VALUE);

    // A stream callback during capture is refused and ends the capture,
    // as the driver does.
    c.stream_begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL.0).unwrap();
    assert_eq!(code(c.stream_callback_captured(s)), CuResult::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(c.stream_capture_info(s).unwrap().status, CU_STREAM_CAPTURE_STATUS_INVALIDATED.0);
    assert_eq!(code(c.stream_end_capture(s)), CuResult::STREAM_CAPTURE_INVALIDATED);

    for e in [exec, exec2, outer_exec] {
        c.graph_exec_destroy(e).unwrap();
    }
    for gr in [graph, captured, outer] {
        c.graph_destroy(gr).unwrap();
    }
    c.ctx_synchronize(g.ctx).unwrap();
}

/// What the host node of [`host_nodes_write_mirrored_memory`] writes.
struct Fill {
    x: *mut f32,
    n: usize,
    round: std::sync::atomic::AtomicU32,
}

unsafe extern "C" fn fill(data: *mut c_void) {
    // SAFETY: the node is given a live `Fill` whose `x` holds `n` floats of
    // mirrored memory, which no kernel uses while the node runs.
    let f = unsafe { &*(data as *const Fill) };
    let round = f.round.load(std::sync::atomic::Ordering::Relaxed) as f32;
    for i in 0..f.n {
        // SAFETY: as above.
        unsafe { *f.x.add(i) = (i % 7) as f32 + round };
    }
}

/// A host node writes 256 KiB of mirrored memory (what the drop-in
/// library makes of managed memory over TCP) and the kernel after it reads
/// all of it: the program sends the write while the backend waits for the
/// host call to finish, a message large enough to be read into a stream
/// connection's staging instead of the wait's own buffer. Mirrors need the
/// backend in another process: nothing to do embedded.
pub(crate) fn host_nodes_write_mirrored_memory(t: Transport) {
    use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, munmap};
    let h = shared();
    if h.is_embedded() {
        return;
    }
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let n = 64 << 10;
    let len = std::num::NonZeroUsize::new(n * 4).unwrap();
    // SAFETY: fresh anonymous memory of this test, unmapped at the end.
    let map = unsafe { mmap_anonymous(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }.unwrap();
    let x = map.as_ptr().cast::<f32>();
    // SAFETY: as above; mapped until munmap below.
    let dx = unsafe { c.mirror_host(x.cast(), len.get()) }.unwrap();
    let y = c.mem_alloc(g.ctx, (n * 4) as u64).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let ax = g.func("saxpy").unwrap();
    let p = ax.pack(&[arg(&1.0f32), arg(&dx), arg(&y), arg(&(n as i32))]).unwrap();
    let k = KernelNode { f: &ax, grid: [(n as u32).div_ceil(256), 1, 1], block: [256, 1, 1], shared_mem: 0, params: &p };
    let f = Fill { x, n, round: 0.into() };
    let graph = c.graph_create(g.ctx).unwrap();
    // SAFETY: `fill` takes a live `Fill`; `f` outlives the graph's launches.
    let hn = unsafe { c.graph_add_host_node(graph, &[], fill, &f as *const Fill as *mut c_void) }.unwrap();
    c.graph_add_kernel_node(graph, &[hn], &k).unwrap();
    let exec = c.graph_instantiate(graph, 0).unwrap();
    for round in 1..=3u32 {
        f.round.store(round, std::sync::atomic::Ordering::Relaxed);
        c.memset(y, 0, 4, n as u64, Stream::DEFAULT).unwrap();
        c.ctx_synchronize(g.ctx).unwrap();
        c.graph_launch(exec, s, false).unwrap();
        c.stream_synchronize(s).unwrap();
        let mut back = vec![0u8; n * 4];
        c.memcpy_dtoh(&mut back, y).unwrap();
        let want: Vec<f32> = (0..n).map(|i| (i % 7) as f32 + round as f32).collect();
        assert!(bytes_f32(&back) == want, "round {round}: the kernel read what the host node wrote");
    }
    c.unmirror_host(x.cast()).unwrap();
    // SAFETY: the mapping made above; no longer mirrored or used.
    unsafe { munmap(map, len.get()) }.unwrap();
}
