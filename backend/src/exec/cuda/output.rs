//! What kernels print (`printf` on the device) goes, on a GPU, to the
//! standard output of the process that synchronised with them: here, a
//! session's worker. [`capture`] points the worker's standard output at a
//! pipe, a thread keeps the pipe drained into a bounded buffer (so a
//! chatty kernel never blocks the driver), and [`drain`] hands what was
//! printed to the session, which sends it to the program before the reply
//! of the call that waited for it. Only a process that serves one session
//! captures: in thread isolation every session would share one stdout.

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::unistd::{dup2_stdout, pipe, read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

/// Output kept for the session at most; beyond it, output is dropped and
/// the session says how much.
const MAX_BUFFERED: usize = 16 << 20;

struct Capture {
    pipe: OwnedFd,
    buf: Mutex<(Vec<u8>, usize)>,
}

static CAPTURE: OnceLock<Capture> = OnceLock::new();

/// Why output could not be captured.
#[derive(Debug, thiserror::Error)]
#[error("Cannot capture the worker's standard output")]
pub struct CaptureError(#[source] nix::Error);

/// Redirects this process's standard output into the capture pipe. Call
/// once, before the driver starts, in a process that serves one session.
pub fn capture() -> Result<(), CaptureError> {
    let (r, w) = pipe().map_err(CaptureError)?;
    let flags = fcntl(r.as_fd(), FcntlArg::F_GETFL).map_err(CaptureError)?;
    fcntl(r.as_fd(), FcntlArg::F_SETFL(OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK)).map_err(CaptureError)?;
    dup2_stdout(&w).map_err(CaptureError)?;
    drop(w);
    if CAPTURE.set(Capture { pipe: r, buf: Mutex::new((Vec::new(), 0)) }).is_err() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("pvgpu-output".into())
        .spawn(|| {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            let Some(c) = CAPTURE.get() else { return };
            loop {
                let mut fds = [PollFd::new(c.pipe.as_fd(), PollFlags::POLLIN)];
                if poll(&mut fds, PollTimeout::NONE).is_err() {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                pull(c);
            }
        })
        .map_err(|e| CaptureError(nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EAGAIN))))?;
    Ok(())
}

/// Reads whatever the pipe holds into the buffer.
fn pull(c: &Capture) {
    let mut g = c.buf.lock().unwrap_or_else(|p| p.into_inner());
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match read(&c.pipe, &mut chunk) {
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

/// Moves what was printed since the last call into `out` (after flushing
/// this process's C standard output, where the driver writes).
pub fn drain(out: &mut Vec<u8>) {
    let Some(c) = CAPTURE.get() else { return };
    // SAFETY: fflush(NULL) flushes every C stream; no preconditions.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    pull(c);
    let mut g = c.buf.lock().unwrap_or_else(|p| p.into_inner());
    let (buf, dropped) = &mut *g;
    out.append(buf);
    if *dropped > 0 {
        out.extend_from_slice(format!("\n[pvgpu: {dropped} bytes of kernel output dropped]\n").as_bytes());
        *dropped = 0;
    }
}
