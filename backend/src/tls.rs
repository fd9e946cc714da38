//! TLS for TCP listeners on networks that are not trusted (`--listen
//! tls:HOST:PORT`, `--tls-cert`, `--tls-key`).
//!
//! The supervisor runs the TLS handshake and the key check, then relays
//! plaintext between the TLS connection and a socket pair whose other end
//! the session's worker serves. The worker never holds TLS state or the
//! certificate's private key, and no worker starts before the peer has
//! authenticated. The cost is the relay: each message crosses one more
//! socket and one more thread (measured in `docs/operations.md`).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, ClientConnection, ConnectionCommon, ServerConfig, ServerConnection, SideData, StreamOwned};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file cannot be read or holds nothing usable.
    #[error("TLS {what} file {path}: {why}")]
    File {
        /// Certificate or key.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// rustls refused the certificate and key.
    #[error("TLS certificate and key do not make a server configuration")]
    Config(#[from] rustls::Error),
}

/// The server side of TLS: the certificate chain in PEM file `cert` and its
/// private key in PEM file `key`.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let file = |what, path: &Path, why: String| TlsError::File { what, path: path.to_path_buf(), why };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file("certificate", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file("certificate", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file("certificate", cert, "no certificate in it".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file("key", key, e.to_string()))?;
    Ok(Arc::new(ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key)?))
}

/// A TLS connection after its handshake.
pub type TlsStream = StreamOwned<ServerConnection, TcpStream>;

/// A TLS connection this backend opened (to a peer backend), after its
/// handshake.
pub type TlsClientStream = StreamOwned<ClientConnection, TcpStream>;

/// Opens a TLS connection to `host_port` (`HOST:PORT`), checking its
/// certificate for `HOST` against `config`'s authorities (bounded by
/// `timeout` for the connection and each read and write).
pub fn connect(config: &Arc<ClientConfig>, host_port: &str, timeout: std::time::Duration) -> io::Result<TlsClientStream> {
    use std::net::ToSocketAddrs;
    let (host, _) = host_port.rsplit_once(':').ok_or_else(|| io::Error::other("not HOST:PORT"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(io::Error::other)?;
    let to = host_port.to_socket_addrs()?.next().ok_or_else(|| io::Error::other("no address"))?;
    let sock = TcpStream::connect_timeout(&to, timeout)?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    let conn = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
    let mut s = StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// Runs the server side of the handshake on `sock` (its timeouts bound it).
pub fn accept(config: &Arc<ServerConfig>, sock: TcpStream) -> io::Result<TlsStream> {
    // Without it the end of every large reply waited for the client's
    // delayed acknowledgement (Nagle): 1 MiB device-to-host copies over
    // TLS ran at 0.08 GB/s on the H200 machine, 2026-11-27.
    sock.set_nodelay(true)?;
    let conn = ServerConnection::new(config.clone()).map_err(io::Error::other)?;
    let mut s = StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// Relays plaintext between `tls` (either side's) and `local` until
/// either side closes (or fails); then closes both, so the other side
/// sees it.
pub fn relay<C, S>(tls: StreamOwned<C, TcpStream>, local: UnixStream)
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    S: SideData,
{
    relay_until_idle(tls, local, None);
}

/// [`relay`], also ended once neither side has sent anything for `idle`.
pub fn relay_until_idle<C, S>(mut tls: StreamOwned<C, TcpStream>, mut local: UnixStream, idle: Option<std::time::Duration>)
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    S: SideData,
{
    if let Err(e) = relay_inner(&mut tls, &mut local, idle) {
        tracing::debug!(error = %e, "TLS relay ended");
    }
    tls.conn.send_close_notify();
    let _ = tls.conn.complete_io(&mut tls.sock);
    let _ = tls.sock.shutdown(std::net::Shutdown::Both);
    let _ = local.shutdown(std::net::Shutdown::Both);
}

/// Hands `local` what plaintext `tls` holds; true once the peer has
/// closed.
fn drain_plaintext<C, S>(tls: &mut StreamOwned<C, TcpStream>, local: &mut UnixStream, buf: &mut [u8]) -> io::Result<bool>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    S: SideData,
{
    loop {
        match tls.conn.reader().read(buf) {
            Ok(0) => return Ok(true),
            Ok(n) => local.write_all(&buf[..n])?,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

fn relay_inner<C, S>(tls: &mut StreamOwned<C, TcpStream>, local: &mut UnixStream, idle: Option<std::time::Duration>) -> io::Result<()>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    S: SideData,
{
    tls.sock.set_read_timeout(None)?;
    // A peer that stops reading holds the relay (and its thread in the
    // supervisor) no longer than a stalled frame holds a session, as over
    // RDMA: the write that times out fails, and the relay ends with it.
    tls.sock.set_write_timeout(Some(crate::conn::STALL))?;
    let mut buf = vec![0u8; 64 << 10];
    let mut last = std::time::Instant::now();
    // Plaintext may have come with the handshake's last flight and wait in
    // the connection's buffer, where polling the socket would not see it.
    if drain_plaintext(tls, local, &mut buf)? {
        return Ok(());
    }
    loop {
        if idle.is_some_and(|i| last.elapsed() >= i) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "idle"));
        }
        while tls.conn.wants_write() {
            tls.conn.write_tls(&mut tls.sock)?;
        }
        let mut fds = [
            libc::pollfd { fd: tls.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: local.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds; one second at most, so that an error
        // on either side is noticed even without traffic.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n > 0 {
            last = std::time::Instant::now();
        }
        if fds[0].revents != 0 {
            if tls.conn.read_tls(&mut tls.sock)? == 0 {
                return Ok(());
            }
            tls.conn.process_new_packets().map_err(io::Error::other)?;
            if drain_plaintext(tls, local, &mut buf)? {
                return Ok(());
            }
        }
        if fds[1].revents != 0 {
            let n = local.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            tls.conn.writer().write_all(&buf[..n])?;
        }
    }
}
