//! Copies of bulk data between the program's memory and the shared data
//! area. One core copies about 10 GB/s, less than the DMA engine moves out
//! of page-locked memory, so large copies are shared with a few threads of
//! a pool of their own (at most three helpers, none where the program has
//! a single CPU).
//!
//! The copy is cut into pieces that the calling thread and the helpers
//! claim one at a time. The calling thread starts at once and never waits
//! for a helper to wake up: a helper that wakes late finds the pieces
//! gone and does nothing, so a copy is never slower than the calling
//! thread alone. The pool's threads sleep when there is nothing to copy.

use rayon::ThreadPool;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Copies at least this long are shared.
const PARALLEL_MIN: usize = 512 << 10;
/// What one thread claims at a time.
const PIECE: usize = 64 << 10;
/// Most helper threads.
const MAX_HELPERS: usize = 3;

static POOL: OnceLock<Option<ThreadPool>> = OnceLock::new();

fn pool() -> Option<&'static ThreadPool> {
    POOL.get_or_init(|| {
        let helpers = std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1).min(MAX_HELPERS);
        if helpers == 0 {
            return None;
        }
        rayon::ThreadPoolBuilder::new().num_threads(helpers).thread_name(|i| format!("pvgpu-copy-{i}")).build().ok()
    })
    .as_ref()
}

/// One shared copy: its ranges, the next piece to claim and the bytes
/// copied so far.
struct Job {
    dst: *mut u8,
    src: *const u8,
    len: usize,
    next: AtomicUsize,
    done: AtomicUsize,
}

// A piece can be claimed only while `copy` (whose caller vouches for the
// ranges) has not returned: it returns once every claimed piece is done.
// SAFETY: the pointers are only dereferenced for a claimed piece (above).
unsafe impl Send for Job {}
// SAFETY: as above; the counters are atomics.
unsafe impl Sync for Job {}

impl Job {
    /// Claims and copies pieces until none is left.
    fn work(&self) {
        loop {
            let at = self.next.fetch_add(PIECE, Ordering::Relaxed);
            if at >= self.len {
                return;
            }
            let n = PIECE.min(self.len - at);
            // SAFETY: [at, at + n) lies within both ranges and is claimed
            // by this thread alone; `copy` has not returned (see above).
            unsafe { std::ptr::copy_nonoverlapping(self.src.add(at), self.dst.add(at), n) };
            // SYNC POINT: pairs with the Acquire load in `copy`: the bytes
            // of this piece are written before it counts as done.
            self.done.fetch_add(n, Ordering::Release);
        }
    }
}

/// Copies `len` bytes from `src` to `dst`, shared with the pool's helpers
/// when it is long.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, the ranges
/// must not overlap, and nothing else may write `dst` during the copy.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    let pool = if len >= PARALLEL_MIN { pool() } else { None };
    let Some(pool) = pool else {
        // SAFETY: as the caller guarantees.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    };
    let job = Arc::new(Job { dst, src, len, next: AtomicUsize::new(0), done: AtomicUsize::new(0) });
    for _ in 0..pool.current_num_threads().min(len / PIECE - 1) {
        let job = job.clone();
        pool.spawn(move || job.work());
    }
    job.work();
    // Only pieces a helper claimed and is still copying are left.
    let mut spins = 0u32;
    while job.done.load(Ordering::Acquire) < len {
        spins += 1;
        if spins % 64 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_short_copies_are_exact() {
        for len in [0, 1, 4095, PARALLEL_MIN - 1, PARALLEL_MIN, 3 * PIECE + 17, 8 << 20] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0u8; len + 64];
            // SAFETY: both buffers hold at least `len` bytes and are distinct.
            unsafe { copy(dst.as_mut_ptr().add(32), src.as_ptr(), len) };
            assert_eq!(&dst[32..32 + len], &src[..], "len {len}");
            assert!(dst[..32].iter().chain(&dst[32 + len..]).all(|&b| b == 0), "wrote outside the range, len {len}");
        }
    }

    #[test]
    fn many_copies_in_a_row_from_several_threads() {
        let handles: Vec<_> = (0..3)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..50usize {
                        let len = PARALLEL_MIN + round * 4099 + t;
                        let src: Vec<u8> = (0..len).map(|i| (i + round + t) as u8).collect();
                        let mut dst = vec![0u8; len];
                        // SAFETY: both buffers hold `len` bytes and are distinct.
                        unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), len) };
                        assert_eq!(dst, src);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
}
