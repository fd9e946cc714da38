//! The local transport's doorbell: the handshake's socket, one byte a
//! ring, end of file the peer's death, every call non-blocking.

use crate::notify::{Notifier, NotifyError, Wake};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

/// A doorbell made of a connected Unix socket: a ring is one byte, the
/// peer's death is end of file.
pub struct SocketNotifier {
    sock: OwnedFd,
}

/// Bytes drained per wake-up; a peer ringing faster only makes us wake
/// again, never read without bound.
const DRAIN: usize = 256;

impl SocketNotifier {
    /// A doorbell on `sock`, a connected stream socket (the handshake's).
    pub fn new(sock: OwnedFd) -> Self {
        SocketNotifier { sock }
    }

    /// Whether the socket shows the peer gone, without blocking.
    pub fn peer_gone(&self) -> bool {
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(0) => false,
            Ok(_) => socket_closed(&self.sock),
            Err(_) => true,
        }
    }
}

fn socket_closed(s: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: recv into a valid 1-byte buffer on a socket we own.
    let n = unsafe { libc::recv(s.as_raw_fd(), b.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    if n == 0 {
        return true;
    }
    n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock
}

impl Notifier for SocketNotifier {
    fn notify(&self) -> Result<(), NotifyError> {
        // SAFETY: send from a valid 1-byte buffer on a socket we own.
        let n = unsafe { libc::send(self.sock.as_raw_fd(), [1u8].as_ptr().cast(), 1, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            // Full: the peer has rings it has not read, so it wakes anyway.
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::NotConnected => Err(NotifyError::PeerGone),
            _ => Err(NotifyError::Io(e)),
        }
    }

    fn wait(&self, timeout: Option<Duration>) -> Result<Wake, NotifyError> {
        let t = match timeout {
            None => PollTimeout::NONE,
            Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
        };
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, t) {
            Ok(0) => return Ok(Wake::TimedOut),
            Ok(_) => {}
            Err(nix::Error::EINTR) => return Ok(Wake::Notified),
            Err(e) => return Err(NotifyError::Io(e.into())),
        }
        // Clear the rings; one racing with this is not lost because the
        // caller re-checks the ring after every wake-up.
        let mut b = [0u8; DRAIN];
        // SAFETY: recv into a valid buffer of DRAIN bytes on a socket we own.
        let n = unsafe { libc::recv(self.sock.as_raw_fd(), b.as_mut_ptr().cast(), DRAIN, libc::MSG_DONTWAIT) };
        if n == 0 {
            return Err(NotifyError::PeerGone);
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Wake::Notified),
                io::ErrorKind::ConnectionReset | io::ErrorKind::NotConnected => Err(NotifyError::PeerGone),
                _ => Err(NotifyError::Io(e)),
            };
        }
        Ok(Wake::Notified)
    }
}
