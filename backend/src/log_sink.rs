//! Where the backend's log goes: standard error, or, in a worker whose
//! standard error is captured for its program ([`crate::exec::cuda::output`]),
//! a duplicate of the standard error it started with (the supervisor's
//! log). The log never reaches a program.

use std::io::{self, Write};
use std::os::fd::{BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The descriptor log lines are written to (2 until [`send_to`]).
static FD: AtomicI32 = AtomicI32::new(2);

/// From now on the log goes to `fd`, which stays open for the life of the
/// process.
pub fn send_to(fd: OwnedFd) {
    // SeqCst: a log line written after this call goes to `fd`; nothing
    // else is published through it.
    FD.store(fd.into_raw_fd(), Ordering::SeqCst);
}

/// A writer of log lines (`tracing_subscriber`'s `with_writer(LogSink::default)`).
#[derive(Debug, Default, Clone, Copy)]
pub struct LogSink;

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let fd: RawFd = FD.load(Ordering::SeqCst);
        // SAFETY: `fd` is 2 or a descriptor `send_to` took ownership of and
        // never closes: open for the life of the process.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        nix::unistd::write(fd, buf).map_err(io::Error::from)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
