//! Stream capture modes, per program thread. Natively each thread has its
//! own capture mode (`cuThreadExchangeStreamCaptureMode`), and whether a
//! thread may make a call the driver counts as unsafe during capture (a
//! synchronous copy from pageable memory, an allocation, a query of a
//! capturing stream...) depends on it and on the captures under way:
//!
//! - in relaxed mode, always;
//! - in thread-local mode, unless the thread itself began a capture not in
//!   relaxed mode;
//! - in global mode, unless it did, or another thread began a global one.
//!
//! The backend serves a session on one thread, so its driver sees every
//! capture as that thread's own, and one mode for all the program's
//! threads. The client therefore keeps each thread's mode and the
//! captures under way (which thread began each, in which mode), works out
//! for each call whether the calling thread may make unsafe calls, and
//! before the call sets the backend thread's mode to say so when that
//! changed: relaxed (the driver allows them) or global (the driver refuses
//! them and invalidates the captures, as natively). XLA's autotuner, one
//! thread capturing in thread-local mode while another copies from
//! pageable memory, needs this.

use pvgpu_ring::cuda::api::{CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const GLOBAL: u32 = CU_STREAM_CAPTURE_MODE_GLOBAL.0;
const THREAD_LOCAL: u32 = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL.0;
const RELAXED: u32 = CU_STREAM_CAPTURE_MODE_RELAXED.0;

thread_local! {
    /// This thread's capture mode, as the program set it.
    static MODE: Cell<u32> = const { Cell::new(GLOBAL) };
    /// This thread's number (threads' ids may be reused; these are not).
    static THREAD: u64 = {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

/// The calling thread's number (0 while its storage is torn down).
fn this_thread() -> u64 {
    THREAD.try_with(|t| *t).unwrap_or(0)
}

/// The calling thread's capture mode.
pub(crate) fn thread_mode() -> u32 {
    MODE.try_with(Cell::get).unwrap_or(GLOBAL)
}

/// Sets the calling thread's capture mode; returns the previous one.
pub(crate) fn exchange_thread_mode(mode: u32) -> u32 {
    MODE.try_with(|m| m.replace(mode)).unwrap_or(GLOBAL)
}

/// A capture under way.
struct Capture {
    /// Stream id that began it.
    stream: u64,
    /// The thread that began it.
    thread: u64,
    /// Its mode.
    mode: u32,
}

/// The captures under way, and the mode the backend's thread holds.
pub(crate) struct CaptureModes {
    captures: Vec<Capture>,
    backend: u32,
}

impl Default for CaptureModes {
    fn default() -> Self {
        CaptureModes { captures: Vec::new(), backend: GLOBAL }
    }
}

impl CaptureModes {
    /// The calling thread began a capture on `stream` in `mode`.
    pub(crate) fn begun(&mut self, stream: u64, mode: u32) {
        self.captures.push(Capture { stream, thread: this_thread(), mode });
    }

    /// The capture that `stream` began has ended.
    pub(crate) fn ended(&mut self, stream: u64) {
        if let Some(i) = self.captures.iter().position(|c| c.stream == stream) {
            self.captures.remove(i);
        }
    }

    /// The mode the backend's thread must hold for the calling thread's
    /// next call, if it must change: `None` while it already holds it, or
    /// no capture is under way (then no call is unsafe).
    pub(crate) fn change_for_call(&self) -> Option<u32> {
        if self.captures.is_empty() {
            return None;
        }
        let want = if may_make_unsafe_calls(&self.captures, this_thread(), thread_mode()) { RELAXED } else { GLOBAL };
        (want != self.backend).then_some(want)
    }

    /// The backend's thread now holds `mode`.
    pub(crate) fn backend_holds(&mut self, mode: u32) {
        self.backend = mode;
    }
}

/// Whether thread `thread`, in capture `mode`, may make unsafe calls while
/// `captures` are under way (the driver's rule, in the module docs).
fn may_make_unsafe_calls(captures: &[Capture], thread: u64, mode: u32) -> bool {
    let own = captures.iter().any(|c| c.thread == thread && c.mode != RELAXED);
    let others_global = captures.iter().any(|c| c.thread != thread && c.mode == GLOBAL);
    match mode {
        RELAXED => true,
        THREAD_LOCAL => !own,
        _ => !own && !others_global,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(thread: u64, mode: u32) -> Capture {
        Capture { stream: thread, thread, mode }
    }

    #[test]
    fn the_drivers_rule() {
        // No capture: anything goes.
        assert!(may_make_unsafe_calls(&[], 1, GLOBAL));
        // Another thread's thread-local capture binds only that thread.
        assert!(may_make_unsafe_calls(&[c(2, THREAD_LOCAL)], 1, GLOBAL));
        assert!(may_make_unsafe_calls(&[c(2, THREAD_LOCAL)], 1, THREAD_LOCAL));
        // Another thread's global capture binds global-mode threads.
        assert!(!may_make_unsafe_calls(&[c(2, GLOBAL)], 1, GLOBAL));
        assert!(may_make_unsafe_calls(&[c(2, GLOBAL)], 1, THREAD_LOCAL));
        // The thread's own capture, unless relaxed.
        assert!(!may_make_unsafe_calls(&[c(1, THREAD_LOCAL)], 1, THREAD_LOCAL));
        assert!(!may_make_unsafe_calls(&[c(1, GLOBAL)], 1, GLOBAL));
        assert!(may_make_unsafe_calls(&[c(1, RELAXED)], 1, GLOBAL));
        // A relaxed thread, always.
        assert!(may_make_unsafe_calls(&[c(1, GLOBAL), c(2, GLOBAL)], 1, RELAXED));
    }

    #[test]
    fn the_backend_changes_only_when_it_must() {
        let mut m = CaptureModes::default();
        assert_eq!(m.change_for_call(), None, "no capture");
        m.begun(5, THREAD_LOCAL);
        // This thread began it: unsafe calls refused; the backend holds
        // global already.
        assert_eq!(m.change_for_call(), None);
        // Relaxed, this thread may.
        exchange_thread_mode(RELAXED);
        assert_eq!(m.change_for_call(), Some(RELAXED));
        m.backend_holds(RELAXED);
        assert_eq!(m.change_for_call(), None);
        exchange_thread_mode(GLOBAL);
        assert_eq!(m.change_for_call(), Some(GLOBAL));
        // Another thread, not bound by this thread's thread-local capture.
        m.backend_holds(GLOBAL);
        let other = std::thread::spawn(|| {
            let mut m = CaptureModes::default();
            m.captures.push(Capture { stream: 5, thread: u64::MAX, mode: THREAD_LOCAL });
            m.change_for_call()
        });
        assert_eq!(other.join().unwrap(), Some(RELAXED));
        m.ended(5);
        assert_eq!(m.change_for_call(), None);
    }
}
