//! Copies of bulk data between the program's memory and the shared data
//! area. One core copies about 10 GB/s, less than the DMA engine moves out
//! of page-locked memory, so large copies are split across a few threads
//! of a pool of their own (at most four, and none where the program has a
//! single CPU). The pool's threads sleep when there is nothing to copy.

use rayon::ThreadPool;
use std::sync::OnceLock;

/// Copies at least this long are split.
const PARALLEL_MIN: usize = 512 << 10;
/// Smallest share of one thread.
const PART_MIN: usize = 256 << 10;
/// Most threads a copy is split across.
const MAX_THREADS: usize = 4;

static POOL: OnceLock<Option<ThreadPool>> = OnceLock::new();

fn pool() -> Option<&'static ThreadPool> {
    POOL.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS);
        if n < 2 {
            return None;
        }
        rayon::ThreadPoolBuilder::new().num_threads(n).thread_name(|i| format!("pvgpu-copy-{i}")).build().ok()
    })
    .as_ref()
}

/// A pointer handed to the pool's threads.
#[derive(Clone, Copy)]
struct Ptr(*mut u8);

// SAFETY: each thread gets a disjoint range of memory the caller of
// `copy` vouches for, and `copy` returns only once every thread is done.
unsafe impl Send for Ptr {}
// SAFETY: as above; the pointer itself is only read.
unsafe impl Sync for Ptr {}

impl Ptr {
    fn at(self, off: usize) -> *mut u8 {
        // SAFETY: callers stay within the range `copy` was given.
        unsafe { self.0.add(off) }
    }
}

/// Copies `len` bytes from `src` to `dst`, across several threads when it
/// is long.
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
    let threads = pool.current_num_threads().min(len / PART_MIN).max(1);
    // Whole cache lines per thread, so no two threads write one line.
    let per = len.div_ceil(threads).next_multiple_of(64);
    let (d, s) = (Ptr(dst), Ptr(src.cast_mut()));
    pool.scope(|scope| {
        let mut off = 0;
        while off < len {
            let n = per.min(len - off);
            scope.spawn(move |_| {
                // SAFETY: [off, off + n) lies within both ranges the caller
                // vouched for, and no other thread copies it.
                unsafe { std::ptr::copy_nonoverlapping(s.at(off), d.at(off), n) }
            });
            off += n;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_short_copies_are_exact() {
        for len in [0, 1, 4095, PARALLEL_MIN - 1, PARALLEL_MIN, 3 * PART_MIN + 17, 8 << 20] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0u8; len + 64];
            // SAFETY: both buffers hold at least `len` bytes and are distinct.
            unsafe { copy(dst.as_mut_ptr().add(32), src.as_ptr(), len) };
            assert_eq!(&dst[32..32 + len], &src[..], "len {len}");
            assert!(dst[..32].iter().chain(&dst[32 + len..]).all(|&b| b == 0), "wrote outside the range, len {len}");
        }
    }
}
