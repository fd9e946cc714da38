//! Streams, events, launches and their attributes, faults, the workloads against CPU references, tensor maps.

use super::*;

pub(crate) fn streams_and_async_copies(t: Transport) {
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

pub(crate) fn events(t: Transport) {
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

pub(crate) fn stream_waits_and_function_attributes(t: Transport) {
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

pub(crate) fn kernel_fault_is_sticky_and_contained(t: Transport) {
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

pub(crate) fn matsum_matches_cpu(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("mat_sum").unwrap();
    for n in [1usize, 1000, 1 << 20] {
        let (a, b) = matsum_inputs(n);
        assert_same(&matsum(&g, &f, &a, &b).unwrap(), &matsum_cpu(&a, &b), &format!("MatSum of {n}"));
    }
}

pub(crate) fn jacobi_matches_cpu(t: Transport) {
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

/// Launch attributes (`cuLaunchKernelEx`), cluster occupancy, and the
/// attributes a guest may not set.
pub(crate) fn launches_with_attributes(t: Transport) {
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

/// Tensor maps are built by the backend's driver and may only describe the
/// session's own memory.
pub(crate) fn tensor_maps(t: Transport) {
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

/// What a client keeps (function attributes, occupancy, limits, device
/// handles) is asked once, asked again after the session changes it, and
/// never kept where the driver may change it by itself (the stack size).
/// Counted with the client's own call statistics.
pub(crate) fn kept_answers_follow_what_the_session_sets(t: Transport) {
    let h = shared();
    let mut opts = h.options();
    opts.stats = true;
    let c = Client::connect(&h.addr(t), &opts).unwrap();
    let g = Gpu::new(&c).unwrap();
    let waited =
        |op: pvgpu_ring::proto::Opcode| c.call_stats().unwrap().by_opcode().find(|(o, _)| *o == op as u16).map_or(0, |(_, n)| n.waited);
    use pvgpu_ring::proto::Opcode::*;
    let f = g.func("mat_sum").unwrap();

    let regs = c.func_get_attribute(&f, 4).unwrap();
    assert_eq!(c.func_get_attribute(&f, 4).unwrap(), regs);
    assert_eq!(waited(FuncGetAttribute), 1, "asked once");
    let blocks = c.occupancy_max_active_blocks(&f, 256, 0, 0).unwrap();
    assert_eq!(c.occupancy_max_active_blocks(&f, 256, 0, 0).unwrap(), blocks);
    assert_eq!(waited(Occupancy), 1);

    c.func_set_attribute(&f, 8, 2048).unwrap();
    c.func_set_attribute(&f, 8, 2048).unwrap();
    assert_eq!(waited(FuncSetAttribute), 1, "setting the same value again changes nothing");
    assert_eq!(c.func_get_attribute(&f, 8).unwrap(), 2048);
    assert_eq!(c.func_get_attribute(&f, 4).unwrap(), regs);
    assert_eq!(waited(FuncGetAttribute), 3, "a set makes the function's attributes asked again");
    c.occupancy_max_active_blocks(&f, 256, 0, 0).unwrap();
    assert_eq!(waited(Occupancy), 2, "and its occupancy");
    assert_eq!(code(c.func_set_attribute(&f, 8, -1)), CuResult::INVALID_VALUE);
    c.func_set_attribute(&f, 8, 2048).unwrap();
    assert_eq!(waited(FuncSetAttribute), 3, "after a failed set, nothing is assumed");

    let fifo = c.ctx_get_limit(g.ctx, 1).unwrap();
    assert_eq!(c.ctx_get_limit(g.ctx, 1).unwrap(), fifo);
    assert_eq!(waited(CtxLimit), 1);
    c.ctx_set_limit(g.ctx, 1, fifo * 2).unwrap();
    assert_eq!(c.ctx_get_limit(g.ctx, 1).unwrap(), fifo * 2, "CU_LIMIT_PRINTF_FIFO_SIZE after a set");
    assert_eq!(waited(CtxLimit), 3);
    c.ctx_get_limit(g.ctx, 0).unwrap();
    c.ctx_get_limit(g.ctx, 0).unwrap();
    assert_eq!(waited(CtxLimit), 5, "the stack size is asked every time");

    let dev = c.device_get(0).unwrap();
    let before = waited(DeviceGet);
    assert_eq!(c.device_get(0).unwrap(), dev);
    assert_eq!(waited(DeviceGet), before, "a device handle is kept");
}
