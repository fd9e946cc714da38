//! Many clients, quotas, and clients and backends that die mid-call.

use super::*;

pub(crate) fn many_concurrent_clients(t: Transport) {
    let h = shared();
    std::thread::scope(|s| {
        for i in 0..8 {
            s.spawn(move || {
                let c = h.client(t);
                let g = Gpu::new(&c).unwrap();
                let f = g.func("mat_sum").unwrap();
                for round in 0..5 {
                    let n = 1000 + i * 100 + round;
                    let (a, b) = matsum_inputs(n);
                    assert_same(&matsum(&g, &f, &a, &b).unwrap(), &matsum_cpu(&a, &b), &format!("MatSum of {n} in client {i}"));
                }
                // Clients sharing one connection across threads work too.
                std::thread::scope(|s2| {
                    for _ in 0..2 {
                        s2.spawn(|| {
                            for _ in 0..20 {
                                c.nop().unwrap();
                                c.ctx_synchronize(g.ctx).unwrap();
                            }
                        });
                    }
                });
            });
        }
    });
}

pub(crate) fn memory_quota(t: Transport) {
    let h = Harness::with(HarnessOptions { mem_quota: Some(1 << 20), ..Default::default() });
    let c = h.client(t);
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    let (_, total) = c.mem_get_info(ctx).unwrap();
    assert_eq!(total, 1 << 20);
    let a = c.mem_alloc(ctx, 768 << 10).unwrap();
    assert_eq!(code(c.mem_alloc(ctx, 512 << 10)), CuResult::OUT_OF_MEMORY);
    let (free, _) = c.mem_get_info(ctx).unwrap();
    assert_eq!(free, 256 << 10);
    c.mem_free(a).unwrap();
    c.mem_alloc(ctx, 1 << 20).unwrap();
}

/// Graph memory counts against the quota: an allocation captured beyond
/// it is refused, and so is a launch whose allocations no longer fit
/// (worker processes, where graph memory is offered).
pub(crate) fn graph_memory_quota(t: Transport) {
    const MIB: u64 = 1 << 20;
    let h = Harness::with(HarnessOptions { mem_quota: Some(64 * MIB), process: true, ..Default::default() });
    let c = h.client(t);
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    let s = c.stream_create(ctx, 1, 0).unwrap();
    let global = pvgpu_ring::cuda::api::CU_STREAM_CAPTURE_MODE_GLOBAL.0;
    let big = c.mem_alloc(ctx, 40 * MIB).unwrap();
    c.stream_begin_capture(s, global).unwrap();
    assert_eq!(code(c.mem_alloc_async(ctx, 32 * MIB, s)), CuResult::OUT_OF_MEMORY);
    let _ = c.stream_end_capture(s);
    c.mem_free(big).unwrap();

    c.stream_begin_capture(s, global).unwrap();
    let tmp = c.mem_alloc_async(ctx, 32 * MIB, s).unwrap();
    c.memset(tmp, 0, 1, 32 * MIB, s).unwrap();
    c.mem_free_async(tmp, s).unwrap();
    let graph = c.stream_end_capture(s).unwrap();
    let exec = c.graph_instantiate(graph, 0).unwrap();
    let big = c.mem_alloc(ctx, 40 * MIB).unwrap();
    assert_eq!(code(c.graph_launch(exec, s, false).and_then(|_| c.stream_synchronize(s))), CuResult::OUT_OF_MEMORY);
    c.mem_free(big).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
}

pub(crate) fn client_killed_mid_call(t: Transport) {
    let h = Harness::start();
    let before = h.host_used_bytes();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_client_helper", "--nocapture", "--test-threads=1"])
        .env("PVGPU_CHILD_ADDR", h.addr(t).to_string())
        .env("PVGPU_TCP_KEY", &h.tcp_key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("READY"))), "child client did not get going");
    assert_eq!(h.live_sessions(), 1);
    if let Some(b) = before {
        assert!(h.host_used_bytes().unwrap() >= b + (32 << 20));
    }
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    // The session ends and gives everything back.
    assert!(eventually(Duration::from_secs(20), || h.live_sessions() == 0), "session of a killed client still alive");
    if let Some(b) = before {
        assert!(eventually(Duration::from_secs(5), || h.host_used_bytes() == Some(b)), "memory of a killed client not freed");
    }
    // The backend serves new clients.
    let c = h.client(t);
    c.init().unwrap();
}

pub(crate) fn backend_stopped_mid_call(t: Transport) {
    let mut h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let spin = g.func("spin").unwrap();
    let cycles: i64 = 1_000_000_000;
    c.launch(&spin, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&cycles)]).unwrap();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| c.ctx_synchronize(g.ctx));
        std::thread::sleep(Duration::from_millis(200));
        h.stop();
        // The call in flight completes (graceful stop drains it) or fails;
        // it never hangs.
        let _ = waiter.join().unwrap();
    });
    assert_eq!(code(c.nop()), CuResult::DEVICE_UNAVAILABLE);
    assert_eq!(code(c.mem_alloc(g.ctx, 16)), CuResult::DEVICE_UNAVAILABLE, "later calls fail at once");
    assert!(t0.elapsed() < Duration::from_secs(30));
}

pub(crate) fn backend_killed_mid_call(t: Transport) {
    let mut h = Harness::with(HarnessOptions { process: true, ..Default::default() });
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let spin = g.func("spin").unwrap();
    let cycles: i64 = 5_000_000_000;
    c.launch(&spin, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&cycles)]).unwrap();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| c.ctx_synchronize(g.ctx));
        std::thread::sleep(Duration::from_millis(300));
        assert!(h.kill());
        let r = waiter.join().unwrap();
        assert_eq!(code(r), CuResult::DEVICE_UNAVAILABLE, "a dead backend is an error");
    });
    assert!(t0.elapsed() < Duration::from_secs(4), "the error came before the kernel would have finished");
    assert_eq!(code(c.nop()), CuResult::DEVICE_UNAVAILABLE);
}
