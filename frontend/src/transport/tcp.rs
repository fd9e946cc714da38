//! The TCP transport: framed messages, bulk data inline.

use super::{Staged, Transport};
use crate::error::{ProtocolError, TransportError};
use pvgpu_ring::frame::{FrameError, read_frame, write_frame};
use pvgpu_ring::proto::{DataRef, Header};
use pvgpu_ring::tcp_auth::{self, TcpKey};
use std::io;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// Longest the opening (key check) may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// A TCP connection to a backend.
pub struct TcpTransport {
    sock: TcpStream,
}

impl TcpTransport {
    /// Connects to `addr` (`host:port`) and opens a session, proving that
    /// we hold the key in file `key` when given (the backend's `--tcp-key`).
    /// `timeout` bounds each wait for a reply.
    pub fn connect(addr: &str, key: Option<&Path>, timeout: Option<Duration>) -> Result<Self, TransportError> {
        let name = || format!("tcp:{addr}");
        let auth = |source| TransportError::Auth { addr: name(), source };
        let key = key.map(TcpKey::from_file).transpose().map_err(auth)?;
        let mut sock = TcpStream::connect(addr).map_err(|source| TransportError::Connect { addr: name(), source })?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(OPEN_TIMEOUT))?;
        sock.set_write_timeout(Some(OPEN_TIMEOUT))?;
        tcp_auth::client_open(&mut sock, key.as_ref()).map_err(auth)?;
        sock.set_write_timeout(None)?;
        sock.set_read_timeout(timeout)?;
        Ok(TcpTransport { sock })
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

impl Transport for TcpTransport {
    fn send(&mut self, h: &Header, parts: &[&[u8]]) -> Result<(), TransportError> {
        write_frame(&mut self.sock, h, parts).map_err(gone)
    }

    fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Header, TransportError> {
        match read_frame(&mut self.sock, buf) {
            Ok(h) => Ok(h),
            Err(FrameError::Closed) => Err(TransportError::BackendGone),
            Err(FrameError::Io(e)) => Err(gone(e)),
            Err(FrameError::Header(e)) => Err(TransportError::Decode(e)),
        }
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
        "tcp"
    }
}
