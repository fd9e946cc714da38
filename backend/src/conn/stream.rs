//! The backend's side of a stream connection (TCP, or the supervisor's
//! relay of TLS and RDMA): framed messages, bulk data inline.

use super::{Conn, ConnError, LeaveHint, check_stop};
use crate::staging::Staging;
use pvgpu_ring::frame::{FrameError, FrameReader, FrameSink};
use pvgpu_ring::proto::Header;
use pvgpu_ring::region::DataArea;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// What a [`TcpConn`] reads frames from: a TCP socket, or the worker's end
/// of a TLS relay.
trait FrameStream: Read + Write + AsFd + Send {}
impl<T: Read + Write + AsFd + Send> FrameStream for T {}

/// A connection over a TCP stream (or the supervisor's TLS relay): framed
/// messages, bulk data inline. The session's thread looks for its next
/// request for a short spin (a program's next call often follows at once:
/// a synchronisation after a launch), then blocks in `read` (a small
/// request arrives in one call), waking every [`TICK`] to see whether it
/// must stop.
pub struct TcpConn {
    sock: Box<dyn FrameStream>,
    reader: FrameReader,
    /// Where large requests are read and copies' replies written.
    staging: Option<Staging>,
    /// Whether the last request received is in the staging.
    staged: bool,
    idle_timeout: Option<Duration>,
    /// How long it looks for the next request before it blocks.
    spin: Duration,
    /// Asks the frontend for a call when a checkpoint is ordered while the
    /// session waits for one ([`pvgpu_ring::proto::FLAG_LEAVE_WANTED`]),
    /// once its hello said it reads such messages.
    leave: LeaveHint,
    leave_understood: bool,
}

/// How often a session waiting for its next request looks at its stop
/// flag and its idle time (the stream's read timeout).
const TICK: Duration = Duration::from_millis(200);
/// Longest a frontend may stop in the middle of a frame before it loses
/// its session; also how long the supervisor's relays (TLS, RDMA) wait for
/// a peer that stops reading.
pub(crate) const STALL: Duration = Duration::from_secs(30);

impl TcpConn {
    /// Wraps a stream that passed its opening. A frontend that sends
    /// nothing for `idle_timeout` loses its session.
    pub fn new(sock: TcpStream, idle_timeout: Option<Duration>, spin: Duration) -> io::Result<Self> {
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(TICK))?;
        sock.set_write_timeout(Some(STALL))?;
        Ok(TcpConn::wrap(Box::new(sock), idle_timeout, spin))
    }

    /// Wraps the worker's end of the supervisor's TLS relay.
    pub fn relayed(sock: std::os::unix::net::UnixStream, idle_timeout: Option<Duration>, spin: Duration) -> io::Result<Self> {
        sock.set_read_timeout(Some(TICK))?;
        sock.set_write_timeout(Some(STALL))?;
        Ok(TcpConn::wrap(Box::new(sock), idle_timeout, spin))
    }

    fn wrap(sock: Box<dyn FrameStream>, idle_timeout: Option<Duration>, spin: Duration) -> TcpConn {
        // Without staging (no memory for it), requests are read into the
        // session's buffer, as small ones always are.
        let staging = Staging::new().inspect_err(|e| tracing::warn!(error = %e, "no staging for the connection")).ok();
        TcpConn {
            sock,
            reader: FrameReader::new(STALL),
            staging,
            staged: false,
            idle_timeout,
            spin,
            leave: LeaveHint::default(),
            leave_understood: false,
        }
    }

    /// Asks the frontend for a call when the session's checkpoint flag
    /// `ordered` is set while it waits (with a frontend that reads such
    /// messages, [`Conn::leave_frames_understood`]).
    pub fn with_leave_hint(mut self, ordered: Option<Arc<AtomicBool>>) -> Self {
        self.leave = LeaveHint { ordered, asked: false };
        self
    }

    /// Sends the request for a call once per order.
    fn ask_to_leave(&mut self) -> Result<(), ConnError> {
        if self.leave_understood && self.leave.due() {
            tracing::debug!("asking the frontend for a call (a checkpoint is ordered)");
            write(&mut self.sock, &Header::leave_wanted(), &[])?;
        }
        Ok(())
    }
}

/// Writes one message to a stream connection.
fn write(sock: &mut Box<dyn FrameStream>, h: &Header, parts: &[&[u8]]) -> Result<(), ConnError> {
    pvgpu_ring::frame::write_frame(sock, h, parts).map_err(|e| match e.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => ConnError::PeerGone,
        _ => ConnError::Io(e),
    })?;
    sock.flush()?;
    Ok(())
}

/// Waits up to `timeout` for `sock` to have something to read (an
/// interrupted wait reads as "not yet").
pub(crate) fn readable(sock: &impl AsFd, timeout: Duration) -> io::Result<bool> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX)) {
        Ok(n) => Ok(n > 0),
        Err(nix::Error::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl Conn for TcpConn {
    fn recv(&mut self, buf: &mut Vec<u8>, stop: &AtomicBool) -> Result<(), ConnError> {
        let since = Instant::now();
        if !self.reader.frame_ready() {
            pvgpu_ring::frame::spin_until_readable(self.sock.as_fd(), self.spin);
        }
        self.staged = false;
        loop {
            self.ask_to_leave()?;
            let (staging, staged) = (&mut self.staging, &mut self.staged);
            let read = self.reader.read_choosing(&mut self.sock, |h| match staging {
                Some(st) if Staging::takes(h) => {
                    *staged = true;
                    st as &mut dyn FrameSink
                }
                _ => buf as &mut dyn FrameSink,
            });
            match read {
                Ok(_) => return Ok(()),
                Err(FrameError::Idle) => {
                    check_stop(stop)?;
                    if self.idle_timeout.is_some_and(|t| since.elapsed() >= t) {
                        return Err(ConnError::Idle);
                    }
                }
                Err(FrameError::Closed) => return Err(ConnError::PeerGone),
                Err(FrameError::Io(e)) => return Err(e.into()),
                Err(FrameError::Header(e)) => return Err(e.into()),
            }
        }
    }

    fn release(&mut self) -> Result<(), ConnError> {
        Ok(())
    }

    fn send(&mut self, h: &Header, payload: &[u8], stop: &AtomicBool) -> Result<(), ConnError> {
        self.send_staged(h, payload, 0, stop)
    }

    fn received<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        match &self.staging {
            Some(st) if self.staged => st.request(),
            _ => buf,
        }
    }

    fn unstage(&mut self, buf: &mut Vec<u8>) {
        if let (Some(st), true) = (&self.staging, self.staged) {
            buf.clear();
            buf.extend_from_slice(st.request());
            self.staged = false;
        }
    }

    fn send_staged(&mut self, h: &Header, payload: &[u8], staged: usize, _stop: &AtomicBool) -> Result<(), ConnError> {
        let tail = match &self.staging {
            Some(st) if staged > 0 => st.reply(staged),
            _ => &[],
        };
        if tail.len() != staged {
            return Err(ConnError::Io(io::Error::other("a staged reply longer than the staging")));
        }
        write(&mut self.sock, h, &[payload, tail])
    }

    fn area(&self) -> Option<&DataArea> {
        None
    }

    fn staging(&mut self) -> Option<&mut Staging> {
        self.staging.as_mut()
    }

    fn leave_frames_understood(&mut self) {
        self.leave_understood = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Over a stream the same order sends one `FLAG_LEAVE_WANTED` message,
    /// and only to a frontend whose hello said that it reads them.
    #[test]
    fn an_order_asks_a_stream_frontend_that_reads_such_messages() {
        use pvgpu_ring::frame::FrameReader;
        for understood in [false, true] {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let ordered = Arc::new(AtomicBool::new(false));
            let mut conn = TcpConn::new(listener.accept().unwrap().0, None, Duration::ZERO).unwrap().with_leave_hint(Some(ordered.clone()));
            if understood {
                conn.leave_frames_understood();
            }
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let waiting = std::thread::spawn(move || conn.recv(&mut Vec::new(), &s));
            std::thread::sleep(Duration::from_millis(300));
            ordered.store(true, Ordering::SeqCst);
            client.set_read_timeout(Some(Duration::from_millis(800))).unwrap();
            let mut reader = FrameReader::new(Duration::from_secs(1));
            let mut payload = Vec::new();
            let first = reader.read_payload(&mut client, &mut payload);
            if understood {
                let h = first.unwrap();
                assert!(h.is_leave_wanted() && h.payload_len.get() == 0, "{h:?}");
            } else {
                assert!(first.is_err(), "a frontend that did not say it reads them is sent nothing");
            }
            // Once per order.
            assert!(reader.read_payload(&mut client, &mut payload).is_err());
            stop.store(true, Ordering::SeqCst);
            assert!(matches!(waiting.join().unwrap(), Err(ConnError::Shutdown)));
        }
    }
}
