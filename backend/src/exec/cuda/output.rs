//! What kernels print (`printf` on the device) goes, on a GPU, to the
//! standard output of the process that synchronised with them, and what
//! the driver says of a failed device assertion to its standard error:
//! here, a session's worker. [`capture`] points the worker's standard
//! output and error at pipes (its log goes on to where its standard error
//! went, [`crate::log_sink`]), a thread keeps the pipes drained into
//! bounded buffers (so a chatty kernel never blocks the driver), and
//! [`drain`] hands what was written to the session, which sends it to the
//! program before the reply of the call that waited for it. Only a process
//! that serves one session captures: in thread isolation every session
//! would share one stdout.

use crate::exec::Printed;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::unistd::{dup, dup2_stderr, dup2_stdout, pipe, read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

/// Output kept for the session at most, each of standard output and
/// error; beyond it, output is dropped and the session says how much.
const MAX_BUFFERED: usize = 16 << 20;

/// One captured stream: the pipe's read end, what was read, and how much
/// was dropped.
struct Stream {
    pipe: OwnedFd,
    buf: Mutex<(Vec<u8>, usize)>,
}

struct Capture {
    out: Stream,
    err: Stream,
}

static CAPTURE: OnceLock<Capture> = OnceLock::new();

/// Why output could not be captured.
#[derive(Debug, thiserror::Error)]
#[error("Cannot capture the worker's standard output and error")]
pub struct CaptureError(#[source] nix::Error);

/// A pipe whose write end replaces `into` (standard output or error).
fn redirect(into: impl FnOnce(&OwnedFd) -> nix::Result<()>) -> Result<Stream, CaptureError> {
    let (r, w) = pipe().map_err(CaptureError)?;
    let flags = fcntl(r.as_fd(), FcntlArg::F_GETFL).map_err(CaptureError)?;
    fcntl(r.as_fd(), FcntlArg::F_SETFL(OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK)).map_err(CaptureError)?;
    into(&w).map_err(CaptureError)?;
    Ok(Stream { pipe: r, buf: Mutex::new((Vec::new(), 0)) })
}

/// Redirects this process's standard output and error into the capture
/// pipes; the log keeps writing where standard error went. Call once,
/// before the driver starts, in a process that serves one session.
pub fn capture() -> Result<(), CaptureError> {
    if CAPTURE.get().is_some() {
        return Ok(());
    }
    let out = redirect(|w| dup2_stdout(w))?;
    // The log, and a panic's message, go on to the supervisor's log.
    let log = dup(std::io::stderr().as_fd()).map_err(CaptureError)?;
    crate::log_sink::send_to(log);
    std::panic::set_hook(Box::new(|info| tracing::error!(%info, "the worker panicked")));
    let err = redirect(|w| dup2_stderr(w))?;
    if CAPTURE.set(Capture { out, err }).is_err() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("pvgpu-output".into())
        .spawn(|| {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            let Some(c) = CAPTURE.get() else { return };
            loop {
                let mut fds = [PollFd::new(c.out.pipe.as_fd(), PollFlags::POLLIN), PollFd::new(c.err.pipe.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, PollTimeout::NONE).is_err() {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                pull(&c.out);
                pull(&c.err);
            }
        })
        .map_err(|e| CaptureError(nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EAGAIN))))?;
    Ok(())
}

/// Reads whatever the pipe holds into the buffer.
fn pull(s: &Stream) {
    let mut g = s.buf.lock().unwrap_or_else(|p| p.into_inner());
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match read(&s.pipe, &mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let (buf, dropped) = &mut *g;
                if buf.len() + n <= MAX_BUFFERED {
                    buf.extend_from_slice(&chunk[..n]);
                } else {
                    *dropped += n;
                }
            }
        }
    }
}

/// Moves what `s` holds into `out`.
fn take(s: &Stream, out: &mut Vec<u8>) {
    pull(s);
    let mut g = s.buf.lock().unwrap_or_else(|p| p.into_inner());
    let (buf, dropped) = &mut *g;
    out.append(buf);
    if *dropped > 0 {
        out.extend_from_slice(format!("\n[pvgpu: {dropped} bytes of kernel output dropped]\n").as_bytes());
        *dropped = 0;
    }
}

/// Moves what was written since the last call into `out` (after flushing
/// this process's C streams, where the driver writes).
pub fn drain(out: &mut Printed) {
    let Some(c) = CAPTURE.get() else { return };
    // SAFETY: fflush(NULL) flushes every C stream; no preconditions.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    take(&c.out, &mut out.out);
    take(&c.err, &mut out.err);
}
