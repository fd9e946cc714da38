//! Virtual memory goes with its session, as XLA's allocator holds it: a
//! program with two reservations (one empty), two physical allocations
//! mapped with access (one released while mapped) and ordinary memory
//! made before and after them, moved to another backend or checkpointed
//! through a restart of its own, goes on with the same addresses, handles
//! and bytes.

use super::*;
use pvgpu_frontend::{Access, PhysMem};

const N: usize = 1000;

struct Held {
    gran: u64,
    va: u64,
    empty: u64,
    a: PhysMem,
    b: PhysMem,
    before: u64,
    after: u64,
}

fn read(c: &Client, d: u64) -> Vec<f32> {
    let mut b = vec![0u8; N * 4];
    c.memcpy_dtoh(&mut b, d).unwrap();
    bytes_f32(&b)
}

fn saxpy(c: &Client, g: &Gpu<'_>, x: u64, y: u64) {
    let f = g.func("saxpy").unwrap();
    c.launch(&f, [4, 1, 1], [256, 1, 1], 0, Stream::DEFAULT, &[arg(&3.0f32), arg(&x), arg(&y), arg(&(N as i32))]).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
}

/// x = 2 in `a`, y = 3x + 1 = 7 in `b`; `a` released while mapped.
fn hold(c: &Client, g: &Gpu<'_>) -> Held {
    let gran = c.mem_granularity(0, false).unwrap();
    let before = c.mem_alloc(g.ctx, 4096).unwrap();
    c.memcpy_htod(before, &[5u8; 4096]).unwrap();
    let va = c.mem_address_reserve(g.ctx, 4 * gran, 0, 0).unwrap();
    let empty = c.mem_address_reserve(g.ctx, 2 * gran, 0, 0).unwrap();
    let (a, b) = (c.mem_create(g.ctx, 2 * gran).unwrap(), c.mem_create(g.ctx, 2 * gran).unwrap());
    c.mem_map(va, 2 * gran, 0, a).unwrap();
    c.mem_map(va + 2 * gran, 2 * gran, 0, b).unwrap();
    c.mem_set_access(va, 4 * gran, Access::ReadWrite).unwrap();
    let after = c.mem_alloc(g.ctx, 4096).unwrap();
    c.memcpy_htod(after, &[6u8; 4096]).unwrap();
    let (x, y) = (va + 64, va + 2 * gran + 128);
    c.memcpy_htod(x, &f32_bytes(&vec![2.0; N])).unwrap();
    c.memcpy_htod(y, &f32_bytes(&vec![1.0; N])).unwrap();
    saxpy(c, g, x, y);
    c.mem_release(a).unwrap();
    Held { gran, va, empty, a, b, before, after }
}

/// The program goes on where its session is now.
fn go_on(c: &Client, g: &Gpu<'_>, h: &Held) {
    let (x, y) = (h.va + 64, h.va + 2 * h.gran + 128);
    assert_eq!(read(c, y), vec![7.0; N], "the bytes of a mapping");
    assert_eq!(read(c, x), vec![2.0; N], "the bytes of memory released while mapped");
    saxpy(c, g, x, y);
    assert_eq!(read(c, y), vec![13.0; N], "a kernel over both mappings");
    let mut plain = [0u8; 4096];
    c.memcpy_dtoh(&mut plain, h.before).unwrap();
    assert_eq!(plain, [5u8; 4096]);
    c.memcpy_dtoh(&mut plain, h.after).unwrap();
    assert_eq!(plain, [6u8; 4096]);
    assert_eq!(code(c.mem_release(h.a)), CuResult::INVALID_VALUE, "released before the move");
    // b moves to the reservation that was empty: its bytes go with it.
    c.mem_unmap(h.va + 2 * h.gran, 2 * h.gran).unwrap();
    c.mem_map(h.empty, 2 * h.gran, 0, h.b).unwrap();
    c.mem_set_access(h.empty, 2 * h.gran, Access::ReadWrite).unwrap();
    assert_eq!(read(c, h.empty + 128), vec![13.0; N], "the physical memory, mapped elsewhere");
    c.mem_unmap(h.va, 2 * h.gran).unwrap();
    c.mem_unmap(h.empty, 2 * h.gran).unwrap();
    c.mem_release(h.b).unwrap();
    c.mem_address_free(h.va, 4 * h.gran).unwrap();
    c.mem_address_free(h.empty, 2 * h.gran).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
}

pub(crate) fn virtual_memory_moves_with_its_session(t: Transport) {
    moves_with_its_session(t, "holding virtual memory", hold, |c, g, held, _| go_on(c, g, held));
}

pub(crate) fn virtual_memory_survives_a_backend_restart(t: Transport) {
    survives_a_restart(t, "holding virtual memory", hold, |c, g, held, meta| {
        assert!(meta.state_bytes >= 4 * held.gran + 8192, "{}", meta.state_bytes);
        let state = meta.state;
        assert_eq!((state.reservations.len(), state.physical.len(), state.mappings.len()), (2, 2, 2));
        assert!(state.physical.iter().any(|p| p.released), "{:?}", state.physical);
        go_on(c, g, held);
    });
}
