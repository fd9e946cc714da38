//! RDMA listeners (`--listen rdma:HOST:PORT`) and the relays of the
//! connections the supervisor keeps.
//!
//! The supervisor accepts an RDMA connection (rdma-core's rsockets, see
//! [`pvgpu_rdma`]), runs the key check over it as over TCP, and then
//! relays bytes between it and a socket pair whose other end the
//! session's worker serves, as it does for TLS: a worker has no network
//! access (its seccomp filter), and an rsocket cannot be handed to another
//! process. The relay is a thread for each direction ([`relay`]).

// How long a relay waits for a peer to take more of what it sends: as
// long as a stalled frame holds a session.
use crate::conn::STALL;
use pvgpu_rdma::RdmaStream;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A connection the supervisor relays for its session, and the session's
/// end's partner.
pub enum Relay {
    /// TLS, ended in the supervisor.
    Tls(Box<crate::tls::TlsStream>, UnixStream),
    /// RDMA.
    Rdma(RdmaStream, UnixStream),
}

impl Relay {
    /// Relays until either side closes.
    pub fn run(self) {
        match self {
            Relay::Tls(tls, local) => crate::tls::relay(*tls, local),
            Relay::Rdma(rdma, local) => relay(rdma, local),
        }
    }
}

/// How often a relay thread waiting on the fabric looks whether the other
/// direction has ended.
const TICK: Duration = Duration::from_millis(250);

/// Relays between `rdma` and `local` until either side closes (or fails);
/// then ends both, so the other side sees it. Each direction has a thread
/// of its own: rsockets' poll over an rsocket and a kernel socket together
/// missed the kernel socket's data in the Xen lab (2026-11-28: a session's
/// first reply never left), and two threads let a large reply go out while
/// a large request comes in. When the session's side ends, the rsocket is
/// shut down at once, which the peer sees and which wakes this thread's
/// read; its waits are also bounded by [`TICK`]. The rsocket is closed
/// once both have ended.
pub fn relay(rdma: RdmaStream, local: UnixStream) {
    rdma.set_read_timeout(Some(TICK));
    rdma.set_write_timeout(Some(TICK));
    let done = Arc::new(AtomicBool::new(false));
    let up = local.try_clone().and_then(|l| {
        let (r, done) = (rdma.clone(), done.clone());
        std::thread::Builder::new().name("pvgpu-rdma-up".into()).spawn(move || {
            if let Err(e) = pump(&l, &r, &done, STALL) {
                tracing::debug!(error = %e, "RDMA relay to the peer ended");
            }
            done.store(true, Ordering::Relaxed);
            // The peer learns at once that its session ended (rsockets
            // flush the receive side, which also wakes the other
            // direction's wait).
            r.shutdown();
        })
    });
    let up = match up {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start an RDMA relay thread; the session ends");
            None
        }
    };
    if up.is_some() {
        if let Err(e) = pump(&rdma, &local, &done, STALL) {
            tracing::debug!(error = %e, "RDMA relay from the peer ended");
        }
    }
    done.store(true, Ordering::Relaxed);
    // Ends the session's connection, and with it the other direction's
    // read.
    let _ = local.shutdown(std::net::Shutdown::Both);
    if let Some(h) = up {
        let _ = h.join();
    }
    rdma.shutdown();
}

/// Copies from `from` to `to` until `from` ends, or `done` is found set
/// while a wait timed out, or `to` takes nothing for `stall`: one
/// direction of [`relay`] (public for `examples/relay_cost.rs`, which
/// measures it).
pub fn pump(mut from: impl Read, mut to: impl Write, done: &AtomicBool, stall: Duration) -> io::Result<()> {
    let waited = |e: &io::Error| matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted);
    // A chunk of a copy (8 MiB) crosses in a few turns.
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match from.read(&mut buf) {
            Err(e) if waited(&e) && !done.load(Ordering::Relaxed) => continue,
            Err(e) if waited(&e) => return Ok(()),
            r => r?,
        };
        if n == 0 {
            return Ok(());
        }
        let mut left = &buf[..n];
        let mut moved = Instant::now();
        while !left.is_empty() {
            match to.write(left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => {
                    left = &left[k..];
                    moved = Instant::now();
                }
                // A peer that stops reading holds the relay no longer than
                // a stalled frame holds a session.
                Err(e) if waited(&e) && moved.elapsed() >= stall => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the peer stopped reading"));
                }
                Err(e) if waited(&e) && !done.load(Ordering::Relaxed) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes nothing, as a peer that stopped reading.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            std::thread::sleep(Duration::from_millis(5));
            Err(io::ErrorKind::WouldBlock.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A reader with nothing to read yet, as a quiet peer.
    struct Quiet;
    impl Read for Quiet {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            std::thread::sleep(Duration::from_millis(5));
            Err(io::ErrorKind::WouldBlock.into())
        }
    }

    #[test]
    fn copies_everything_until_the_end() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        pump(&data[..], &mut out, &AtomicBool::new(false), STALL).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn a_peer_that_stops_reading_is_let_go() {
        let e = pump(&[1u8; 10][..], Full, &AtomicBool::new(false), Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_quiet_peer_is_left_once_the_other_direction_ended() {
        let done = AtomicBool::new(true);
        pump(Quiet, Vec::new(), &done, STALL).unwrap();
    }
}
