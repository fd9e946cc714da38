//! Memory pools of the program's own (`cuMemPoolCreate`): allocated from
//! on streams, their attributes, size limit and access, trimmed,
//! destroyed; named only within their session; and a checkpoint that
//! cannot carry them refused by name.

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

    // The checkpoint cannot carry it yet, and says so.
    if h.exec == ExecKind::Host {
        let ctl = h.control().unwrap();
        let id = ctl.sessions().unwrap().iter().map(|s| s.id).min().unwrap();
        let dir = TempDir::new("pools");
        let req = CheckpointRequest { file: dir.0.join("s.pvgpu").display().to_string(), leave_running: true, timeout_seconds: Some(30) };
        std::thread::scope(|sc| {
            let refused = sc.spawn(|| ctl.checkpoint(id, &req));
            while !refused.is_finished() {
                c.ctx_synchronize(g.ctx).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            match refused.join().unwrap() {
                Err(CtlError::Refused { status: 409, message }) => assert!(message.contains("pool"), "{message}"),
                other => panic!("a checkpoint of a session with a pool: {other:?}"),
            }
        });
    }

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
