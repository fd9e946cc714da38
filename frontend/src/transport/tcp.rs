//! The stream transports: TCP, plain (`tcp:`) or inside TLS (`tls:`), and
//! RDMA (`rdma:`, [`pvgpu_rdma`]): framed messages, bulk data inline, after
//! the opening in which both sides prove they hold the TCP key
//! ([`pvgpu_ring::tcp_auth`]).

use super::{Staged, Transport};
use crate::error::{ProtocolError, TransportError};
use pvgpu_ring::frame::{FrameError, FrameReader, FrameSink, SliceSink, write_frame};
use pvgpu_ring::proto::{DataRef, Header};
use pvgpu_ring::tcp_auth::{self, ClientKey};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Longest the opening (TLS handshake, key check) may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the transport reads and writes: the socket, or TLS over it.
trait Stream: Read + Write + Send {
    /// Whether bytes already taken from the socket wait to be read (TLS
    /// decrypts a record whole, and may hold a message the socket no
    /// longer shows).
    fn holds_data(&mut self) -> bool {
        false
    }
}
impl Stream for TcpStream {}
impl Stream for pvgpu_rdma::RdmaStream {}
impl Stream for rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    fn holds_data(&mut self) -> bool {
        self.conn.process_new_packets().is_ok_and(|s| s.plaintext_bytes_to_read() > 0)
    }
}

/// A stream connection (TCP, TLS or RDMA) to a backend.
pub struct TcpTransport {
    sock: Box<dyn Stream>,
    /// Reads the replies (a small one in one `read`).
    reader: FrameReader,
    kind: &'static str,
    /// The socket under `sock`, whose read timeout a look for the
    /// backend's [`FLAG_LEAVE_WANTED`](pvgpu_ring::proto::FLAG_LEAVE_WANTED) shortens for a moment.
    raw: Raw,
    /// Each wait for a reply's bound (the socket's read timeout).
    timeout: Option<Duration>,
    /// What put the connection out of step while no call waited (its next
    /// call fails with it).
    out_of_step: Option<OutOfStep>,
}

/// What a look for the backend's request for a call found instead.
#[derive(Debug, Clone, Copy)]
enum OutOfStep {
    /// Another message (its flags).
    Stray(u32),
    /// The end of the connection.
    Closed,
    /// A message that stopped part-way.
    Stalled,
}

/// The socket under a stream connection, for its read timeout.
enum Raw {
    Tcp(TcpStream),
    Rdma(pvgpu_rdma::RdmaStream),
}

impl Raw {
    /// Whether the socket has something to read now.
    fn readable(&self) -> bool {
        match self {
            Raw::Tcp(s) => {
                use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
                let mut fds = [PollFd::new(std::os::fd::AsFd::as_fd(s), PollFlags::POLLIN)];
                poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
            }
            Raw::Rdma(s) => s.readable().unwrap_or(false),
        }
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Raw::Tcp(s) => s.set_read_timeout(t),
            Raw::Rdma(s) => {
                s.set_read_timeout(t);
                Ok(())
            }
        }
    }
}

/// How long a look for the backend's request for a call waits for it.
const LOOK: Duration = Duration::from_millis(1);

/// Longest a reply may stop arriving part-way when calls have no timeout.
const STALL: Duration = Duration::from_secs(30);

/// TLS settings of a `tls:` connection.
pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
}

impl TlsClient {
    /// Trusts the certificates in PEM file `ca` (the backend's own, or the
    /// authority that signed it), and no other.
    pub fn from_ca_file(ca: &Path) -> Result<TlsClient, TransportError> {
        let bad = |why: String| TransportError::Tls { why: format!("{}: {why}", ca.display()) };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(e.to_string()))? {
            roots.add(cert.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(bad("no certificate in the file".into()));
        }
        let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        Ok(TlsClient { config: Arc::new(config) })
    }
}

impl TcpTransport {
    /// Connects to `addr` (`host:port`) and opens a session, proving that
    /// we hold the key in file `key` when given (the backend's `--tcp-key`).
    /// With `tls`, the connection is TLS and the backend's certificate must
    /// name the host of `addr`. `timeout` bounds each wait for a reply.
    pub fn connect(addr: &str, tls: Option<&TlsClient>, key: Option<&Path>, timeout: Option<Duration>) -> Result<Self, TransportError> {
        let kind = if tls.is_some() { "tls" } else { "tcp" };
        let name = || format!("{kind}:{addr}");
        let auth = |source| TransportError::Auth { addr: name(), source };
        let key = key.map(ClientKey::from_file).transpose().map_err(auth)?;
        let sock = TcpStream::connect(addr).map_err(|source| TransportError::Connect { addr: name(), source })?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(OPEN_TIMEOUT))?;
        sock.set_write_timeout(Some(OPEN_TIMEOUT))?;
        let raw = sock.try_clone()?;
        let mut stream: Box<dyn Stream> = match tls {
            None => Box::new(sock),
            Some(t) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
                let server = ServerName::try_from(host.to_string())
                    .map_err(|_| TransportError::Tls { why: format!("'{host}' is not a host name or address") })?;
                let conn =
                    rustls::ClientConnection::new(t.config.clone(), server).map_err(|e| TransportError::Tls { why: e.to_string() })?;
                let mut s = rustls::StreamOwned::new(conn, sock);
                while s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock).map_err(|e| TransportError::Tls { why: format!("handshake with {}: {e}", name()) })?;
                }
                Box::new(s)
            }
        };
        tcp_auth::client_open(&mut stream, key.as_ref()).map_err(auth)?;
        raw.set_write_timeout(None)?;
        raw.set_read_timeout(timeout)?;
        Ok(TcpTransport::new(stream, Raw::Tcp(raw), timeout, kind))
    }

    /// Connects to `addr` (`host:port`) over RDMA and opens a session as
    /// [`TcpTransport::connect`] does, without TLS: the fabric is the
    /// trust boundary of RDMA, as a trusted network is of plain TCP, and
    /// the key check still proves the peer.
    pub fn connect_rdma(addr: &str, key: Option<&Path>, timeout: Option<Duration>) -> Result<Self, TransportError> {
        let name = || format!("rdma:{addr}");
        let auth = |source| TransportError::Auth { addr: name(), source };
        let key = key.map(ClientKey::from_file).transpose().map_err(auth)?;
        let sock = pvgpu_rdma::RdmaStream::connect(addr)?;
        sock.set_read_timeout(Some(OPEN_TIMEOUT));
        sock.set_write_timeout(Some(OPEN_TIMEOUT));
        let mut stream: Box<dyn Stream> = Box::new(sock.clone());
        tcp_auth::client_open(&mut stream, key.as_ref()).map_err(auth)?;
        sock.set_write_timeout(None);
        sock.set_read_timeout(timeout);
        Ok(TcpTransport::new(stream, Raw::Rdma(sock), timeout, "rdma"))
    }

    fn new(sock: Box<dyn Stream>, raw: Raw, timeout: Option<Duration>, kind: &'static str) -> TcpTransport {
        TcpTransport { sock, reader: FrameReader::new(timeout.unwrap_or(STALL)), kind, raw, timeout, out_of_step: None }
    }

    /// Fails the call about to be made if the connection went out of step
    /// while it was idle.
    fn in_step(&self) -> Result<(), TransportError> {
        match self.out_of_step {
            None => Ok(()),
            Some(OutOfStep::Stray(flags)) => Err(ProtocolError::Stray { flags }.into()),
            Some(OutOfStep::Closed) => Err(TransportError::BackendGone),
            Some(OutOfStep::Stalled) => Err(TransportError::Timeout),
        }
    }
}

fn gone(e: io::Error) -> TransportError {
    match e.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionAborted => {
            TransportError::BackendGone
        }
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => TransportError::Timeout,
        _ => TransportError::Io(e),
    }
}

fn frame_error(e: FrameError) -> TransportError {
    match e {
        FrameError::Closed => TransportError::BackendGone,
        FrameError::Idle => TransportError::Timeout,
        FrameError::Io(e) => gone(e),
        FrameError::Header(e) => TransportError::Decode(e),
    }
}

impl Transport for TcpTransport {
    fn send(&mut self, h: &Header, parts: &[&[u8]]) -> Result<(), TransportError> {
        self.in_step()?;
        write_frame(&mut self.sock, h, parts).and_then(|()| self.sock.flush()).map_err(gone)
    }

    /// The program blocks in `read` for its reply: spinning on the socket
    /// first made round trips slower, not faster (measured on the H100
    /// machine, 2026-11-26: a launch and synchronisation took 35-43 µs
    /// blocking, 39-58 µs spinning), unlike the backend's spin for its next
    /// request, which helps graph replays.
    fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Header, TransportError> {
        loop {
            let h = self.reader.read_payload(&mut self.sock, buf).map_err(frame_error)?;
            // Asked for a call while this one waits: this call is it.
            if !h.is_leave_wanted() {
                return Ok(h);
            }
        }
    }

    fn recv_into(&mut self, buf: &mut Vec<u8>, dst: &mut [u8], _spin: Option<Duration>) -> Result<(Header, bool), TransportError> {
        let mut direct = SliceSink::new(dst);
        loop {
            let mut used = false;
            // A frame is read whole or the connection fails: a payload
            // chosen for `dst` fills it exactly. A request for a call has
            // no payload, and is skipped as in `recv`.
            let h = self
                .reader
                .read_payload_choosing(&mut self.sock, |h| {
                    used = !h.is_output()
                        && !h.is_host_call()
                        && !h.is_leave_wanted()
                        && h.status.get() == 0
                        && h.payload_len.get() as usize == direct.room();
                    if used { &mut direct as &mut dyn FrameSink } else { buf as &mut dyn FrameSink }
                })
                .map_err(frame_error)?;
            if !h.is_leave_wanted() {
                return Ok((h, used));
            }
        }
    }

    fn recv_spinning(&mut self, buf: &mut Vec<u8>, _spin: Duration) -> Result<Header, TransportError> {
        self.recv(buf)
    }

    fn max_chunk(&self) -> usize {
        8 << 20
    }

    fn pipeline_depth(&self) -> usize {
        2
    }

    fn stage(&mut self, data: &[u8]) -> Result<Staged, TransportError> {
        Ok(Staged { dref: DataRef::inline(data.len()), inline: true })
    }

    fn reserve(&mut self, len: usize) -> Result<Staged, TransportError> {
        Ok(Staged { dref: DataRef::inline(len), inline: true })
    }

    fn fetch(&mut self, _s: &Staged, reply_tail: &[u8], dst: &mut [u8]) -> Result<(), TransportError> {
        if reply_tail.len() != dst.len() {
            return Err(ProtocolError::CopyLength { got: reply_tail.len(), want: dst.len() }.into());
        }
        dst.copy_from_slice(reply_tail);
        Ok(())
    }

    fn discard(&mut self, _s: &Staged) {}

    fn kind(&self) -> &'static str {
        self.kind
    }

    /// Reads what the backend sent while no call waited: its request for
    /// a call, or nothing. The look itself does not wait (it holds the
    /// connection, which the program's next call may want); only when
    /// something came is a message read, for at most [`LOOK`] (it comes
    /// whole).
    fn leave_wanted(&mut self) -> bool {
        if self.out_of_step.is_some() {
            return false;
        }
        let came = self.reader.buffered() > 0 || self.sock.holds_data() || self.raw.readable();
        if !came || self.raw.set_read_timeout(Some(LOOK)).is_err() {
            return false;
        }
        let mut payload = Vec::new();
        let read = self.reader.read_payload(&mut self.sock, &mut payload);
        if let Err(e) = self.raw.set_read_timeout(self.timeout) {
            tracing::warn!(error = %e, "cannot restore the connection's read timeout");
        }
        let fault = match read {
            Ok(h) if h.is_leave_wanted() => return true,
            Err(FrameError::Idle) => return false,
            Ok(h) => OutOfStep::Stray(h.flags.get()),
            Err(FrameError::Closed) => OutOfStep::Closed,
            Err(_) => OutOfStep::Stalled,
        };
        tracing::debug!(?fault, "the connection went out of step while no call waited");
        self.out_of_step = Some(fault);
        false
    }

    fn can_be_asked_to_leave(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvgpu_ring::cuda::CuResult;
    use pvgpu_ring::proto::Opcode;

    /// A transport over a loopback connection (past its opening) and the
    /// backend's end of it.
    fn pair() -> (TcpTransport, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let backend = listener.accept().unwrap().0;
        let raw = sock.try_clone().unwrap();
        (TcpTransport::new(Box::new(sock), Raw::Tcp(raw), Some(Duration::from_secs(5)), "tcp"), backend)
    }

    fn settle() {
        std::thread::sleep(Duration::from_millis(50));
    }

    #[test]
    fn the_backend_s_request_for_a_call_is_seen_while_idle_and_skipped_by_a_call() {
        let (mut t, mut backend) = pair();
        assert!(!t.leave_wanted(), "nothing came");
        write_frame(&mut backend, &Header::leave_wanted(), &[]).unwrap();
        settle();
        assert!(t.leave_wanted());
        assert!(!t.leave_wanted(), "taken once");
        // One that comes while a call waits is skipped: the reply follows.
        let req = Header::request(Opcode::Nop, 7, pvgpu_ring::proto::FLAG_REPLY, 0);
        t.send(&req, &[]).unwrap();
        write_frame(&mut backend, &Header::leave_wanted(), &[]).unwrap();
        write_frame(&mut backend, &req.reply(CuResult::SUCCESS, 3), &[b"abc"]).unwrap();
        let mut buf = Vec::new();
        let h = t.recv(&mut buf).unwrap();
        assert_eq!((h.request_id.get(), &buf[..]), (7, &b"abc"[..]));
    }

    #[test]
    fn anything_else_while_idle_puts_the_connection_out_of_step() {
        let (mut t, mut backend) = pair();
        let stray = Header::request(Opcode::Nop, 9, 0, 0).reply(CuResult::SUCCESS, 0);
        write_frame(&mut backend, &stray, &[]).unwrap();
        settle();
        assert!(!t.leave_wanted());
        let req = Header::request(Opcode::Nop, 10, pvgpu_ring::proto::FLAG_REPLY, 0);
        match t.send(&req, &[]) {
            Err(TransportError::Protocol(ProtocolError::Stray { flags })) => assert_eq!(flags, stray.flags.get()),
            other => panic!("a call after a stray message: {other:?}"),
        }
        // A backend that went away is the next call's error too.
        let (mut t, backend) = pair();
        drop(backend);
        settle();
        assert!(!t.leave_wanted());
        assert!(matches!(t.send(&req, &[]), Err(TransportError::BackendGone)));
    }
}
