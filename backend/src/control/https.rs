//! The control API over TLS (`--control-http` with `--control-tls-cert`):
//! TLS ends here and each connection's plaintext is relayed to the same
//! HTTP server the plain listener runs, on a Unix socket in a directory
//! only the backend's user may open. That server asks every API request
//! for the bearer token, as over plain HTTP.
//!
//! Strangers reach this listener: at most [`MAX_CONNECTIONS`] connections
//! at once (more are closed at once), each with [`HANDSHAKE`] to finish its
//! handshake and cut after [`IDLE`] without traffic.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Most TLS connections served at once.
pub const MAX_CONNECTIONS: usize = 32;
/// Time a connection has for its TLS handshake.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// A connection with no traffic either way for this long is cut.
pub const IDLE: Duration = Duration::from_secs(60);

/// A directory of its own, owner-only, for the inner socket; removed with
/// what it holds when dropped.
pub(super) struct PrivateDir(pub PathBuf);

impl PrivateDir {
    pub(super) fn new() -> std::io::Result<PrivateDir> {
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let mut r = [0u8; 8];
            getrandom_fill(&mut r)?;
            let dir = base.join(format!("pvgpu-control-{}-{}", std::process::id(), u64::from_le_bytes(r)));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(PrivateDir(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("cannot make a private directory"))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn getrandom_fill(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// Accepts TLS connections on `listener` until `stop`, relaying each to
/// the HTTP server at `inner`.
pub(super) fn accept_loop(listener: TcpListener, tls: Arc<rustls::ServerConfig>, inner: PathBuf, stop: &AtomicBool) {
    let live = Arc::new(AtomicUsize::new(0));
    // A connection gone between poll and accept must not block the loop
    // (accepted sockets do not inherit this; they block, with timeouts).
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!(error = %e, "control API (TLS): cannot make the listener non-blocking");
    }
    while !stop.load(Ordering::SeqCst) {
        if !readable(&listener, super::TICK) {
            continue;
        }
        let (sock, peer) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::debug!(error = %e, "control API (TLS): accept failed");
                continue;
            }
        };
        // Relaxed: a count of live connections, ordered with nothing else.
        if live.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::Relaxed);
            if crate::log_limit::peer_triggered() {
                tracing::warn!(%peer, "control API (TLS): too many connections; closing one");
            }
            continue;
        }
        let (tls, inner, live) = (tls.clone(), inner.clone(), live.clone());
        let started = std::thread::Builder::new().name("pvgpu-control-tls".into()).spawn(move || {
            serve_one(sock, peer, &tls, &inner);
            live.fetch_sub(1, Ordering::Relaxed);
        });
        if let Err(e) = started {
            tracing::warn!(error = %e, "control API (TLS): cannot start a thread");
        }
    }
}

/// Waits at most `wait` for a connection to accept.
fn readable(listener: &TcpListener, wait: Duration) -> bool {
    let mut fd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the listener, which outlives the call.
    let n = unsafe { libc::poll(&mut fd, 1, wait.as_millis() as libc::c_int) };
    n > 0
}

fn serve_one(sock: TcpStream, peer: SocketAddr, tls: &Arc<rustls::ServerConfig>, inner: &Path) {
    if sock.set_nonblocking(false).is_err() {
        return;
    }
    let timeouts = sock.set_read_timeout(Some(HANDSHAKE)).and_then(|()| sock.set_write_timeout(Some(HANDSHAKE)));
    if timeouts.is_err() {
        return;
    }
    let stream = match crate::tls::accept(tls, sock) {
        Ok(s) => s,
        Err(e) => {
            if crate::log_limit::peer_triggered() {
                tracing::info!(%peer, error = %e, "control API (TLS): handshake failed");
            }
            return;
        }
    };
    match UnixStream::connect(inner) {
        Ok(local) => crate::tls::relay_until_idle(stream, local, Some(IDLE)),
        Err(e) => tracing::warn!(error = %e, "control API (TLS): the inner server is gone"),
    }
}
