#![cfg_attr(feature = "xen", allow(dead_code, unused_imports))]
//! The end-to-end suite: every test body runs over each transport (`local`
//! shared memory and `tcp`) against the backend the environment selects
//! (host test double by default; `PVGPU_TEST_EXECUTOR=cuda` for the GPU).

use pvgpu_frontend::{Client, CuResult, Error, Stream, arg};
use pvgpu_ring::cuda::attr;
use pvgpu_tests::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn shared() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| if cfg!(feature = "xen") { Harness::external() } else { Harness::start() })
}

fn code<T: std::fmt::Debug>(r: Result<T, Error>) -> CuResult {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.status(),
    }
}

fn hello_and_devices(t: Transport) {
    let h = shared();
    let c = h.client(t);
    assert_eq!(c.info().executor, if h.exec == ExecKind::Cuda { "cuda" } else { "host" });
    assert_eq!(
        c.info().transport,
        match t {
            Transport::Local => "local",
            Transport::Tcp => "tcp",
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
    assert_eq!(c.device_attribute(0, attr::WARP_SIZE).unwrap(), 32);
    assert!(c.device_attribute(0, attr::COMPUTE_CAPABILITY_MAJOR).unwrap() >= 7);
    assert_eq!(
        c.device_attribute_uncached(0, attr::MAX_THREADS_PER_BLOCK).unwrap(),
        c.device_attribute(0, attr::MAX_THREADS_PER_BLOCK).unwrap()
    );
    assert_eq!(code(c.device_attribute(0, 100_000)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.device_attribute_uncached(0, 100_000)), CuResult::INVALID_VALUE);
}

fn contexts(t: Transport) {
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

fn modules_in_every_format(t: Transport) {
    let h = shared();
    let c = h.client(t);
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    for (what, image) in [("ptx", PTX), ("cubin", CUBIN), ("fatbin", FATBIN)] {
        let m = c.module_load(ctx, image).unwrap_or_else(|e| panic!("loading the {what} image: {e}"));
        let f = c.module_get_function(m, "mat_sum").unwrap();
        let layout: Vec<(u32, u32)> = f.params.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(layout, vec![(0, 8), (8, 8), (16, 8), (24, 4)], "{what}");
        let mixed = c.module_get_function(m, "mixed_params").unwrap();
        let layout: Vec<(u32, u32)> = mixed.params.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(layout, vec![(0, 1), (8, 8), (16, 2), (24, 8), (32, 4), (40, 8)], "{what}");
        // Looking the same kernel up again gives the same function.
        assert_eq!(c.module_get_function(m, "mat_sum").unwrap().id, f.id);
        let (g, size) = c.module_get_global(m, "pvgpu_scale").unwrap();
        assert_eq!(size, 4);
        let mut v = [0u8; 4];
        c.memcpy_dtoh(&mut v, g).unwrap();
        assert_eq!(f32::from_le_bytes(v), 3.0, "{what}");
        assert_eq!(code(c.module_get_function(m, "no_such_kernel")), CuResult::NOT_FOUND);
        assert_eq!(code(c.module_get_global(m, "no_such_global")), CuResult::NOT_FOUND);
        c.module_unload(m).unwrap();
        assert_eq!(code(c.module_get_function(m, "mat_sum")), CuResult::INVALID_HANDLE);
        // The module's globals went with it.
        assert_eq!(code(c.memcpy_dtoh(&mut v, g)), CuResult::INVALID_VALUE);
    }
    assert!(c.module_load(ctx, b"definitely not a module").is_err());
    let mut lying_fatbin = FATBIN.to_vec();
    lying_fatbin[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert_eq!(code(c.module_load(ctx, &lying_fatbin)), CuResult::INVALID_IMAGE);
    c.nop().unwrap();
}

fn globals_feed_kernels(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("scale_by_global").unwrap();
    let (scale, _) = c.module_get_global(g.module, "pvgpu_scale").unwrap();
    c.memcpy_htod(scale, &2.5f32.to_le_bytes()).unwrap();
    let x = c.mem_alloc(g.ctx, 400).unwrap();
    c.memcpy_htod(x, &f32_bytes(&[2.0; 100])).unwrap();
    let n = 100i32;
    c.launch(&f, [1, 1, 1], [128, 1, 1], 0, Stream::DEFAULT, &[arg(&x), arg(&n)]).unwrap();
    let mut out = vec![0u8; 400];
    c.memcpy_dtoh(&mut out, x).unwrap();
    assert!(bytes_f32(&out).iter().all(|&v| v == 5.0));
}

fn copies_of_every_size(t: Transport) {
    let c = shared().client(t);
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    for len in [1usize, 7, 4096, 4097, 1 << 20, (3 << 20) + 5, 9 << 20] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
        let d = c.mem_alloc(ctx, len as u64).unwrap();
        c.memcpy_htod(d, &data).unwrap();
        let mut back = vec![0u8; len];
        c.memcpy_dtoh(&mut back, d).unwrap();
        assert_same(&back, &data, &format!("round trip of {len} bytes"));
        let d2 = c.mem_alloc(ctx, len as u64).unwrap();
        c.memcpy_dtod(d2, d, len as u64).unwrap();
        let mut back2 = vec![0u8; len];
        c.memcpy_dtoh(&mut back2, d2).unwrap();
        assert_same(&back2, &data, &format!("device-to-device copy of {len} bytes"));
        c.mem_free(d).unwrap();
        c.mem_free(d2).unwrap();
    }
    // Copies into the middle of an allocation.
    let d = c.mem_alloc(ctx, 1024).unwrap();
    c.memset(d, 0, 1, 1024, Stream::DEFAULT).unwrap();
    c.memcpy_htod(d + 100, &[9u8; 10]).unwrap();
    let mut back = vec![0u8; 1024];
    c.memcpy_dtoh(&mut back, d).unwrap();
    assert!(back[..100].iter().all(|&b| b == 0) && back[100..110].iter().all(|&b| b == 9) && back[110..].iter().all(|&b| b == 0));
    let (free, total) = c.mem_get_info(ctx).unwrap();
    assert!(free <= total && total > 0);
}

fn memsets(t: Transport) {
    let c = shared().client(t);
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    let d = c.mem_alloc(ctx, 64).unwrap();
    c.memset(d, 0xAB, 1, 64, Stream::DEFAULT).unwrap();
    c.memset(d + 8, 0xBEEF, 2, 4, Stream::DEFAULT).unwrap();
    c.memset(d + 32, 0x0102_0304, 4, 2, Stream::DEFAULT).unwrap();
    let mut b = [0u8; 64];
    c.memcpy_dtoh(&mut b, d).unwrap();
    assert_eq!(b[0..8], [0xAB; 8]);
    assert_eq!(b[8..16], [0xEF, 0xBE, 0xEF, 0xBE, 0xEF, 0xBE, 0xEF, 0xBE]);
    assert_eq!(b[16..32], [0xAB; 16]);
    assert_eq!(b[32..40], [4, 3, 2, 1, 4, 3, 2, 1]);
    assert_eq!(code(c.memset(d, 0, 3, 1, Stream::DEFAULT)), CuResult::INVALID_VALUE);
}

fn out_of_range_copies_are_refused(t: Transport) {
    let c = shared().client(t);
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    let d = c.mem_alloc(ctx, 4096).unwrap();
    let mut b = vec![0u8; 8192];
    assert_eq!(code(c.memcpy_htod(d + 4095, &[1, 2])), CuResult::INVALID_VALUE, "past the end");
    assert_eq!(code(c.memcpy_htod(d, &b)), CuResult::INVALID_VALUE, "longer than the allocation");
    assert_eq!(code(c.memcpy_dtoh(&mut b[..16], d - 16)), CuResult::INVALID_VALUE, "before the start");
    assert_eq!(code(c.memcpy_dtoh(&mut b[..16], 0x1000)), CuResult::INVALID_VALUE, "an address never allocated");
    assert_eq!(code(c.memcpy_dtoh(&mut b[..16], u64::MAX - 8)), CuResult::INVALID_VALUE, "wrapping range");
    assert_eq!(code(c.memcpy_dtod(d, d + 2048, 4096)), CuResult::INVALID_VALUE);
    // Another session's memory is out of range too.
    let other = shared().client(t);
    other.init().unwrap();
    let octx = other.primary_ctx_retain(0).unwrap();
    let od = other.mem_alloc(octx, 4096).unwrap();
    // With sessions in separate processes the same number can also be one
    // of this session's own addresses; test it only where it is foreign.
    if od.abs_diff(d) >= 4096 {
        assert_eq!(code(c.memcpy_dtoh(&mut b[..16], od)), CuResult::INVALID_VALUE, "another session's allocation");
        assert_eq!(code(c.memcpy_dtod(od, d, 16)), CuResult::INVALID_VALUE);
    }
    // Asynchronous ones report at the next synchronising call, once.
    c.memset(d + 4000, 0, 4, 100, Stream::DEFAULT).unwrap();
    assert_eq!(code(c.ctx_synchronize(ctx)), CuResult::INVALID_VALUE);
    c.ctx_synchronize(ctx).unwrap();
    c.mem_free(d + 8).unwrap();
    assert_eq!(code(c.ctx_synchronize(ctx)), CuResult::INVALID_VALUE, "freeing an address inside an allocation");
    c.mem_free(d).unwrap();
    c.mem_free(d).unwrap();
    assert_eq!(code(c.ctx_synchronize(ctx)), CuResult::INVALID_VALUE, "double free");
    let mut v = [0u8; 4];
    other.memcpy_dtoh(&mut v, od).unwrap();
}

fn bad_handles(t: Transport) {
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
    // A stream of another context.
    let own = c.ctx_create(0, 0).unwrap();
    let s_own = c.stream_create(own, 0, 0).unwrap();
    let d = c.mem_alloc(g.ctx, 16).unwrap();
    c.memset(d, 0, 1, 16, s_own).unwrap();
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::INVALID_HANDLE);
    c.ctx_destroy(own).unwrap();
}

fn unknown_opcode(t: Transport) {
    let c = shared().client(t);
    assert_eq!(c.raw_call(999, &[]).unwrap(), CuResult::NOT_SUPPORTED);
    assert_eq!(c.raw_call(0xFFFF, &[1, 2, 3]).unwrap(), CuResult::NOT_SUPPORTED);
    // The session goes on.
    c.nop().unwrap();
    c.init().unwrap();
}

fn malformed_request_ends_only_that_session(t: Transport) {
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

fn streams_and_async_copies(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    assert!(c.stream_query(s).unwrap());
    let n = 1 << 16;
    let (a, b) = matsum_inputs(n);
    let bytes = (n * 4) as u64;
    let (da, db, dc) = (c.mem_alloc(g.ctx, bytes).unwrap(), c.mem_alloc(g.ctx, bytes).unwrap(), c.mem_alloc(g.ctx, bytes).unwrap());
    let mut ab = f32_bytes(&a);
    c.memcpy_htod_async(da, &ab, s).unwrap();
    // The bytes were captured: changing the buffer now must not matter.
    ab.iter_mut().for_each(|v| *v = 0xFF);
    c.memcpy_htod_async(db, &f32_bytes(&b), s).unwrap();
    let f = g.func("mat_sum").unwrap();
    let n32 = n as i32;
    c.launch(&f, [(n as u32).div_ceil(256), 1, 1], [256, 1, 1], 0, s, &[arg(&da), arg(&db), arg(&dc), arg(&n32)]).unwrap();
    let mut out = vec![0u8; n * 4];
    c.memcpy_dtoh_async(&mut out, dc, s).unwrap();
    assert_eq!(max_abs_diff(&bytes_f32(&out), &matsum_cpu(&a, &b)), 0.0);
    c.memcpy_dtod_async(da, dc, bytes, s).unwrap();
    c.stream_synchronize(s).unwrap();
    let mut out2 = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut out2, da).unwrap();
    assert_eq!(out, out2);
    c.stream_destroy(s).unwrap();
    assert_eq!(code(c.stream_synchronize(s)), CuResult::INVALID_HANDLE);
}

fn events(t: Transport) {
    let h = shared();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 0, 0).unwrap();
    let e0 = c.event_create(g.ctx, 0).unwrap();
    let e1 = c.event_create(g.ctx, 0).unwrap();
    c.event_record(e0, s).unwrap();
    let spin = g.func("spin").unwrap();
    // About 20 ms of GPU time (clock64 ticks at ~1.7 GHz on an H100; the
    // host double treats the count as nanoseconds).
    let cycles: i64 = 20_000_000 * if h.exec == ExecKind::Cuda { 2 } else { 1 };
    c.launch(&spin, [1, 1, 1], [1, 1, 1], 0, s, &[arg(&cycles)]).unwrap();
    c.event_record(e1, s).unwrap();
    if h.exec == ExecKind::Cuda {
        assert!(!c.event_query(e1).unwrap(), "the spin kernel is still running");
        assert!(!c.stream_query(s).unwrap());
    }
    c.event_synchronize(e1).unwrap();
    assert!(c.event_query(e1).unwrap());
    let ms = c.event_elapsed(e0, e1).unwrap();
    assert!((5.0..5000.0).contains(&ms), "elapsed {ms} ms");
    // Default-stream events too.
    let e2 = c.event_create(g.ctx, 0).unwrap();
    c.event_record(e2, Stream::DEFAULT).unwrap();
    c.event_synchronize(e2).unwrap();
    c.event_destroy(e0).unwrap();
    assert_eq!(code(c.event_query(e0)), CuResult::INVALID_HANDLE);
    let unrecorded = c.event_create(g.ctx, 0).unwrap();
    assert!(c.event_elapsed(unrecorded, e1).is_err());
}

fn stream_waits_and_function_attributes(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s1 = c.stream_create(g.ctx, 1, 0).unwrap();
    let s2 = c.stream_create(g.ctx, 1, 0).unwrap();
    let e = c.event_create(g.ctx, 0).unwrap();
    let d = c.mem_alloc(g.ctx, 4096).unwrap();
    c.memset(d, 7, 1, 4096, s1).unwrap();
    c.event_record(e, s1).unwrap();
    c.stream_wait_event(s2, e).unwrap();
    let mut b = vec![0u8; 4096];
    c.memcpy_dtoh_async(&mut b, d, s2).unwrap();
    assert!(b.iter().all(|&v| v == 7), "s2 waited for s1's memset");
    c.stream_wait_event(Stream::DEFAULT, e).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    c.stream_wait_event(s2, pvgpu_frontend::Event(4242)).unwrap();
    assert_eq!(code(c.stream_synchronize(s2)), CuResult::INVALID_HANDLE);

    let f = g.func("mat_sum").unwrap();
    assert!(c.func_get_attribute(&f, 0).unwrap() >= 64, "MAX_THREADS_PER_BLOCK");
    assert!(c.func_get_attribute(&f, 4).unwrap() > 0, "NUM_REGS");
    c.func_set_attribute(&f, 8, 1024).unwrap();
    assert_eq!(c.func_get_attribute(&f, 8).unwrap(), 1024, "MAX_DYNAMIC_SHARED_SIZE_BYTES");
    assert_eq!(code(c.func_get_attribute(&f, 9999)), CuResult::INVALID_VALUE);

    assert!(c.occupancy_max_active_blocks(&f, 256, 0, 0).unwrap() >= 1);
    let (grid, block) = c.occupancy_max_potential_block_size(&f, 0, 0, 0).unwrap();
    assert!(grid > 0 && (1..=1024).contains(&block), "occupancy: grid {grid}, block {block}");
    assert!(c.occupancy_available_dynamic_smem(&f, 1, 128).unwrap() > 0);

    let info = c.ctx_info(g.ctx).unwrap();
    assert!(info.api_version >= 3020);
    assert!(info.greatest_priority <= info.least_priority);
    let stack = c.ctx_get_limit(g.ctx, 0).unwrap();
    c.ctx_set_limit(g.ctx, 0, stack * 2).unwrap();
    assert_eq!(c.ctx_get_limit(g.ctx, 0).unwrap(), stack * 2, "CU_LIMIT_STACK_SIZE");
    assert_eq!(code(c.ctx_get_limit(g.ctx, 77)), CuResult::INVALID_VALUE, "as the driver answers an unknown limit");
}

fn pinned_host_memory(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let pinned = if t == Transport::Xen { test_options().xen_pinned } else { test_options().pinned };
    let n = (pinned as usize * 3 / 4).min(3 << 20);
    let Some(p) = c.host_alloc(n) else {
        assert_eq!(t, Transport::Tcp, "the ring transports have page-locked memory");
        return;
    };
    assert!(c.is_pinned(p, n) && !c.is_pinned(p, n + 1));
    let d = c.mem_alloc(g.ctx, n as u64).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    // SAFETY: p is a live allocation of n bytes from host_alloc.
    unsafe {
        for i in 0..n {
            *p.add(i) = (i % 251) as u8;
        }
        c.memcpy_htod_raw(d, p, n, s, true).unwrap();
        c.stream_synchronize(s).unwrap();
        std::ptr::write_bytes(p, 0, n);
        c.memcpy_dtoh_raw(p, n, d, s, true).unwrap();
        c.stream_synchronize(s).unwrap();
        assert!((0..n).all(|i| *p.add(i) == (i % 251) as u8), "async copies through page-locked memory");
        std::ptr::write_bytes(p, 0, n);
        c.memcpy_dtoh_raw(p, n, d, Stream::DEFAULT, false).unwrap();
        assert_eq!(*p.add(1000), (1000 % 251) as u8);
    }
    // Slices that happen to be page-locked still behave as slices.
    // SAFETY: p is a live allocation of n bytes and nothing else uses it now.
    let slice = unsafe { std::slice::from_raw_parts_mut(p, n) };
    slice.fill(3);
    c.memcpy_htod_async(d, slice, s).unwrap();
    slice.fill(4);
    c.stream_synchronize(s).unwrap();
    let mut back = vec![0u8; n];
    c.memcpy_dtoh(&mut back, d).unwrap();
    assert!(back.iter().all(|&v| v == 3), "captured at the call, as the borrow promises");
    assert!(c.host_free(p));
    assert!(!c.host_free(p));
    let big = c.host_alloc(pinned as usize + 4096);
    assert!(big.is_none(), "larger than the page-locked area");
}

fn kernel_params_of_mixed_sizes(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("mixed_params").unwrap();
    let out = c.mem_alloc(g.ctx, 40).unwrap();
    let (ch, d, sh, u, fl) = (-5i8, -1.25e300f64, -1234i16, 0xDEAD_BEEF_0123_4567u64, 3.5f32);
    c.launch(&f, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&ch), arg(&d), arg(&sh), arg(&u), arg(&fl), arg(&out)]).unwrap();
    let mut b = [0u8; 40];
    c.memcpy_dtoh(&mut b, out).unwrap();
    let w: Vec<u64> = b.chunks_exact(8).map(|x| u64::from_le_bytes(x.try_into().unwrap())).collect();
    assert_eq!(w[0] as i64, -5);
    assert_eq!(f64::from_bits(w[1]), d);
    assert_eq!(w[2] as i64, -1234);
    assert_eq!(w[3], u);
    assert_eq!(f32::from_bits(w[4] as u32), fl);
}

fn kernel_fault_is_sticky_and_contained(t: Transport) {
    let h = shared();
    let bystander = h.client(t);
    let bg = Gpu::new(&bystander).unwrap();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let poke = g.func("poke").unwrap();
    let bad = 0x10u64;
    c.launch(&poke, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&bad)]).unwrap();
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::ILLEGAL_ADDRESS);
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::ILLEGAL_ADDRESS, "sticky, as on a GPU");
    // Another session is untouched.
    let f = bg.func("mat_sum").unwrap();
    let (a, b) = matsum_inputs(1000);
    assert_same(&matsum(&bg, &f, &a, &b).unwrap(), &matsum_cpu(&a, &b), "MatSum of the bystander");
}

fn matsum_matches_cpu(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("mat_sum").unwrap();
    for n in [1usize, 1000, 1 << 20] {
        let (a, b) = matsum_inputs(n);
        assert_same(&matsum(&g, &f, &a, &b).unwrap(), &matsum_cpu(&a, &b), &format!("MatSum of {n}"));
    }
}

fn jacobi_matches_cpu(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("jacobi_step").unwrap();
    for (n, sweeps) in [(16usize, 3usize), (64, 50), (130, 21)] {
        let init = jacobi_init(n);
        let dev = jacobi(&g, &f, &init, n, sweeps).unwrap();
        let cpu = jacobi_cpu(&init, n, sweeps);
        assert!(max_abs_diff(&dev, &cpu) <= 1e-4, "n = {n}, sweeps = {sweeps}");
    }
}

fn many_concurrent_clients(t: Transport) {
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

fn memory_quota(t: Transport) {
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

/// The body of a client process killed by the test below (and, in the Xen
/// lab, of programs whose guest is destroyed or whose backend is killed):
/// sets up memory, launches kernels that keep the device busy for
/// `PVGPU_CHILD_SPIN_S` seconds (on the host executor; 1.5 by default),
/// prints READY, waits in a synchronising call, prints how it ended
/// (`SYNC ok` or `SYNC <error code>`), and keeps its session for a minute.
#[test]
fn child_client_helper() {
    let Ok(addr) = std::env::var("PVGPU_CHILD_ADDR") else { return };
    let c = Client::connect(&addr.parse().unwrap(), &pvgpu_frontend::Options::default()).unwrap();
    let g = Gpu::new(&c).unwrap();
    let d = g.c.mem_alloc(g.ctx, 32 << 20).unwrap();
    c.memset(d, 1, 1, 32 << 20, Stream::DEFAULT).unwrap();
    c.memcpy_htod(d, &vec![7u8; 4 << 20]).unwrap();
    let spin = g.func("spin").unwrap();
    // In kernels of at most 10 s (the host executor's cap on one spin).
    let mut secs: f64 = std::env::var("PVGPU_CHILD_SPIN_S").ok().and_then(|s| s.parse().ok()).unwrap_or(1.5);
    while secs > 0.0 {
        let cycles = (secs.min(10.0) * 1e9) as i64;
        c.launch(&spin, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&cycles)]).unwrap();
        secs -= 10.0;
    }
    // Before any call that waits: the host executor runs a spin inside the
    // session's request loop, so even a Nop would wait for it.
    println!("READY");
    match c.ctx_synchronize(g.ctx) {
        Ok(()) => println!("SYNC ok"),
        Err(e) => println!("SYNC {:?}", e.code()),
    }
    std::thread::sleep(Duration::from_secs(60));
}

fn client_killed_mid_call(t: Transport) {
    let h = Harness::start();
    let before = h.host_used_bytes();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_client_helper", "--nocapture", "--test-threads=1"])
        .env("PVGPU_CHILD_ADDR", h.addr(t).to_string())
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

fn backend_stopped_mid_call(t: Transport) {
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

fn backend_killed_mid_call(t: Transport) {
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

/// Launch attributes (`cuLaunchKernelEx`), cluster occupancy, and the
/// attributes a guest may not set.
fn launches_with_attributes(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("saxpy").unwrap();
    let n = 256usize;
    let (x, y) = (c.mem_alloc(g.ctx, (n * 4) as u64).unwrap(), c.mem_alloc(g.ctx, (n * 4) as u64).unwrap());
    c.memcpy_htod(x, &f32_bytes(&vec![1.0; n])).unwrap();
    c.memcpy_htod(y, &f32_bytes(&vec![2.0; n])).unwrap();
    let mut params = vec![0u8; f.param_bytes];
    for (p, v) in f.params.iter().zip([arg(&3.0f32), arg(&x), arg(&y), arg(&(n as i32))]) {
        params[p.offset as usize..p.offset as usize + v.len()].copy_from_slice(v);
    }
    let attr = |id: u32, v: i32| {
        let mut value = [0u8; 64];
        value[..4].copy_from_slice(&v.to_le_bytes());
        pvgpu_ring::proto::LaunchAttr { id: id.into(), reserved: 0.into(), value }
    };
    // Priority (8) and cooperative (2) are allowed.
    c.launch_ex(&f, [1, 1, 1], [256, 1, 1], 0, Stream::DEFAULT, &[attr(8, 0), attr(2, 1)], &params).unwrap();
    let mut back = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut back, y).unwrap();
    assert_eq!(bytes_f32(&back), vec![5.0; n]);
    // A programmatic event (7) names an event of the driver's: refused, at
    // the next call that waits, as every error of a posted call.
    c.launch_ex(&f, [1, 1, 1], [256, 1, 1], 0, Stream::DEFAULT, &[attr(7, 0)], &params).unwrap();
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::NOT_SUPPORTED);
    let mut cluster = [0u8; 64];
    cluster[..12].copy_from_slice(&[1u32, 1, 1].map(u32::to_le_bytes).concat());
    let dim = pvgpu_ring::proto::LaunchAttr { id: 4.into(), reserved: 0.into(), value: cluster };
    assert!(c.occupancy_clusters(&f, [4, 1, 1], [128, 1, 1], 0, &[dim], 0).unwrap() >= 1, "max active clusters");
    assert!(c.occupancy_clusters(&f, [4, 1, 1], [128, 1, 1], 0, &[], 1).unwrap() >= 1, "max cluster size");
}

/// `cuMemAllocAsync`/`cuMemFreeAsync` and the default pool's attributes.
fn stream_ordered_allocation(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let d = c.mem_alloc_async(g.ctx, 1 << 16, s).unwrap();
    c.memset(d, 9, 1, 1 << 16, s).unwrap();
    let mut b = vec![0u8; 1 << 16];
    c.memcpy_dtoh_async(&mut b, d, s).unwrap();
    assert!(b.iter().all(|&v| v == 9));
    c.mem_free_async(d, s).unwrap();
    c.stream_synchronize(s).unwrap();
    assert_eq!(code(c.memcpy_htod(d, &[1])), CuResult::INVALID_VALUE, "freed memory is out of range");
    c.mem_free_async(d, s).unwrap();
    assert_eq!(code(c.stream_synchronize(s)), CuResult::INVALID_VALUE, "a double free");
    let threshold = 32 << 20;
    assert_eq!(c.mem_pool_attribute(g.ctx, 4, Some(threshold)).unwrap(), threshold);
    assert_eq!(c.mem_pool_attribute(g.ctx, 4, None).unwrap(), threshold, "release threshold");
    assert_eq!(code(c.mem_pool_attribute(g.ctx, 5, Some(1))), CuResult::INVALID_VALUE, "reserved memory is read-only");
    assert_eq!(code(c.mem_pool_attribute(g.ctx, 99, None)), CuResult::INVALID_VALUE);
}

/// Pitched copies between host and device and within the device, pitched
/// memsets, and pitched ranges that leave the allocation.
fn pitched_copies_and_memsets(t: Transport) {
    use pvgpu_frontend::Pitched;
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let (w, h, pitch) = (300usize, 41usize, 512u64);
    let a = c.mem_alloc(g.ctx, pitch * h as u64).unwrap();
    let b = c.mem_alloc(g.ctx, pitch * h as u64).unwrap();
    c.memset_2d(a, pitch, 0xab, 1, pitch, h as u64, Stream::DEFAULT).unwrap();
    let host: Vec<u8> = (0..w * h).map(|i| (i * 7 % 251) as u8).collect();
    let dev = |ptr| Pitched::Device { ptr, pitch };
    // SAFETY: `host` holds h rows of w bytes; `back` likewise, writable.
    unsafe {
        c.memcpy_2d(dev(a), Pitched::Host { ptr: host.as_ptr(), pitch: w }, w, h, Stream::DEFAULT, false).unwrap();
        c.memcpy_2d(dev(b), dev(a), pitch as usize, h, Stream::DEFAULT, false).unwrap();
    }
    let mut back = vec![0u8; w * h];
    // SAFETY: as above.
    unsafe { c.memcpy_2d(Pitched::Host { ptr: back.as_mut_ptr(), pitch: w }, dev(b), w, h, Stream::DEFAULT, false).unwrap() };
    assert_eq!(back, host, "host to device to device to host, pitched");
    let mut whole = vec![0u8; (pitch as usize) * h];
    c.memcpy_dtoh(&mut whole, b).unwrap();
    assert!(whole.chunks(pitch as usize).all(|row| row[w..].iter().all(|&v| v == 0xab)), "the padding kept its memset value");
    c.memset_2d(a + 8, pitch, 0x01020304, 4, 4, h as u64, Stream::DEFAULT).unwrap();
    c.memcpy_dtoh(&mut whole, a).unwrap();
    assert_eq!(&whole[8..12], &0x01020304u32.to_le_bytes());
    // SAFETY: as above.
    let past = unsafe { c.memcpy_2d(dev(a + pitch), Pitched::Host { ptr: host.as_ptr(), pitch: w }, w, h, Stream::DEFAULT, false) };
    assert_eq!(code(past), CuResult::INVALID_VALUE, "the last row would leave the allocation");
    c.memset_2d(a, pitch, 0, 1, pitch + 1, 2, Stream::DEFAULT).unwrap();
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::INVALID_VALUE, "a row wider than the pitch");
}

/// Tensor maps are built by the backend's driver and may only describe the
/// session's own memory.
fn tensor_maps(t: Transport) {
    use pvgpu_ring::proto::TensorMapEncode;
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let d = c.mem_alloc(g.ctx, 64 * 64 * 4).unwrap();
    let map = |addr: u64, rows: u64| TensorMapEncode {
        data_type: 7.into(), // FLOAT32
        rank: 2.into(),
        global_address: addr.into(),
        global_dim: [64, rows, 1, 1, 1].map(Into::into),
        global_strides: [256, 0, 0, 0].map(Into::into),
        box_dim: [32, 32, 1, 1, 1].map(Into::into),
        element_strides: [1, 1, 1, 1, 1].map(Into::into),
        ..Default::default()
    };
    let desc = c.tensor_map_encode(&map(d, 64)).unwrap();
    assert_ne!(desc, [0u8; 128]);
    assert_eq!(code(c.tensor_map_encode(&map(d, 65))), CuResult::INVALID_VALUE, "one row past the allocation");
    assert_eq!(code(c.tensor_map_encode(&map(0x1000, 64))), CuResult::INVALID_VALUE, "memory of nobody's");
}

/// Virtual memory management: reserve, create, map, set access, use from
/// copies and kernels, unmap and remap (the contents survive), and the
/// ranges the session refuses.
fn virtual_memory(t: Transport) {
    use pvgpu_frontend::Access;
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let gran = c.mem_granularity(0, false).unwrap();
    assert!(gran.is_power_of_two() && c.mem_granularity(0, true).unwrap() >= gran, "granularity {gran}");
    assert_eq!(code(c.mem_granularity(7, false)), CuResult::INVALID_DEVICE);
    let va = c.mem_address_reserve(g.ctx, 4 * gran, 0, 0).unwrap();
    assert_eq!(va % gran, 0);
    let (a, b) = (c.mem_create(g.ctx, 2 * gran).unwrap(), c.mem_create(g.ctx, 2 * gran).unwrap());
    c.mem_map(va, 2 * gran, 0, a).unwrap();
    c.mem_map(va + 2 * gran, 2 * gran, 0, b).unwrap();
    assert_eq!(code(c.mem_map(va + gran, gran, 0, b)), CuResult::INVALID_VALUE, "over another mapping");
    assert_eq!(code(c.mem_map(va + 4 * gran, gran, 0, b)), CuResult::INVALID_VALUE, "outside the reservation");
    assert_eq!(code(c.memcpy_htod(va, &[1, 2, 3])), CuResult::INVALID_VALUE, "mapped but not accessible");
    c.mem_set_access(va, 4 * gran, Access::ReadWrite).unwrap();
    // saxpy with x in one mapping and y in the other.
    let n = 1000usize;
    let (x, y) = (va + 64, va + 2 * gran + 128);
    c.memcpy_htod(x, &f32_bytes(&vec![2.0; n])).unwrap();
    c.memcpy_htod(y, &f32_bytes(&vec![1.0; n])).unwrap();
    let f = g.func("saxpy").unwrap();
    c.launch(&f, [4, 1, 1], [256, 1, 1], 0, Stream::DEFAULT, &[arg(&3.0f32), arg(&x), arg(&y), arg(&(n as i32))]).unwrap();
    let mut back = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut back, y).unwrap();
    assert_eq!(bytes_f32(&back), vec![7.0; n]);
    assert_eq!(code(c.mem_unmap(va, gran)), CuResult::INVALID_VALUE, "part of a mapping");
    assert_eq!(code(c.mem_address_free(va, 4 * gran)), CuResult::INVALID_VALUE, "still mapped");
    // Unmap b, map it again where it was: its contents are still there.
    c.mem_unmap(va + 2 * gran, 2 * gran).unwrap();
    assert_eq!(code(c.memcpy_dtoh(&mut back, y)), CuResult::INVALID_VALUE, "unmapped");
    c.mem_map(va + 2 * gran, 2 * gran, 0, b).unwrap();
    c.mem_set_access(va + 2 * gran, 2 * gran, Access::ReadWrite).unwrap();
    c.memcpy_dtoh(&mut back, y).unwrap();
    assert_eq!(bytes_f32(&back), vec![7.0; n], "contents survive a remap");
    // Released while mapped: usable until unmapped.
    c.mem_release(a).unwrap();
    assert_eq!(code(c.mem_release(a)), CuResult::INVALID_VALUE, "released twice");
    c.memcpy_dtoh(&mut back, x).unwrap();
    assert_eq!(bytes_f32(&back), vec![2.0; n]);
    c.mem_unmap(va, 4 * gran).unwrap();
    assert_eq!(code(c.mem_map(va, 2 * gran, 0, a)), CuResult::INVALID_VALUE, "released and unmapped: gone");
    c.mem_release(b).unwrap();
    assert_eq!(code(c.mem_address_free(va, 2 * gran)), CuResult::INVALID_VALUE, "part of a reservation");
    c.mem_address_free(va, 4 * gran).unwrap();
    assert_eq!(code(c.mem_address_free(va, 4 * gran)), CuResult::INVALID_VALUE, "freed twice");
    // What is left at the end goes with the context.
    let va = c.mem_address_reserve(g.ctx, 2 * gran, 0, 0).unwrap();
    let m = c.mem_create(g.ctx, 2 * gran).unwrap();
    c.mem_map(va, 2 * gran, 0, m).unwrap();
}

/// Page-locked memory that kernels reach (mapped host memory): a session's
/// worker maps the data area at the program's address and registers it for
/// the GPU, so the device address is the program's. The host double has no
/// device to map it for, and TCP no data area.
fn mapped_host_memory(t: Transport) {
    let h = shared();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let n = 4096usize;
    let Some(p) = c.host_alloc(2 * n * 4) else {
        assert_eq!(t, Transport::Tcp, "the ring transports have page-locked memory");
        return;
    };
    let dp = c.host_device_pointer(p).unwrap();
    if h.exec != ExecKind::Cuda {
        assert_eq!(dp, None, "the host double maps nothing for a device");
        assert!(c.host_free(p));
        return;
    }
    let Some(dp) = dp else {
        // The GPU could not map the area (for example where the backend
        // could not map it at the program's address).
        assert!(c.host_free(p));
        return;
    };
    if h.is_process() && t == Transport::Local {
        assert_eq!(dp, p as u64, "same address in the program and on the device");
    }
    let (x, y) = (p.cast::<f32>(), p.cast::<f32>().wrapping_add(n));
    // SAFETY: 2n floats of host_alloc memory, used by nothing else.
    unsafe {
        for i in 0..n {
            *x.add(i) = i as f32;
            *y.add(i) = 1.0;
        }
    }
    // A kernel reads and writes the program's memory through the device
    // address.
    let f = g.func("saxpy").unwrap();
    let (dx, dy) = (dp, dp + (n * 4) as u64);
    c.launch(&f, [(n as u32).div_ceil(256), 1, 1], [256, 1, 1], 0, Stream::DEFAULT, &[arg(&2.0f32), arg(&dx), arg(&dy), arg(&(n as i32))])
        .unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    // SAFETY: as above; the kernel is done.
    assert!((0..n).all(|i| unsafe { *y.add(i) } == 2.0 * i as f32 + 1.0), "the kernel wrote the program's memory");
    // Copies and memsets name it as device memory.
    let d = c.mem_alloc(g.ctx, (n * 4) as u64).unwrap();
    c.memcpy_dtod(d, dy, (n * 4) as u64).unwrap();
    c.memset(dy, 0, 4, n as u64, Stream::DEFAULT).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { *y.add(7) }, 0.0);
    let mut back = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut back, d).unwrap();
    assert_eq!(bytes_f32(&back)[7], 15.0);
    assert!(c.host_free(p));
}

/// What NVML in the guest answers: the session's own memory, the device's
/// gauges and the driver's version.
fn device_status(t: Transport) {
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

/// The image cache: an image a guest sent is named by its hash the next
/// time, in a new session too; a guest reached over another transport (a
/// different owner) must send it itself.
fn image_cache(t: Transport) {
    let h = shared();
    let image = {
        let ptx = String::from_utf8(PTX.to_vec()).unwrap();
        // Unique to this run and transport, so the cache starts without it.
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        format!("{ptx}\n// {nonce} {t:?}\n").into_bytes()
    };
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    assert!(c.module_load_cached(g.ctx, &image).unwrap().is_none(), "not sent yet");
    c.module_load_sent(g.ctx, &image).unwrap();
    // A new session of the same guest names it.
    let c2 = h.client(t);
    let g2 = Gpu::new(&c2).unwrap();
    let m = c2.module_load_cached(g2.ctx, &image).unwrap().expect("cached");
    c2.module_get_function(m, "saxpy").unwrap();
    // One byte different is another image.
    let mut other = image.clone();
    *other.last_mut().unwrap() = b' ';
    assert!(c2.module_load_cached(g2.ctx, &other).unwrap().is_none());
    if t != Transport::Xen {
        let o = if t == Transport::Local { Transport::Tcp } else { Transport::Local };
        let c3 = h.client(o);
        let g3 = Gpu::new(&c3).unwrap();
        assert!(c3.module_load_cached(g3.ctx, &image).unwrap().is_none(), "another owner must send it");
    }
}

/// What kernels print reaches the program, before the reply of the call
/// that waited for them (when the backend can capture it: the host double
/// always, a GPU in a session's own worker process).
fn kernel_output(t: Transport) {
    static OUTPUT: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
    pvgpu_frontend::set_output_handler(|b| OUTPUT.lock().unwrap().extend_from_slice(b));
    let h = shared();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("pvgpu_printf").unwrap();
    let tag = 4000 + t as i32;
    c.launch(&f, [2, 1, 1], [3, 1, 1], 0, Stream::DEFAULT, &[arg(&tag)]).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    if h.exec == ExecKind::Host || h.is_process() {
        let out = String::from_utf8_lossy(&OUTPUT.lock().unwrap()).into_owned();
        let mine: Vec<&str> = out.lines().filter(|l| l.starts_with(&format!("pvgpu_printf tag {tag} "))).collect();
        assert_eq!(mine.len(), 6, "{out}");
    }
    let names = c.module_function_names(g.module).unwrap();
    for k in ["mat_sum", "saxpy", "pvgpu_printf", "pvgpu_null"] {
        assert!(names.iter().any(|n| n == k), "{k} in {names:?}");
    }
}

/// Runs each test body over every transport: `anywhere` lists the bodies
/// that only need a backend to talk to (these also run over Xen, built with
/// `--features xen` for the Xen lab, in a guest against the backend in
/// Dom0); `own_backend` lists those that start, stop or configure the
/// backend under test themselves (local and TCP only; the lab checks a guest
/// destroyed mid-session separately).
macro_rules! over_every_transport {
    (anywhere: [$($any:ident),* $(,)?], own_backend: [$($own:ident),* $(,)?] $(,)?) => {
        #[cfg(not(feature = "xen"))]
        mod local {
            $( #[test] fn $any() { super::$any(pvgpu_tests::Transport::Local) } )*
            $( #[test] fn $own() { super::$own(pvgpu_tests::Transport::Local) } )*
        }
        #[cfg(not(feature = "xen"))]
        mod tcp {
            $( #[test] fn $any() { super::$any(pvgpu_tests::Transport::Tcp) } )*
            $( #[test] fn $own() { super::$own(pvgpu_tests::Transport::Tcp) } )*
        }
        #[cfg(feature = "xen")]
        mod xen {
            $( #[test] fn $any() { super::$any(pvgpu_tests::Transport::Xen) } )*
        }
    };
}

over_every_transport!(
    anywhere: [
        hello_and_devices,
        contexts,
        modules_in_every_format,
        globals_feed_kernels,
        copies_of_every_size,
        memsets,
        out_of_range_copies_are_refused,
        bad_handles,
        unknown_opcode,
        malformed_request_ends_only_that_session,
        streams_and_async_copies,
        events,
        kernel_params_of_mixed_sizes,
        stream_waits_and_function_attributes,
        pinned_host_memory,
        kernel_fault_is_sticky_and_contained,
        matsum_matches_cpu,
        jacobi_matches_cpu,
        many_concurrent_clients,
        launches_with_attributes,
        stream_ordered_allocation,
        pitched_copies_and_memsets,
        tensor_maps,
        virtual_memory,
        mapped_host_memory,
        device_status,
        image_cache,
        kernel_output,
    ],
    own_backend: [memory_quota, client_killed_mid_call, backend_stopped_mid_call, backend_killed_mid_call],
);
