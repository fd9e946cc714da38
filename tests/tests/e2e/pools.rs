//! Memory pools of the program's own (`cuMemPoolCreate`): allocated from
//! on streams, their attributes, size limit and access, trimmed,
//! destroyed; named only within their session; a checkpoint that cannot
//! carry a pool made to be shared refused by name; and pools that go with
//! their session (moved, or through a restart of its backend) with their
//! allocations, settings and limit.

use super::*;
use pvgpu_ctl::api::CheckpointRequest;
use pvgpu_ctl::client::CtlError;

/// `CU_MEMPOOL_ATTR_*`: release threshold, reserved now, used now, used
/// at most.
const THRESHOLD: u32 = 4;
const RESERVED: u32 = 5;
const USED: u32 = 7;
const USED_HIGH: u32 = 8;

pub(crate) fn pools_of_the_program_s_own(t: Transport) {
    let h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let pool = c.mem_pool_create(g.ctx, 0).unwrap();
    let n = 1usize << 20;
    let d = c.mem_alloc_from_pool(g.ctx, pool, n as u64, s).unwrap();
    let data: Vec<u8> = (0..n).map(|i| (i * 5 + 1) as u8).collect();
    c.memcpy_htod_async(d, &data, s).unwrap();
    let mut back = vec![0u8; n];
    c.memcpy_dtoh_async(&mut back, d, s).unwrap();
    c.stream_synchronize(s).unwrap();
    assert!(back == data, "the pool's memory holds what was written");
    assert!(c.mem_pool_attribute_of(pool, USED, None).unwrap() >= n as u64);
    assert!(c.mem_pool_attribute_of(pool, RESERVED, None).unwrap() >= n as u64);
    assert_eq!(c.mem_pool_attribute_of(pool, THRESHOLD, Some(u64::MAX)).unwrap(), u64::MAX);
    assert_eq!(c.mem_pool_attribute_of(pool, THRESHOLD, None).unwrap(), u64::MAX);
    assert_eq!(code(c.mem_pool_attribute_of(pool, RESERVED, Some(1))), CuResult::INVALID_VALUE, "read-only");
    const RW: u32 = 3;
    assert_eq!(c.mem_pool_access_of(pool, 0, None).unwrap(), RW, "its own device reads and writes it");
    assert_eq!(code(c.mem_pool_access_of(pool, 99, None)), CuResult::INVALID_DEVICE);

    // Another session's program cannot name it.
    let other = h.client(t);
    let og = Gpu::new(&other).unwrap();
    assert_eq!(code(other.mem_alloc_from_pool(og.ctx, pool, 64, Stream::DEFAULT)), CuResult::INVALID_VALUE);
    assert_eq!(code(other.mem_pool_attribute_of(pool, USED, None)), CuResult::INVALID_VALUE);
    assert_eq!(code(other.mem_pool_destroy(pool)), CuResult::INVALID_VALUE);
    drop(other);

    // The checkpoint cannot carry a pool made to be shared with other
    // processes, and says so.
    let shared = c.mem_pool_create_with(g.ctx, 0, pvgpu_ring::proto::MEM_SHAREABLE).unwrap();
    if h.exec == ExecKind::Host {
        let ctl = h.control().unwrap();
        let id = ctl.sessions().unwrap().iter().map(|s| s.id).min().unwrap();
        let dir = TempDir::new("pools");
        let req = CheckpointRequest {
            file: dir.0.join("s.pvgpu").display().to_string(),
            leave_running: true,
            timeout_seconds: Some(30),
            ..Default::default()
        };
        std::thread::scope(|sc| {
            let refused = sc.spawn(|| ctl.checkpoint(id, &req));
            while !refused.is_finished() {
                c.ctx_synchronize(g.ctx).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            match refused.join().unwrap() {
                Err(CtlError::Refused { status: 409, message }) => assert!(message.contains("pools shared"), "{message}"),
                other => panic!("a checkpoint of a session with a shareable pool: {other:?}"),
            }
        });
    }
    c.mem_pool_destroy(shared).unwrap();

    c.mem_free_async(d, s).unwrap();
    c.stream_synchronize(s).unwrap();
    assert_eq!(c.mem_pool_attribute_of(pool, USED, None).unwrap(), 0, "freed");
    assert!(c.mem_pool_attribute_of(pool, USED_HIGH, None).unwrap() >= n as u64, "the high-water mark stays");
    c.mem_pool_attribute_of(pool, USED_HIGH, Some(0)).unwrap();
    c.mem_pool_trim(g.ctx, Some(pool), 0).unwrap();
    c.mem_pool_trim(g.ctx, None, 0).unwrap();

    // A pool's size limit holds.
    let small = c.mem_pool_create(g.ctx, 4 << 20).unwrap();
    let a = c.mem_alloc_from_pool(g.ctx, small, 3 << 20, s).unwrap();
    assert_eq!(code(c.mem_alloc_from_pool(g.ctx, small, 3 << 20, s)), CuResult::OUT_OF_MEMORY, "past maxSize");
    c.mem_free(a).unwrap();

    // Destroyed, it is gone; memory allocated from it stays until freed.
    let b = c.mem_alloc_from_pool(g.ctx, small, 1 << 20, s).unwrap();
    c.stream_synchronize(s).unwrap();
    c.mem_pool_destroy(small).unwrap();
    assert_eq!(code(c.mem_pool_destroy(small)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.mem_alloc_from_pool(g.ctx, small, 64, s)), CuResult::INVALID_VALUE);
    c.memcpy_htod(b, &[1u8; 16]).unwrap();
    c.mem_free(b).unwrap();
    c.mem_pool_destroy(pool).unwrap();
}

/// What a program holds in its pools: one with a size limit, a release
/// threshold and a reuse policy set, two allocations from it with their
/// bytes (one freed before the move, so the pool's use is what stays), a
/// second pool made later, and an allocation of a pool destroyed since.
struct Held {
    pool: pvgpu_frontend::MemPool,
    late: pvgpu_frontend::MemPool,
    a: u64,
    b: u64,
    c: u64,
    /// From a pool destroyed since.
    outlives: u64,
    s: Stream,
}

const A: u64 = 64 << 10;
const B: u64 = 1 << 20;

fn fill(n: u64, seed: u64) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + seed) as u8).collect()
}

fn hold(c: &Client, g: &Gpu<'_>) -> Held {
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    let pool = c.mem_pool_create(g.ctx, 4 << 20).unwrap();
    c.mem_pool_attribute_of(pool, THRESHOLD, Some(1 << 20)).unwrap();
    c.mem_pool_attribute_of(pool, 2, Some(0)).unwrap();
    let gone = c.mem_alloc_from_pool(g.ctx, pool, 4096, s).unwrap();
    let a = c.mem_alloc_from_pool(g.ctx, pool, A, s).unwrap();
    let b = c.mem_alloc_from_pool(g.ctx, pool, B, s).unwrap();
    c.mem_free_async(gone, s).unwrap();
    let late = c.mem_pool_create(g.ctx, 0).unwrap();
    let cc = c.mem_alloc_from_pool(g.ctx, late, 4096, s).unwrap();
    // A pool destroyed while its allocation lives on.
    let gone_pool = c.mem_pool_create(g.ctx, 0).unwrap();
    let outlives = c.mem_alloc_from_pool(g.ctx, gone_pool, 4096, s).unwrap();
    c.mem_pool_destroy(gone_pool).unwrap();
    c.memcpy_htod_async(a, &fill(A, 1), s).unwrap();
    c.memcpy_htod_async(b, &fill(B, 2), s).unwrap();
    c.memcpy_htod_async(cc, &fill(4096, 3), s).unwrap();
    c.memcpy_htod_async(outlives, &fill(4096, 4), s).unwrap();
    c.stream_synchronize(s).unwrap();
    Held { pool, late, a, b, c: cc, outlives, s }
}

fn go_on(c: &Client, g: &Gpu<'_>, h: &Held) {
    for (d, n, seed) in [(h.a, A, 1), (h.b, B, 2), (h.c, 4096, 3), (h.outlives, 4096, 4)] {
        let mut back = vec![0u8; n as usize];
        c.memcpy_dtoh(&mut back, d).unwrap();
        assert!(back == fill(n, seed), "the bytes of a pool's allocation at {d:#x}");
    }
    assert_eq!(c.mem_pool_attribute_of(h.pool, THRESHOLD, None).unwrap(), 1 << 20, "the release threshold set");
    assert_eq!(c.mem_pool_attribute_of(h.pool, 2, None).unwrap(), 0, "the reuse policy set");
    assert_eq!(c.mem_pool_attribute_of(h.pool, USED, None).unwrap(), A + B, "the pool's allocations, counted as its own");
    assert_eq!(code(c.mem_alloc_from_pool(g.ctx, h.pool, 3 << 20, h.s)), CuResult::OUT_OF_MEMORY, "its size limit");
    let more = c.mem_alloc_from_pool(g.ctx, h.pool, 4096, h.s).unwrap();
    c.mem_free_async(h.a, h.s).unwrap();
    c.mem_free_async(more, h.s).unwrap();
    c.stream_synchronize(h.s).unwrap();
    assert_eq!(c.mem_pool_attribute_of(h.pool, USED, None).unwrap(), B, "a free gives the pool back its bytes");
    c.mem_free(h.b).unwrap();
    c.mem_free(h.c).unwrap();
    c.mem_free(h.outlives).unwrap();
    c.mem_pool_destroy(h.pool).unwrap();
    c.mem_pool_destroy(h.late).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
}

pub(crate) fn pools_move_with_their_session(t: Transport) {
    moves_with_its_session(t, "holding pools of its own", hold, |c, g, held, _| go_on(c, g, held));
}

pub(crate) fn pools_survive_a_backend_restart(t: Transport) {
    survives_a_restart(t, "holding pools of its own", hold, |c, g, held, meta| {
        let state = meta.state;
        assert_eq!(state.pools.len(), 2, "{:?}", state.pools);
        assert_eq!(state.allocations.iter().filter(|a| a.pool.is_some()).count(), 3, "the pools' allocations");
        go_on(c, g, held);
    });
}
