//! Starting worker processes: from one thread that lives as long as the
//! backend, each with its descriptors at fixed numbers; and watching a
//! session's peer from the supervisor.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command};

/// A worker to start, and where to say how that went.
pub(crate) type Fork = (Command, std::sync::mpsc::Sender<io::Result<Child>>);

/// Starts workers from one thread that lives as long as the backend: a
/// worker's parent-death signal fires when the *thread* that forked it
/// ends, and sessions are admitted on short-lived threads.
pub(crate) fn forker() -> std::sync::mpsc::Sender<Fork> {
    let (tx, rx) = std::sync::mpsc::channel::<Fork>();
    let r = std::thread::Builder::new().name("pvgpu-forker".into()).spawn(move || {
        for (mut cmd, reply) in rx {
            let _ = reply.send(cmd.spawn());
        }
    });
    if let Err(e) = r {
        tracing::error!(error = %e, "cannot start the thread that starts workers");
    }
    tx
}

/// Makes the child find each `(fd, number)` of `fds` at `number`, sets it
/// to end when the backend dies, and starts it with SIGUSR1 (a checkpoint
/// nudge) blocked until it has its handler (`worker_process`), so that an
/// early nudge waits instead of killing it.
pub(crate) fn place_fds(cmd: &mut Command, fds: Vec<(std::os::fd::RawFd, i32)>) {
    use std::os::unix::process::CommandExt;
    // The closure calls only fcntl, dup2, close, prctl, sigemptyset,
    // sigaddset and sigprocmask, and allocates nothing (the list was made
    // before the fork).
    // SAFETY: it runs between fork and exec and is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            // Move every one out of the way first: any may sit on another's
            // target number.
            let mut moved = [0i32; 8];
            for (i, (fd, _)) in fds.iter().enumerate().take(moved.len()) {
                moved[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 10);
                if moved[i] < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (i, (_, target)) in fds.iter().enumerate().take(moved.len()) {
                // dup2 clears close-on-exec on the copy.
                if libc::dup2(moved[i], *target) < 0 {
                    return Err(io::Error::last_os_error());
                }
                libc::close(moved[i]);
            }
            // The worker ends if the backend dies.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            // SAFETY: sigset_t is plain integers, and sigemptyset sets
            // it before use; the set lives on this stack frame.
            let mut usr1: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut usr1);
            libc::sigaddset(&mut usr1, libc::SIGUSR1);
            if libc::sigprocmask(libc::SIG_BLOCK, &usr1, std::ptr::null_mut()) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The supervisor's and a worker's ends of a socket pair to the handle
/// registry.
pub(crate) fn broker_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).map_err(io::Error::from)
}

/// Whether a socket's peer has hung up, without reading from it.
pub(crate) fn hung_up(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
    // SAFETY: one valid pollfd, a zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}
