//! A module global the program never looks up goes with its session: a
//! kernel keeps a count in a `__device__` variable of its module that the
//! host never names; moved to another backend or checkpointed through a
//! restart of its own, the program's next launch goes on counting from
//! where it was, not from the module's initial value. The kernel's
//! attributes the program set (the dynamic shared memory it may use, as
//! Triton's and PyTorch's attention kernels set it) come along too.

use super::*;

/// A module with the host double's counting kernel and its global,
/// starting at 40.
const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
.visible .global .align 4 .u32 pvgpu_calls = 40;\n\
.visible .entry pvgpu_count_calls(.param .u64 out)\n{\n\tret;\n}\n";

/// Launches the counter and returns its new value.
fn count(c: &Client, f: &pvgpu_frontend::Function, out: u64) -> u32 {
    c.launch(f, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&out)]).unwrap();
    let mut b = [0u8; 4];
    c.memcpy_dtoh(&mut b, out).unwrap();
    u32::from_le_bytes(b)
}

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, and a value past
/// the 48 KiB every kernel may use.
const DYN_SHARED: i32 = 8;
const SHARED: i32 = 60 << 10;

/// Counts three times; the function and its output.
fn hold(c: &Client, g: &Gpu<'_>) -> (pvgpu_frontend::Function, u64) {
    let m = c.module_load(g.ctx, PTX.as_bytes()).unwrap();
    let f = c.module_get_function(m, "pvgpu_count_calls").unwrap();
    c.func_set_attribute(&f, DYN_SHARED, SHARED).unwrap();
    let out = c.mem_alloc(g.ctx, 4).unwrap();
    assert_eq!([count(c, &f, out), count(c, &f, out), count(c, &f, out)], [41, 42, 43]);
    (f, out)
}

pub(crate) fn globals_never_looked_up_move_with_their_session(t: Transport) {
    let a = Harness::start();
    let c = a.client(t);
    let g = Gpu::new(&c).unwrap();
    if a.exec == ExecKind::Cuda {
        return a_gpu_session_does_not_leave(&a, &c, g.ctx);
    }
    let (f, out) = hold(&c, &g);
    let _b = move_to_another_backend(&a, &c, g.ctx, t, "whose kernel keeps a count in a global");
    assert_eq!(count(&c, &f, out), 44, "the count goes on where it was");
    assert_eq!(c.func_get_attribute(&f, DYN_SHARED).unwrap(), SHARED, "the attribute the program set");
}

pub(crate) fn globals_never_looked_up_survive_a_backend_restart(t: Transport) {
    let mut h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    if h.exec == ExecKind::Cuda {
        return a_gpu_session_does_not_leave(&h, &c, g.ctx);
    }
    let (f, out) = hold(&c, &g);
    let state = through_a_restart(&mut h, &c, g.ctx, "whose kernel keeps a count in a global").state;
    let counted = state.modules.iter().flat_map(|m| &m.unlooked).find(|g| g.name == "pvgpu_calls");
    assert!(counted.is_some_and(|g| g.length == 4), "the global the program never named is in the snapshot");
    assert_eq!(count(&c, &f, out), 44, "the count goes on where it was");
    assert_eq!(c.func_get_attribute(&f, DYN_SHARED).unwrap(), SHARED, "the attribute the program set");
}
