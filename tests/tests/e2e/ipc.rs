//! Interprocess handles: memory, an event, shareable physical memory and
//! memory pools of one session opened by another session of the same
//! guest (two programs of one user, one address, one domain), and refused
//! everywhere else.

use super::*;

/// `CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS`.
const IPC_EVENT: u32 = 0x2 | 0x4;

pub(crate) fn interprocess_handles(t: Transport) {
    let (a, b) = (shared().client(t), shared().client(t));
    let (ga, gb) = (Gpu::new(&a).unwrap(), Gpu::new(&b).unwrap());
    let n = 1 << 20;
    let d = a.mem_alloc(ga.ctx, n).unwrap();
    a.memcpy_htod(d, &vec![5u8; n as usize]).unwrap();
    let h = a.ipc_get_mem_handle(ga.ctx, d + 4096).unwrap();
    assert_eq!(a.ipc_get_mem_handle(ga.ctx, d).unwrap(), h, "one handle per allocation");

    // The other program sees the bytes, writes, and the first sees that.
    let (p, size) = b.ipc_open_mem_handle(gb.ctx, &h, 1).unwrap();
    assert_eq!(size, n);
    let mut got = vec![0u8; n as usize];
    b.memcpy_dtoh(&mut got, p).unwrap();
    assert!(got.iter().all(|&x| x == 5), "the exporter's bytes");
    b.memset(p + 100, 9, 1, 10, Stream::DEFAULT).unwrap();
    b.ctx_synchronize(gb.ctx).unwrap();
    let mut back = [0u8; 16];
    a.memcpy_dtoh(&mut back, d + 96).unwrap();
    assert_eq!(back, [5, 5, 5, 5, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 5, 5], "the opener's writes");
    assert_eq!(code(b.memcpy_dtoh(&mut back, p + n - 8)), CuResult::INVALID_VALUE, "no further than the allocation");
    // Opened twice: the same address, closed twice.
    assert_eq!(b.ipc_open_mem_handle(gb.ctx, &h, 1).unwrap().0, p);
    b.ipc_close_mem_handle(gb.ctx, p).unwrap();
    b.memcpy_dtoh(&mut back, p).unwrap();
    b.ipc_close_mem_handle(gb.ctx, p).unwrap();
    assert_eq!(code(b.memcpy_dtoh(&mut back, p)), CuResult::INVALID_VALUE, "closed");
    assert_eq!(code(b.ipc_close_mem_handle(gb.ctx, p)), CuResult::INVALID_VALUE);

    // An event recorded by one program, waited for by the other.
    let e = a.event_create(ga.ctx, IPC_EVENT).unwrap();
    let eh = a.ipc_get_event_handle(e).unwrap();
    let plain = a.event_create(ga.ctx, 0).unwrap();
    assert_eq!(code(a.ipc_get_event_handle(plain)), CuResult::INVALID_HANDLE, "only interprocess events");
    a.memset(d, 1, 1, n, Stream::DEFAULT).unwrap();
    a.event_record(e, Stream::DEFAULT).unwrap();
    let eb = b.ipc_open_event_handle(gb.ctx, &eh).unwrap();
    let s = b.stream_create(gb.ctx, 1, 0).unwrap();
    b.stream_wait_event(s, eb).unwrap();
    b.event_synchronize(eb).unwrap();
    let (p, _) = b.ipc_open_mem_handle(gb.ctx, &h, 1).unwrap();
    b.memcpy_dtoh(&mut back, p).unwrap();
    assert_eq!(back, [1; 16], "after the exporter's event");
    b.ipc_close_mem_handle(gb.ctx, p).unwrap();
    b.event_destroy(eb).unwrap();

    // Handles the backend did not make, or the exporter's own, open
    // nowhere; a freed allocation's handle no longer opens.
    let mut forged = h;
    forged[20] ^= 1;
    assert_eq!(code(b.ipc_open_mem_handle(gb.ctx, &forged, 1)), CuResult::INVALID_VALUE, "a forged handle");
    assert_eq!(code(b.ipc_open_mem_handle(gb.ctx, &[0; 64], 1)), CuResult::INVALID_VALUE, "zeros");
    assert_eq!(code(b.ipc_open_event_handle(gb.ctx, &h)), CuResult::INVALID_VALUE, "a memory handle is no event's");
    assert_eq!(code(a.ipc_open_mem_handle(ga.ctx, &h, 1)), CuResult::INVALID_CONTEXT, "not in the exporting program");
    a.mem_free(d).unwrap();
    a.ctx_synchronize(ga.ctx).unwrap();
    assert_eq!(code(b.ipc_open_mem_handle(gb.ctx, &h, 1)), CuResult::INVALID_VALUE, "freed");
    a.event_destroy(e).unwrap();
    a.ctx_synchronize(ga.ctx).unwrap();
    assert_eq!(code(b.ipc_open_event_handle(gb.ctx, &eh)), CuResult::INVALID_VALUE, "destroyed");
}

/// A handle of a local program opens in another local program of its user,
/// and not over TCP (another peer: another guest), nor once its session
/// has ended.
pub(crate) fn interprocess_handles_stay_in_their_guest(_: Transport) {
    let (a, b, far) = (shared().client(Transport::Local), shared().client(Transport::Local), shared().client(Transport::Tcp));
    let (ga, gb, gf) = (Gpu::new(&a).unwrap(), Gpu::new(&b).unwrap(), Gpu::new(&far).unwrap());
    let d = a.mem_alloc(ga.ctx, 4096).unwrap();
    let h = a.ipc_get_mem_handle(ga.ctx, d).unwrap();
    let e = a.event_create(ga.ctx, IPC_EVENT).unwrap();
    let eh = a.ipc_get_event_handle(e).unwrap();
    assert_eq!(code(far.ipc_open_mem_handle(gf.ctx, &h, 1)), CuResult::INVALID_VALUE, "another guest's memory");
    assert_eq!(code(far.ipc_open_event_handle(gf.ctx, &eh)), CuResult::INVALID_VALUE, "another guest's event");
    let gran = a.mem_granularity(0, false).unwrap();
    let phys = a.mem_create_with(ga.ctx, gran, pvgpu_ring::proto::MEM_SHAREABLE).unwrap();
    let ph = a.mem_export(phys.mem).unwrap();
    assert_eq!(code(far.mem_import(gf.ctx, &ph)), CuResult::INVALID_VALUE, "another guest's physical memory");
    b.mem_release(b.mem_import(gb.ctx, &ph).unwrap().mem).unwrap();
    let pool = a.mem_pool_create_with(ga.ctx, 0, pvgpu_ring::proto::MEM_SHAREABLE).unwrap();
    let pool_handle = a.mem_pool_export(pool).unwrap();
    let pd = a.mem_alloc_from_pool(ga.ctx, pool, 4096, Stream::DEFAULT).unwrap();
    let pdata = a.mem_pool_export_pointer(pd).unwrap();
    assert_eq!(code(far.mem_pool_import(gf.ctx, &pool_handle)), CuResult::INVALID_VALUE, "another guest's pool");
    let near = b.mem_pool_import(gb.ctx, &pool_handle).unwrap();
    let (pp, _) = b.mem_pool_import_pointer(near, &pdata).unwrap();
    b.mem_free(pp).unwrap();
    b.mem_pool_destroy(near).unwrap();
    let (p, _) = b.ipc_open_mem_handle(gb.ctx, &h, 1).unwrap();
    b.ipc_close_mem_handle(gb.ctx, p).unwrap();
    drop(a);
    // The exporter's session ends once the backend sees it gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok((p, _)) = b.ipc_open_mem_handle(gb.ctx, &h, 1) {
        b.ipc_close_mem_handle(gb.ctx, p).unwrap();
        assert!(Instant::now() < deadline, "the handle outlived its session");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Physical memory made shareable, exported by one program and imported
/// by another of the same guest: both map it and see each other's writes;
/// memory made without a shareable handle type is not exported.
pub(crate) fn shareable_physical_memory(t: Transport) {
    use pvgpu_frontend::Access;
    use pvgpu_ring::proto::{MEM_COMPRESSIBLE, MEM_SHAREABLE};
    let (a, b) = (shared().client(t), shared().client(t));
    let (ga, gb) = (Gpu::new(&a).unwrap(), Gpu::new(&b).unwrap());
    let gran = a.mem_granularity(0, false).unwrap();
    let p = a.mem_create_with(ga.ctx, gran, MEM_SHAREABLE | MEM_COMPRESSIBLE).unwrap();
    assert_eq!((p.size, p.flags & MEM_SHAREABLE), (gran, MEM_SHAREABLE));
    let va = a.mem_address_reserve(ga.ctx, gran, 0, 0).unwrap();
    a.mem_map(va, gran, 0, p.mem).unwrap();
    a.mem_set_access(va, gran, Access::ReadWrite).unwrap();
    a.memcpy_htod(va, &[3u8; 4096]).unwrap();
    let h = a.mem_export(p.mem).unwrap();
    assert_eq!(a.mem_export(p.mem).unwrap(), h, "one handle per allocation");
    let plain = a.mem_create_with(ga.ctx, gran, 0).unwrap();
    assert_eq!(code(a.mem_export(plain.mem)), CuResult::INVALID_VALUE, "not made shareable");
    a.mem_release(plain.mem).unwrap();

    let q = b.mem_import(gb.ctx, &h).unwrap();
    assert_eq!((q.size, q.flags), (gran, MEM_SHAREABLE));
    let vb = b.mem_address_reserve(gb.ctx, gran, 0, 0).unwrap();
    b.mem_map(vb, gran, 0, q.mem).unwrap();
    b.mem_set_access(vb, gran, Access::ReadWrite).unwrap();
    let mut got = [0u8; 4096];
    b.memcpy_dtoh(&mut got, vb).unwrap();
    assert_eq!(got, [3u8; 4096], "the exporter's bytes");
    b.memset(vb + 8, 7, 1, 8, Stream::DEFAULT).unwrap();
    b.ctx_synchronize(gb.ctx).unwrap();
    let mut back = [0u8; 24];
    a.memcpy_dtoh(&mut back, va).unwrap();
    assert_eq!(back[..16], [3, 3, 3, 3, 3, 3, 3, 3, 7, 7, 7, 7, 7, 7, 7, 7], "the importer's writes");
    assert_eq!(code(a.mem_import(ga.ctx, &h)), CuResult::INVALID_CONTEXT, "not in the exporting program");
    b.mem_unmap(vb, gran).unwrap();
    b.mem_release(q.mem).unwrap();
    b.mem_address_free(vb, gran).unwrap();
    a.mem_unmap(va, gran).unwrap();
    a.mem_release(p.mem).unwrap();
    a.mem_address_free(va, gran).unwrap();
    assert_eq!(code(b.mem_import(gb.ctx, &h)), CuResult::INVALID_VALUE, "released and unmapped");
}

/// A memory pool made shareable, imported by another program of the
/// same guest, and an allocation of it handed over by its export data, as
/// NVIDIA's streamOrderedAllocationIPC does: the importer reads the
/// exporter's bytes, writes, the exporter sees them; the importer frees
/// it, then the exporter. Refused: a pool made without a shareable handle
/// type, an allocation of such a pool, new allocations from an imported
/// pool, forged data, another guest's pool, the exporter's own handles,
/// and a freed allocation's data.
pub(crate) fn shared_memory_pools(t: Transport) {
    use pvgpu_ring::proto::MEM_SHAREABLE;
    let (a, b) = (shared().client(t), shared().client(t));
    let (ga, gb) = (Gpu::new(&a).unwrap(), Gpu::new(&b).unwrap());
    let pool = a.mem_pool_create_with(ga.ctx, 0, MEM_SHAREABLE).unwrap();
    let n = 1 << 20;
    let d = a.mem_alloc_from_pool(ga.ctx, pool, n, Stream::DEFAULT).unwrap();
    a.memcpy_htod(d, &vec![6u8; n as usize]).unwrap();
    let ph = a.mem_pool_export(pool).unwrap();
    let data = a.mem_pool_export_pointer(d + 64).unwrap();
    assert_eq!(a.mem_pool_export_pointer(d).unwrap(), data, "one handle per allocation");

    let plain = a.mem_pool_create(ga.ctx, 0).unwrap();
    assert_eq!(code(a.mem_pool_export(plain)), CuResult::INVALID_VALUE, "a pool not made shareable");
    let pd = a.mem_alloc_from_pool(ga.ctx, plain, 4096, Stream::DEFAULT).unwrap();
    assert_eq!(code(a.mem_pool_export_pointer(pd)), CuResult::INVALID_VALUE, "an allocation of such a pool");
    let plain_alloc = a.mem_alloc(ga.ctx, 4096).unwrap();
    assert_eq!(code(a.mem_pool_export_pointer(plain_alloc)), CuResult::INVALID_VALUE, "memory of no pool of the program's");

    let q = b.mem_pool_import(gb.ctx, &ph).unwrap();
    assert_eq!(
        code(b.mem_alloc_from_pool(gb.ctx, q, 4096, Stream::DEFAULT)),
        CuResult::INVALID_VALUE,
        "an imported pool gives no new memory"
    );
    assert_eq!(code(b.mem_pool_export(q)), CuResult::INVALID_VALUE, "nor is exported again");
    let mut forged = data;
    forged[20] ^= 1;
    assert_eq!(code(b.mem_pool_import_pointer(q, &forged)), CuResult::INVALID_VALUE, "forged data");
    assert_eq!(code(b.mem_pool_import_pointer(q, &ph)), CuResult::INVALID_VALUE, "a pool's handle is no allocation's");
    let (p, size) = b.mem_pool_import_pointer(q, &data).unwrap();
    assert_eq!(size, n);
    let mut got = vec![0u8; n as usize];
    b.memcpy_dtoh(&mut got, p).unwrap();
    assert!(got.iter().all(|&x| x == 6), "the exporter's bytes");
    b.memset(p + 100, 8, 1, 10, Stream::DEFAULT).unwrap();
    b.ctx_synchronize(gb.ctx).unwrap();
    let mut back = [0u8; 16];
    a.memcpy_dtoh(&mut back, d + 96).unwrap();
    assert_eq!(back, [6, 6, 6, 6, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 6, 6], "the importer's writes");
    assert_eq!(code(a.mem_pool_import(ga.ctx, &ph)), CuResult::INVALID_CONTEXT, "not in the exporting program");

    // The importer frees first, as the driver asks; then the exporter.
    b.mem_free_async(p, Stream::DEFAULT).unwrap();
    b.ctx_synchronize(gb.ctx).unwrap();
    assert_eq!(code(b.memcpy_dtoh(&mut back, p)), CuResult::INVALID_VALUE, "freed by the importer");
    a.mem_free(d).unwrap();
    a.ctx_synchronize(ga.ctx).unwrap();
    assert_eq!(code(b.mem_pool_import_pointer(q, &data)), CuResult::INVALID_VALUE, "freed by the exporter");
    b.mem_pool_destroy(q).unwrap();
    a.mem_free(pd).unwrap();
    a.mem_free(plain_alloc).unwrap();
    a.mem_pool_destroy(plain).unwrap();
    a.mem_pool_destroy(pool).unwrap();
    a.ctx_synchronize(ga.ctx).unwrap();
    assert_eq!(code(b.mem_pool_import(gb.ctx, &ph)), CuResult::INVALID_VALUE, "destroyed");
}

/// Peer access as the backend's driver answers it: a device and itself
/// are no peers; contexts of one device cannot enable access to each
/// other, but a stream of one may wait for an event of the other, free
/// what the other's pool gave, and copy to and from the other's memory. A
/// default pool's own device reads and writes it. With two
/// devices (the two-GPU machine): device 1's access to device 0's default
/// pool given and taken back, access enabled both ways, peer copies in both directions (also on a stream of the other
/// device's context), access disabled.
pub(crate) fn peer_access(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    assert!(!c.can_access_peer(0, 0).unwrap(), "a device is not its own peer");
    assert_eq!(code(c.can_access_peer(0, 99)), CuResult::INVALID_DEVICE);
    // CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED of a device and itself.
    assert_eq!(code(c.p2p_attribute(2, 0, 0)), CuResult::INVALID_DEVICE);
    let other = c.ctx_create(0, 0).unwrap();
    assert_eq!(code(c.peer_access(g.ctx, other, true, 0)), CuResult::INVALID_DEVICE, "same device");
    assert_eq!(code(c.peer_access(g.ctx, pvgpu_frontend::Context(other.0 + 999), true, 0)), CuResult::INVALID_CONTEXT);
    // A stream of one context waits for an event of another, as a
    // device's stream waits for another device's work.
    let ev = c.event_create(g.ctx, 0).unwrap();
    c.event_record(ev, Stream::DEFAULT).unwrap();
    let s = c.stream_create(other, 1, 0).unwrap();
    c.stream_wait_event(s, ev).unwrap();
    c.stream_synchronize(s).unwrap();
    // ... and frees, in its order, what the other's pool gave.
    let p = c.mem_alloc_async(g.ctx, 1 << 20, Stream::DEFAULT).unwrap();
    c.mem_free_async(p, s).unwrap();
    c.stream_synchronize(s).unwrap();
    c.mem_free(p).unwrap(); // posted: refused at the next waited call
    assert_eq!(code(c.ctx_synchronize(g.ctx)), CuResult::INVALID_VALUE, "freed already");
    // Copies and memsets of one context's memory queued on a stream of the
    // other run there, as cuFFT's multi-GPU copies queue them.
    let mine = c.mem_alloc(g.ctx, 4096).unwrap();
    c.memcpy_htod_async(mine, &[4u8; 4096], s).unwrap();
    c.memset(mine + 64, 9, 1, 8, s).unwrap();
    let mut back = [0u8; 4096];
    c.memcpy_dtoh_async(&mut back, mine, s).unwrap();
    c.stream_synchronize(s).unwrap();
    assert_eq!((back[0], back[64], back[71], back[72]), (4, 9, 9, 4), "on the other context's stream");
    c.mem_free(mine).unwrap();
    c.stream_destroy(s).unwrap();
    c.event_destroy(ev).unwrap();
    c.ctx_destroy(other).unwrap();
    // The default pool's own device reads and writes it.
    const RW: u32 = 3;
    assert_eq!(c.mem_pool_access(g.ctx, 0, None).unwrap(), RW);
    assert_eq!(c.mem_pool_access(g.ctx, 0, Some(RW)).unwrap(), RW);
    assert_eq!(code(c.mem_pool_access(g.ctx, 99, None)), CuResult::INVALID_DEVICE);
    assert_eq!(code(c.mem_pool_access(g.ctx, 0, Some(2))), CuResult::INVALID_VALUE, "no such flags");
    if c.device_count().unwrap() < 2 || !c.can_access_peer(0, 1).unwrap() {
        return;
    }
    // Device 1 given access to device 0's default pool, then the access
    // taken away.
    assert_eq!(c.mem_pool_access(g.ctx, 1, None).unwrap(), 0);
    c.mem_pool_access(g.ctx, 1, Some(RW)).unwrap();
    assert_eq!(c.mem_pool_access(g.ctx, 1, None).unwrap(), RW);
    c.mem_pool_access(g.ctx, 1, Some(0)).unwrap();
    assert_eq!(c.mem_pool_access(g.ctx, 1, None).unwrap(), 0);
    let p1 = c.primary_ctx_retain(1).unwrap();
    assert!(c.p2p_attribute(2, 0, 1).unwrap() == 1, "access supported");
    c.peer_access(g.ctx, p1, true, 0).unwrap();
    c.peer_access(p1, g.ctx, true, 0).unwrap();
    let n = 4 << 20;
    let (a, b) = (c.mem_alloc(g.ctx, n).unwrap(), c.mem_alloc(p1, n).unwrap());
    c.memcpy_htod(a, &vec![9u8; n as usize]).unwrap();
    c.memcpy_dtod(b, a, n).unwrap();
    let mut got = vec![0u8; n as usize];
    c.memcpy_dtoh(&mut got, b).unwrap();
    assert!(got.iter().all(|&x| x == 9), "device 0 to device 1");
    c.memset(b, 4, 1, n, Stream::DEFAULT).unwrap();
    c.memcpy_dtod(a, b, n).unwrap();
    c.memcpy_dtoh(&mut got, a).unwrap();
    assert!(got.iter().all(|&x| x == 4), "device 1 to device 0");
    // On a stream of the source's context, as `cudaMemcpyPeerAsync` is
    // commonly asked (the host double has one device and cannot show it).
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    c.memset(a, 2, 1, n, Stream::DEFAULT).unwrap();
    c.memcpy_dtod_async(b, a, n, s).unwrap();
    c.stream_synchronize(s).unwrap();
    c.memcpy_dtoh(&mut got, b).unwrap();
    assert!(got.iter().all(|&x| x == 2), "on the other device's stream");
    c.stream_destroy(s).unwrap();
    c.peer_access(g.ctx, p1, false, 0).unwrap();
    c.peer_access(p1, g.ctx, false, 0).unwrap();
    c.mem_free(a).unwrap();
    c.mem_free(b).unwrap();
    c.primary_ctx_release(1).unwrap();
}
