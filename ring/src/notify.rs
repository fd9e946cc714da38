//! Notification between the two ends of a ring, and the adaptive wait.
//!
//! A [`Notifier`] is one side's doorbell: `notify` rings the peer's,
//! `wait` blocks on our own until it rings, a timeout passes, or the peer is
//! found gone. Local transports implement it with eventfds, the Xen
//! transport with an event channel.
//!
//! [`Waiter::wait_until`] spins on a condition for a short while (the peer
//! usually answers within microseconds), then arms the peer's notification
//! (an event index), re-checks so that a wake-up racing with the arming is
//! not lost, and only then blocks. On a thread that has one CPU to itself
//! ([`yield_after`]), the spin yields the CPU on every turn instead: the
//! peer, or another thread of the program, may need that CPU to make the
//! progress the spin waits for.

use std::time::{Duration, Instant};

/// Why a notifier failed.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The peer closed its end or died.
    #[error("Peer went away")]
    PeerGone,
    /// The operating system refused an operation.
    #[error("Notification failed")]
    Io(#[from] std::io::Error),
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The peer rang (or may have: callers always re-check).
    Notified,
    /// The timeout passed.
    TimedOut,
}

/// One side's doorbell.
pub trait Notifier: Send + Sync {
    /// Rings the peer.
    fn notify(&self) -> Result<(), NotifyError>;
    /// Blocks until rung, `timeout` passes, or the peer is gone.
    fn wait(&self, timeout: Option<Duration>) -> Result<Wake, NotifyError>;
}

/// Why [`Waiter::wait_until`] returned without a value.
#[derive(Debug, thiserror::Error)]
pub enum WaitError<E> {
    /// The condition check failed.
    #[error(transparent)]
    Check(E),
    /// The notifier failed or the peer went away.
    #[error(transparent)]
    Notify(#[from] NotifyError),
    /// The deadline passed.
    #[error("Timed out")]
    TimedOut,
}

/// What [`Waiter::wait_until`] asks of its step function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Is the condition met? Return `Some` to stop waiting.
    Check,
    /// Ask the peer to notify us on its next progress (set the event index).
    Arm,
    /// We woke from a block (notified or timed out); return an error to give
    /// up (shutdown, peer gone), `None` to go on.
    Tick,
}

/// How long a thread may spin before it starts yielding its CPU on every
/// turn of the spin: the whole spin where the thread may run on more than
/// one CPU; [`SPIN_ALONE`] where it has a single one (a guest with one
/// vCPU, an MPI rank bound to one core, a program and its session pinned
/// to one core), where a long spin would only hold back whoever must run
/// for the wait to end (the session itself, or the program's other
/// threads). Asks the kernel (CPU affinity and cgroup quota), so callers
/// ask once per connection.
pub fn yield_after(spin: Duration) -> Duration {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() > 1 => spin,
        _ => spin.min(SPIN_ALONE),
    }
}

/// Pure spin of a thread with one CPU: long enough for a peer on another
/// CPU to answer a call that does nothing, short against a time slice.
pub const SPIN_ALONE: Duration = Duration::from_micros(2);

/// Spin-then-block waiting.
pub struct Waiter<'a> {
    /// Our doorbell.
    pub notifier: &'a dyn Notifier,
    /// How long to spin before arming and blocking.
    pub spin: Duration,
    /// From this point of the spin on, yield the CPU on every turn
    /// ([`yield_after`]); at or past `spin`, never.
    pub yield_after: Duration,
    /// Give up at this instant.
    pub deadline: Option<Instant>,
    /// Longest single block, so callers can notice outside events (a
    /// shutdown flag, a dead peer that cannot signal) between blocks.
    pub slice: Duration,
}

impl<'a> Waiter<'a> {
    /// A waiter with no deadline.
    pub fn new(notifier: &'a dyn Notifier, spin: Duration) -> Self {
        Waiter { notifier, spin, yield_after: spin, deadline: None, slice: Duration::from_millis(200) }
    }

    /// Waits until `step(Step::Check)` yields a value. After spinning for
    /// `spin`, it calls `step(Step::Arm)` and checks again before every
    /// block, so a notification racing with the arming is never lost; after
    /// every block it calls `step(Step::Tick)`.
    pub fn wait_until<T, E>(&self, mut step: impl FnMut(Step) -> Result<Option<T>, E>) -> Result<T, WaitError<E>> {
        let start = Instant::now();
        let mut spins = 0u32;
        let mut yielding = self.yield_after.is_zero();
        loop {
            if let Some(v) = step(Step::Check).map_err(WaitError::Check)? {
                return Ok(v);
            }
            spins = spins.wrapping_add(1);
            if yielding || spins % 64 == 0 {
                let spent = start.elapsed();
                if spent >= self.spin {
                    break;
                }
                yielding = spent >= self.yield_after;
            }
            if yielding {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        loop {
            if let Some(v) = step(Step::Arm).map_err(WaitError::Check)? {
                return Ok(v);
            }
            if let Some(v) = step(Step::Check).map_err(WaitError::Check)? {
                return Ok(v);
            }
            let mut block = self.slice;
            if let Some(d) = self.deadline {
                let now = Instant::now();
                if now >= d {
                    return Err(WaitError::TimedOut);
                }
                block = block.min(d - now);
            }
            if let Err(e) = self.notifier.wait(Some(block)) {
                // A peer that answered and then left (a backend writing a
                // reply, ringing and closing its end at once, as a session
                // does that a checkpoint takes away): the answer is there
                // and counts; only an empty ring means it is lost.
                if let Some(v) = step(Step::Check).map_err(WaitError::Check)? {
                    return Ok(v);
                }
                return Err(e.into());
            }
            if let Some(v) = step(Step::Tick).map_err(WaitError::Check)? {
                return Ok(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A doorbell whose peer, at the first wait, answers (sets `answered`)
    /// and leaves.
    struct AnswersThenLeaves<'a> {
        answered: &'a AtomicBool,
        answers: bool,
    }

    impl Notifier for AnswersThenLeaves<'_> {
        fn notify(&self) -> Result<(), NotifyError> {
            Ok(())
        }

        fn wait(&self, _: Option<Duration>) -> Result<Wake, NotifyError> {
            self.answered.store(self.answers, Ordering::SeqCst);
            Err(NotifyError::PeerGone)
        }
    }

    fn wait_on(answers: bool) -> Result<u32, WaitError<()>> {
        let answered = AtomicBool::new(false);
        let bell = AnswersThenLeaves { answered: &answered, answers };
        let w = Waiter::new(&bell, Duration::ZERO);
        w.wait_until(|_| Ok(answered.load(Ordering::SeqCst).then_some(7)))
    }

    #[test]
    fn an_answer_written_before_the_peer_left_counts() {
        assert_eq!(wait_on(true).unwrap(), 7);
    }

    #[test]
    fn a_peer_that_left_without_answering_is_gone() {
        assert!(matches!(wait_on(false), Err(WaitError::Notify(NotifyError::PeerGone))));
    }
}
