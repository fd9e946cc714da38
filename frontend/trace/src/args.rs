//! What the slots of private tables are passed and what they change
//! (`PVGPU_TRACE_SLOT_ARGS=N`: the first N calls of each slot).
//!
//! For each such call the report gets the six general argument registers,
//! the returned register, and, for every argument that points at readable
//! memory, the 32 bytes there before and after the call. That is enough to
//! tell an input from an output parameter and to see what a slot writes.
//! Memory is read with `process_vm_readv` on this process, which reports
//! an unreadable address instead of faulting.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes shown of each pointed-at argument.
const SHOWN: usize = 32;

fn limit() -> u32 {
    static L: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *L.get_or_init(|| std::env::var("PVGPU_TRACE_SLOT_ARGS").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
}

static SEEN: [AtomicU32; crate::trampoline::TOTAL] = [const { AtomicU32::new(0) }; crate::trampoline::TOTAL];

/// What a pointer argument pointed at before the call (`None`: not a
/// readable address).
type Before = Option<[u8; SHOWN]>;

thread_local! {
    /// Memory before the call, per nesting level: (trampoline, per argument).
    static PENDING: RefCell<Vec<(usize, Vec<Before>)>> = const { RefCell::new(Vec::new()) };
}

/// The `SHOWN` bytes at `addr`, if this process can read them.
fn peek(addr: usize) -> Option<[u8; SHOWN]> {
    if addr < 4096 {
        return None;
    }
    let mut buf = [0u8; SHOWN];
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: SHOWN };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: SHOWN };
    // SAFETY: reads from this process into `buf`; the kernel checks `addr`
    // and fails with EFAULT rather than touch an unmapped page.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == SHOWN as isize).then_some(buf)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|v| format!("{v:02x}")).collect()
}

/// Slot trampoline `i` is about to call its function with `args`.
pub fn before(i: usize, args: &[usize; 6]) {
    let n = limit();
    if n == 0 {
        return;
    }
    let first = SEEN[i].fetch_add(1, Ordering::Relaxed) < n;
    let mem = if first { args.iter().map(|&a| peek(a)).collect() } else { Vec::new() };
    // A call during thread teardown (a destructor) is not shown.
    let _ = PENDING.try_with(|p| p.borrow_mut().push((i, mem)));
}

/// Slot trampoline `i`'s function returned `ret`.
pub fn after(i: usize, ret: usize, args: &[usize; 6]) {
    if limit() == 0 {
        return;
    }
    let Some((j, mem)) = PENDING.try_with(|p| p.borrow_mut().pop()).ok().flatten() else { return };
    if j != i || mem.is_empty() {
        return;
    }
    let mut line = format!("ARGS {} ret={ret:#x}", crate::report::name(i));
    for (k, (&a, before)) in args.iter().zip(&mem).enumerate() {
        line.push_str(&format!(" a{k}={a:#x}"));
        if let Some(b) = before {
            let now = peek(a);
            line.push_str(&format!("[{}", hex(b)));
            match now {
                Some(n) if n != *b => line.push_str(&format!("->{}]", hex(&n))),
                _ => line.push(']'),
            }
        }
    }
    crate::report::note(&line);
}
