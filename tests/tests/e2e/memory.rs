//! Memory: copies, memsets, ranges, page-locked and mapped host memory, stream-ordered allocation, pitched copies, virtual memory.

use super::*;

pub(crate) fn copies_of_every_size(t: Transport) {
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

pub(crate) fn memsets(t: Transport) {
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

pub(crate) fn out_of_range_copies_are_refused(t: Transport) {
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

pub(crate) fn pinned_host_memory(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let pinned = if t == Transport::Xen { test_options().xen_pinned } else { test_options().pinned };
    let n = (pinned as usize * 3 / 4).min(3 << 20);
    let Some(p) = c.host_alloc(n) else {
        assert!(t.is_stream(), "the ring transports have page-locked memory");
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

/// Page-locked memory that kernels reach (mapped host memory): a session's
/// worker maps the data area at the program's address and registers it for
/// the GPU, so the device address is the program's. The host double has no
/// device to map it for, and TCP no data area.
pub(crate) fn mapped_host_memory(t: Transport) {
    let h = shared();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let n = 4096usize;
    let Some(p) = c.host_alloc(2 * n * 4) else {
        assert!(t.is_stream(), "the ring transports have page-locked memory");
        return;
    };
    let dp = c.host_device_pointer(p).unwrap();
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

/// `cuMemAllocAsync`/`cuMemFreeAsync` and the default pool's attributes.
pub(crate) fn stream_ordered_allocation(t: Transport) {
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
pub(crate) fn pitched_copies_and_memsets(t: Transport) {
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

/// Virtual memory management: reserve, create, map, set access, use from
/// copies and kernels, unmap and remap (the contents survive), and the
/// ranges the session refuses.
pub(crate) fn virtual_memory(t: Transport) {
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

/// Page-locked memory mirrored in the backend (what the drop-in library
/// does over TCP, where nothing is shared): a kernel given the program's
/// own pointer reads what the program wrote before the launch and the
/// program reads what the kernel wrote after synchronising, call after
/// call; device copies name it as device memory. The same over every
/// transport. With the backend in this very process (embedded) the
/// address is its own already: refused.
pub(crate) fn mirrored_host_memory(t: Transport) {
    use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, munmap};
    let h = shared();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let n = 4096usize;
    let len = std::num::NonZeroUsize::new(2 * n * 4).unwrap();
    // SAFETY: fresh anonymous memory of this test, unmapped at the end.
    let map = unsafe { mmap_anonymous(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }.unwrap();
    let p = map.as_ptr().cast::<u8>();
    // SAFETY: as above; mapped until munmap below.
    let r = unsafe { c.mirror_host(p, len.get()) };
    if h.is_embedded() {
        assert_eq!(code(r), CuResult::NOT_SUPPORTED, "the embedded backend's process has this address already");
        // SAFETY: the mapping made above, used by nothing else.
        unsafe { munmap(map, len.get()) }.unwrap();
        return;
    }
    assert_eq!(r.unwrap(), p as u64, "the device reaches it at the program's address");
    assert!(c.is_mirrored(p, 8) && !c.is_mirrored(p, len.get() + 1));
    let (x, y) = (p.cast::<f32>(), p.cast::<f32>().wrapping_add(n));
    let f = g.func("saxpy").unwrap();
    let (dx, dy) = (p as u64, p as u64 + (n * 4) as u64);
    let grid = [(n as u32).div_ceil(256), 1, 1];
    for round in 1..=3 {
        // SAFETY: 2n floats of the mapping; no kernel runs now.
        unsafe {
            for i in 0..n {
                *x.add(i) = (i % 11) as f32 * round as f32;
                *y.add(i) = 1.0;
            }
        }
        c.launch(&f, grid, [256, 1, 1], 0, Stream::DEFAULT, &[arg(&2.0f32), arg(&dx), arg(&dy), arg(&(n as i32))]).unwrap();
        c.ctx_synchronize(g.ctx).unwrap();
        // SAFETY: as above; the kernel is done and its writes were pulled.
        let ok = (0..n).all(|i| unsafe { *y.add(i) } == 2.0 * ((i % 11) as f32 * round as f32) + 1.0);
        assert!(ok, "round {round}: the kernel saw the program's writes and the program sees the kernel's");
    }
    // Device copies name it as device memory, both ways.
    let d = c.mem_alloc(g.ctx, (n * 4) as u64).unwrap();
    c.memcpy_dtod(d, dy, (n * 4) as u64).unwrap();
    c.memset(dy, 0, 4, n as u64, Stream::DEFAULT).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    // SAFETY: as above.
    assert!((0..n).all(|i| unsafe { *y.add(i) } == 0.0), "the memset reached the program");
    let mut back = vec![0u8; n * 4];
    c.memcpy_dtoh(&mut back, d).unwrap();
    assert_eq!(bytes_f32(&back)[10], 2.0 * 10.0 * 3.0 + 1.0);
    // Inside a mirror already: its address; unaligned, or device memory
    // of the session: refused.
    // SAFETY: the first range is inside this test's mirror; the others are
    // refused before anything is mapped.
    unsafe {
        assert_eq!(c.mirror_host(p.add(4096), 4096).unwrap(), p as u64 + 4096);
        assert_eq!(code(c.mirror_host(p.wrapping_add(len.get() + 1), 4096)), CuResult::INVALID_VALUE);
        assert_eq!(code(c.mirror_host(d as usize as *mut u8, 4096)), CuResult::INVALID_VALUE);
    }
    c.unmirror_host(p).unwrap();
    assert!(!c.is_mirrored(p, 8));
    assert_eq!(code(c.unmirror_host(p)), CuResult::INVALID_VALUE);
    c.mem_free(d).unwrap();
    // SAFETY: the mapping made above, no longer mirrored.
    unsafe { munmap(map, len.get()) }.unwrap();
}
