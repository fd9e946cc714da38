//! Devices, contexts, handles, device status, and requests that are not commands.

use super::*;

pub(crate) fn hello_and_devices(t: Transport) {
    let h = shared();
    let c = h.client(t);
    assert_eq!(c.info().executor, if h.exec == ExecKind::Cuda { "cuda" } else { "host" });
    assert_eq!(
        c.info().transport,
        match t {
            Transport::Local => "local",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
            Transport::Rdma => "rdma",
            Transport::Xen => "xen",
        }
    );
    assert!(c.driver_version().unwrap() >= 12000);
    // Before cuInit, device calls fail as CUDA says.
    assert_eq!(code(c.device_count()), CuResult::NOT_INITIALIZED);
    c.init().unwrap();
    let n = c.device_count().unwrap();
    assert!(n >= 1);
    assert_eq!(c.device_get(0).unwrap(), 0);
    assert_eq!(code(c.device_get(n)), CuResult::INVALID_DEVICE);
    assert_eq!(code(c.device_get(-1)), CuResult::INVALID_DEVICE);
    let name = c.device_name(0).unwrap();
    assert!(!name.is_empty());
    assert!(c.device_total_mem(0).unwrap() > 0);
    assert_ne!(c.device_uuid(0).unwrap(), [0u8; 16]);
    assert_eq!(c.device_attribute(0, CU_DEVICE_ATTRIBUTE_WARP_SIZE).unwrap(), 32);
    assert!(c.device_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap() >= 7);
    assert_eq!(
        c.device_attribute_uncached(0, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK).unwrap(),
        c.device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK).unwrap()
    );
    assert_eq!(code(c.device_attribute(0, CUdevice_attribute(100_000))), CuResult::INVALID_VALUE);
    assert_eq!(code(c.device_attribute_uncached(0, CUdevice_attribute(100_000))), CuResult::INVALID_VALUE);
}

pub(crate) fn contexts(t: Transport) {
    let c = shared().client(t);
    c.init().unwrap();
    let p1 = c.primary_ctx_retain(0).unwrap();
    let p2 = c.primary_ctx_retain(0).unwrap();
    assert_eq!(p1, p2, "the primary context is retained, not created again");
    assert_eq!(code(c.ctx_destroy(p1)), CuResult::INVALID_CONTEXT, "cuCtxDestroy of a primary context");
    let own = c.ctx_create(0, 0).unwrap();
    assert_ne!(own, p1);
    c.ctx_synchronize(own).unwrap();
    let buf = c.mem_alloc(own, 4096).unwrap();
    c.memcpy_htod(buf, &[7u8; 4096]).unwrap();
    c.ctx_destroy(own).unwrap();
    // Everything of a destroyed context is gone with it.
    assert_eq!(code(c.ctx_synchronize(own)), CuResult::INVALID_CONTEXT);
    assert_eq!(code(c.mem_alloc(own, 16)), CuResult::INVALID_CONTEXT);
    assert_eq!(code(c.memcpy_htod(buf, &[1])), CuResult::INVALID_VALUE);
    c.primary_ctx_release(0).unwrap();
    c.ctx_synchronize(p1).unwrap();
    c.primary_ctx_release(0).unwrap();
    assert_eq!(code(c.ctx_synchronize(p1)), CuResult::INVALID_CONTEXT, "released to zero");
    assert_eq!(code(c.primary_ctx_release(0)), CuResult::INVALID_CONTEXT);
    assert_eq!(code(c.ctx_create(0, 0).and_then(|_| c.ctx_create(7, 0))), CuResult::INVALID_DEVICE);
}

/// What NVML in the guest answers: the session's own memory, the device's
/// gauges and the driver's version.
pub(crate) fn device_status(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let before = c.device_status(0).unwrap();
    assert!(before.mem_total > 0 && !before.driver_version.is_empty(), "{before:?}");
    let d = c.mem_alloc(g.ctx, 8 << 20).unwrap();
    let after = c.device_status(0).unwrap();
    assert_eq!(after.mem_used, before.mem_used + (8 << 20), "the session's own allocations");
    assert!(after.gpu_util.is_none_or(|u| u <= 100) && after.mem_util.is_none_or(|u| u <= 100));
    c.mem_free(d).unwrap();
    assert_eq!(c.device_status(0).unwrap().mem_used, before.mem_used);
    assert_eq!(code(c.device_status(9)), CuResult::INVALID_DEVICE);
}

pub(crate) fn bad_handles(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    assert_eq!(code(c.stream_synchronize(Stream(12345))), CuResult::INVALID_HANDLE);
    assert_eq!(code(c.stream_query(Stream(u64::MAX))), CuResult::INVALID_HANDLE);
    assert_eq!(code(c.event_query(pvgpu_frontend::Event(77))), CuResult::INVALID_HANDLE);
    assert_eq!(code(c.event_synchronize(pvgpu_frontend::Event(0))), CuResult::INVALID_HANDLE);
    assert_eq!(code(c.module_get_function(pvgpu_frontend::Module(999), "mat_sum")), CuResult::INVALID_HANDLE);
    assert_eq!(code(c.ctx_synchronize(pvgpu_frontend::Context(0xdead_beef))), CuResult::INVALID_CONTEXT);
    assert_eq!(code(c.mem_alloc(pvgpu_frontend::Context(0), 16)), CuResult::INVALID_CONTEXT);
    // A handle of another session is not a handle here.
    let other = shared().client(t);
    let og = Gpu::new(&other).unwrap();
    let os = other.stream_create(og.ctx, 0, 0).unwrap();
    assert_eq!(code(c.stream_synchronize(os)), CuResult::INVALID_HANDLE);
    // Launches are sent without waiting: a bad function is reported by the
    // next synchronising call, once.
    let mut fake = g.func("mat_sum").unwrap();
    fake.id ^= 0x5555;
    let x = 0u64;
    let n = 0i32;
    c.launch(&fake, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&x), arg(&x), arg(&x), arg(&n)]).unwrap();
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::INVALID_HANDLE);
    c.ctx_synchronize(g.ctx).unwrap();
    // Wrong argument count or size is refused locally.
    let f = g.func("mat_sum").unwrap();
    assert_eq!(code(c.launch(&f, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&x)])), CuResult::INVALID_VALUE);
    assert_eq!(
        code(c.launch(&f, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&x), arg(&x), arg(&x), arg(&x)])),
        CuResult::INVALID_VALUE
    );
    // A stream of another context of the session may set this context's
    // memory (as with unified addressing natively; cuFFT's multi-GPU
    // copies queue so); a stream of another session may not (above).
    let own = c.ctx_create(0, 0).unwrap();
    let s_own = c.stream_create(own, 0, 0).unwrap();
    let d = c.mem_alloc(g.ctx, 16).unwrap();
    c.memset(d, 3, 1, 16, s_own).unwrap();
    c.stream_synchronize(s_own).unwrap();
    let mut back = [0u8; 16];
    c.memcpy_dtoh(&mut back, d).unwrap();
    assert_eq!(back, [3; 16]);
    c.ctx_destroy(own).unwrap();
}

pub(crate) fn unknown_opcode(t: Transport) {
    let c = shared().client(t);
    assert_eq!(c.raw_call(999, &[]).unwrap(), CuResult::NOT_SUPPORTED);
    assert_eq!(c.raw_call(0xFFFF, &[1, 2, 3]).unwrap(), CuResult::NOT_SUPPORTED);
    // The session goes on.
    c.nop().unwrap();
    c.init().unwrap();
}

pub(crate) fn malformed_request_ends_only_that_session(t: Transport) {
    let h = shared();
    let bystander = h.client(t);
    let bg = Gpu::new(&bystander).unwrap();
    let c = h.client(t);
    // MemAlloc with a truncated payload: not a request, a broken peer.
    let r = c.raw_call(pvgpu_ring::proto::Opcode::MemAlloc as u16, &[1, 2, 3]);
    assert!(r.is_err(), "the backend drops a session that sends garbage, got {r:?}");
    assert_eq!(code(c.nop()), CuResult::DEVICE_UNAVAILABLE);
    bystander.ctx_synchronize(bg.ctx).unwrap();
    bystander.nop().unwrap();
}
