//! The backend's side of a connection: receive a request (copied out of
//! shared memory or read off the socket), mark it done, send a reply.

use pvgpu_ring::channel::{ChannelError, Consumer, Producer, Sent};
use pvgpu_ring::layout::{Geometry, LayoutError, MAX_RING_RECORD, attach_region};
use pvgpu_ring::notify::{Notifier, NotifyError, Step, WaitError, Waiter};
use pvgpu_ring::proto::{DecodeError, HEADER_LEN, Header};
use pvgpu_ring::region::{DataArea, RegionChannel, SharedRegion};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Why a connection stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The frontend closed its end or died.
    #[error("Frontend went away")]
    PeerGone,
    /// The backend is shutting down.
    #[error("Backend shutting down")]
    Shutdown,
    /// The frontend broke the ring protocol.
    #[error("Frontend broke the ring")]
    Channel(#[from] ChannelError),
    /// The frontend sent a malformed frame.
    #[error("Malformed frame")]
    Frame(#[from] DecodeError),
    /// The OS failed us.
    #[error("I/O error on the connection")]
    Io(#[from] io::Error),
}

impl From<NotifyError> for ConnError {
    fn from(e: NotifyError) -> Self {
        match e {
            NotifyError::PeerGone => ConnError::PeerGone,
            NotifyError::Io(e) => ConnError::Io(e),
        }
    }
}

impl From<WaitError<ConnError>> for ConnError {
    fn from(e: WaitError<ConnError>) -> Self {
        match e {
            WaitError::Check(e) => e,
            WaitError::Notify(e) => e.into(),
            WaitError::TimedOut => ConnError::Io(io::ErrorKind::TimedOut.into()),
        }
    }
}

/// A connection as the serving loop sees it.
pub trait Conn {
    /// Waits for the next request and leaves header and payload in `buf`.
    fn recv(&mut self, buf: &mut Vec<u8>, stop: &AtomicBool) -> Result<(), ConnError>;
    /// Marks every request received so far as done: its ring space and any
    /// data-area bytes it named may be reused by the frontend.
    fn release(&mut self) -> Result<(), ConnError>;
    /// Sends a reply.
    fn send(&mut self, h: &Header, payload: &[u8], stop: &AtomicBool) -> Result<(), ConnError>;
    /// The data area, for transports that have one.
    fn area(&self) -> Option<&DataArea>;
}

/// A connection over a shared region: request and response channels, data
/// area, doorbell.
pub struct RingConn {
    req: Consumer<RegionChannel>,
    rsp: Producer<RegionChannel>,
    area: DataArea,
    notifier: Box<dyn Notifier>,
    spin: Duration,
    _region: SharedRegion,
}

impl RingConn {
    /// Attaches to a region the frontend prepared, with the negotiated
    /// geometry.
    pub fn new(region: SharedRegion, g: &Geometry, notifier: Box<dyn Notifier>, spin: Duration) -> Result<Self, LayoutError> {
        let ep = attach_region(&region, g)?;
        Ok(RingConn {
            req: Consumer::new(ep.req, MAX_RING_RECORD),
            rsp: Producer::new(ep.rsp, MAX_RING_RECORD),
            area: ep.data,
            notifier,
            spin,
            _region: region,
        })
    }
}

fn check_stop(stop: &AtomicBool) -> Result<(), ConnError> {
    if stop.load(Ordering::Relaxed) { Err(ConnError::Shutdown) } else { Ok(()) }
}

impl Conn for RingConn {
    fn recv(&mut self, buf: &mut Vec<u8>, stop: &AtomicBool) -> Result<(), ConnError> {
        if self.req.try_recv(buf)? {
            return Ok(());
        }
        self.release()?;
        let (req, notifier) = (&mut self.req, &*self.notifier);
        Waiter::new(notifier, self.spin).wait_until(|step| -> Result<Option<()>, ConnError> {
            match step {
                Step::Check => Ok(req.try_recv(buf)?.then_some(())),
                Step::Arm => {
                    req.prepare_wait()?;
                    Ok(None)
                }
                Step::Tick => {
                    check_stop(stop)?;
                    Ok(None)
                }
            }
        })?;
        Ok(())
    }

    fn release(&mut self) -> Result<(), ConnError> {
        if self.req.release() {
            self.notifier.notify()?;
        }
        Ok(())
    }

    fn send(&mut self, h: &Header, payload: &[u8], stop: &AtomicBool) -> Result<(), ConnError> {
        use zerocopy::IntoBytes;
        let parts: [&[u8]; 2] = [h.as_bytes(), payload];
        let (rsp, notifier) = (&mut self.rsp, &*self.notifier);
        let notify = match rsp.try_send(&parts)? {
            Sent::Yes { notify } => notify,
            Sent::Full => Waiter::new(notifier, self.spin).wait_until(|step| -> Result<Option<bool>, ConnError> {
                match step {
                    Step::Check => Ok(match rsp.try_send(&parts)? {
                        Sent::Yes { notify } => Some(notify),
                        Sent::Full => None,
                    }),
                    Step::Arm => {
                        rsp.prepare_wait_for_space()?;
                        Ok(None)
                    }
                    Step::Tick => {
                        check_stop(stop)?;
                        Ok(None)
                    }
                }
            })?,
        };
        if notify {
            self.notifier.notify()?;
        }
        Ok(())
    }

    fn area(&self) -> Option<&DataArea> {
        Some(&self.area)
    }
}

/// A connection over a TCP stream: framed messages, bulk data inline.
pub struct TcpConn {
    sock: TcpStream,
}

impl TcpConn {
    /// Wraps an accepted stream.
    pub fn new(sock: TcpStream) -> io::Result<Self> {
        sock.set_nodelay(true)?;
        // A frontend that stops in the middle of a frame loses its session.
        sock.set_read_timeout(Some(Duration::from_secs(30)))?;
        sock.set_write_timeout(Some(Duration::from_secs(30)))?;
        Ok(TcpConn { sock })
    }
}

fn readable(sock: &TcpStream, timeout: Duration) -> io::Result<bool> {
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
        while !readable(&self.sock, Duration::from_millis(200))? {
            check_stop(stop)?;
        }
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        let mut got = 0;
        while got < HEADER_LEN {
            match self.sock.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Err(ConnError::PeerGone),
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Err(ConnError::PeerGone),
                Err(e) => return Err(e.into()),
            }
        }
        let h = Header::parse(buf)?;
        let len = h.payload_len.get() as usize;
        buf.resize(HEADER_LEN + len, 0);
        self.sock.read_exact(&mut buf[HEADER_LEN..])?;
        Ok(())
    }

    fn release(&mut self) -> Result<(), ConnError> {
        Ok(())
    }

    fn send(&mut self, h: &Header, payload: &[u8], _stop: &AtomicBool) -> Result<(), ConnError> {
        pvgpu_ring::frame::write_frame(&mut self.sock, h, &[payload]).map_err(|e| match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => ConnError::PeerGone,
            _ => ConnError::Io(e),
        })?;
        self.sock.flush()?;
        Ok(())
    }

    fn area(&self) -> Option<&DataArea> {
        None
    }
}
