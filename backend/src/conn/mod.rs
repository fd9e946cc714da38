//! The backend's side of a connection: receive a request (copied out of
//! shared memory or read off the socket), mark it done, send a reply.

use pvgpu_ring::channel::{ChannelError, Consumer, Producer, Sent};
use pvgpu_ring::layout::{Geometry, LayoutError, MAX_RING_RECORD, attach_region};
use pvgpu_ring::notify::{Notifier, NotifyError, Step, WaitError, Waiter};
use pvgpu_ring::proto::{DecodeError, Header};
use pvgpu_ring::region::{DataArea, RegionChannel, SharedRegion};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod stream;
pub use stream::TcpConn;
pub(crate) use stream::{STALL, readable};

/// Why a connection stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The frontend closed its end or died.
    #[error("Frontend went away")]
    PeerGone,
    /// The backend is shutting down.
    #[error("Backend shutting down")]
    Shutdown,
    /// The frontend sent nothing for the idle timeout.
    #[error("Frontend idle for too long")]
    Idle,
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
            WaitError::TimedOut => ConnError::Idle,
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
    /// The request [`Conn::recv`] received: `buf`, or the connection's
    /// own staging where it read a large one.
    fn received<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        buf
    }
    /// Moves a request received into the staging to `buf`, where the
    /// caller keeps it across further receives.
    fn unstage(&mut self, _buf: &mut Vec<u8>) {}
    /// Sends a reply whose payload is `payload` followed by `staged` bytes
    /// of the connection's staging that a handler wrote
    /// ([`Conn::staging`]).
    fn send_staged(&mut self, h: &Header, payload: &[u8], staged: usize, stop: &AtomicBool) -> Result<(), ConnError> {
        debug_assert_eq!(staged, 0, "a connection without staging has no staged reply");
        self.send(h, payload, stop)
    }
    /// The data area, for transports that have one.
    fn area(&self) -> Option<&DataArea>;
    /// Page-locked staging of a stream connection, if it has one.
    fn staging(&mut self) -> Option<&mut crate::staging::Staging> {
        None
    }
    /// The largest reply payload the connection carries.
    fn max_reply(&self) -> usize {
        pvgpu_ring::proto::MAX_PAYLOAD
    }
    /// The serving thread was moved to other CPUs: how it waits may change
    /// ([`pvgpu_ring::notify::yield_after`]).
    fn cpus_changed(&mut self) {}
    /// The frontend's hello (or resume) said that it reads
    /// [`pvgpu_ring::proto::FLAG_LEAVE_WANTED`] messages; transports that
    /// ask otherwise (the rings' control byte) ignore it.
    fn leave_frames_understood(&mut self) {}
}

/// A connection over a shared region: request and response channels, data
/// area, doorbell.
pub struct RingConn {
    req: Consumer<RegionChannel>,
    rsp: Producer<RegionChannel>,
    area: DataArea,
    notifier: Box<dyn Notifier>,
    spin: Duration,
    /// See [`pvgpu_ring::notify::yield_after`].
    yield_after: Duration,
    idle: IdleWakes,
    idle_timeout: Option<Duration>,
    leave: LeaveHint,
    region: SharedRegion,
}

/// Asks the frontend for a call when a checkpoint is ordered while the
/// session waits for one ([`pvgpu_ring::layout::LEAVE_WANTED`]): the
/// session's checkpoint flag, and whether the byte was set for this order.
#[derive(Default)]
struct LeaveHint {
    ordered: Option<Arc<AtomicBool>>,
    asked: bool,
}

impl LeaveHint {
    /// Whether to ask now: once per order.
    fn due(&mut self) -> bool {
        let Some(ordered) = &self.ordered else { return false };
        match (ordered.load(Ordering::Relaxed), self.asked) {
            (true, false) => {
                self.asked = true;
                return true;
            }
            (false, true) => self.asked = false,
            _ => {}
        }
        false
    }

    /// Sets the byte once per order. The doorbell is not rung: nothing of
    /// the frontend waits on it while its program makes no call, and its
    /// library looks at the byte a few times a second instead.
    fn look(&mut self, region: &SharedRegion) -> Result<(), ConnError> {
        if self.due() {
            region.write_byte(pvgpu_ring::layout::LEAVE_WANTED, 1).map_err(io::Error::other)?;
        }
        Ok(())
    }
}

/// Counts wake-ups that found no request. A peer ringing the doorbell (or
/// the event channel) without posting anything would otherwise keep the
/// session's thread busy; past [`IdleWakes::PER_SECOND`] in a second, the
/// session sleeps [`IdleWakes::PAUSE`] after each, which bounds what a
/// flood costs the host to about a thousand wake-ups a second.
#[derive(Debug)]
struct IdleWakes {
    window: Instant,
    count: u32,
    total: u64,
}

impl IdleWakes {
    const PER_SECOND: u32 = 1000;
    const PAUSE: Duration = Duration::from_millis(1);

    fn new() -> Self {
        IdleWakes { window: Instant::now(), count: 0, total: 0 }
    }

    fn note(&mut self) {
        self.total += 1;
        if self.window.elapsed() >= Duration::from_secs(1) {
            self.window = Instant::now();
            self.count = 0;
        }
        self.count += 1;
        if self.count > Self::PER_SECOND {
            std::thread::sleep(Self::PAUSE);
        }
    }
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
            yield_after: pvgpu_ring::notify::yield_after(spin),
            idle: IdleWakes::new(),
            idle_timeout: None,
            leave: LeaveHint::default(),
            region,
        })
    }
}

fn check_stop(stop: &AtomicBool) -> Result<(), ConnError> {
    if stop.load(Ordering::Relaxed) { Err(ConnError::Shutdown) } else { Ok(()) }
}

impl RingConn {
    /// Ends the session (with [`ConnError::Idle`]) when no request comes
    /// for `t`.
    pub fn with_idle_timeout(mut self, t: Option<Duration>) -> Self {
        self.idle_timeout = t;
        self
    }

    /// While the session waits for a request, a checkpoint ordered through
    /// `ordered` (the session's nudge) asks the frontend for a call.
    pub fn with_leave_hint(mut self, ordered: Option<Arc<AtomicBool>>) -> Self {
        self.leave.ordered = ordered;
        self
    }

    /// Wake-ups so far that found no request.
    pub fn idle_wakes(&self) -> u64 {
        self.idle.total
    }
}

impl Conn for RingConn {
    fn recv(&mut self, buf: &mut Vec<u8>, stop: &AtomicBool) -> Result<(), ConnError> {
        if self.req.try_recv(buf)? {
            return Ok(());
        }
        self.release()?;
        let (req, notifier, idle, leave, region) = (&mut self.req, &*self.notifier, &mut self.idle, &mut self.leave, &self.region);
        leave.look(region)?;
        let mut woke = false;
        let mut waiter = Waiter::new(notifier, self.spin);
        waiter.yield_after = self.yield_after;
        waiter.deadline = self.idle_timeout.map(|t| Instant::now() + t);
        waiter.wait_until(|step| -> Result<Option<()>, ConnError> {
            match step {
                Step::Check => {
                    let got = req.try_recv(buf)?;
                    if !got && std::mem::take(&mut woke) {
                        idle.note();
                    }
                    Ok(got.then_some(()))
                }
                Step::Arm => {
                    req.prepare_wait()?;
                    Ok(None)
                }
                Step::Tick => {
                    check_stop(stop)?;
                    leave.look(region)?;
                    woke = true;
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
            Sent::Full => Waiter { yield_after: self.yield_after, ..Waiter::new(notifier, self.spin) }.wait_until(
                |step| -> Result<Option<bool>, ConnError> {
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
                },
            )?,
        };
        if notify {
            self.notifier.notify()?;
        }
        Ok(())
    }

    fn area(&self) -> Option<&DataArea> {
        Some(&self.area)
    }

    fn max_reply(&self) -> usize {
        (self.rsp.max_record() as usize).saturating_sub(pvgpu_ring::proto::HEADER_LEN)
    }

    fn cpus_changed(&mut self) {
        self.yield_after = pvgpu_ring::notify::yield_after(self.spin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use pvgpu_ring::local::{client_handshake, server_handshake};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    /// A frontend ringing the doorbell without posting requests costs the
    /// backend a bounded number of wake-ups.
    /// A small local ring: the frontend's side and the session's
    /// connection.
    fn ring() -> (pvgpu_ring::local::ClientSide, RingConn) {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 4096 };
        let t = std::thread::spawn(move || server_handshake(b, 1 << 20, false).unwrap());
        let client = client_handshake(a, &g).unwrap();
        let side = t.join().unwrap();
        let conn = RingConn::new(side.region, &side.geometry, Box::new(side.notifier), Duration::from_micros(10)).unwrap();
        (client, conn)
    }

    #[test]
    fn doorbell_flood_is_throttled() {
        let (client, mut conn) = ring();
        let stop = Arc::new(AtomicBool::new(false));
        let flooding = Arc::new(AtomicBool::new(true));
        let f = flooding.clone();
        let flood = std::thread::spawn(move || {
            while f.load(Ordering::Relaxed) {
                let _ = client.notifier.notify();
            }
        });
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            s.store(true, Ordering::SeqCst);
        });
        let mut buf = Vec::new();
        assert!(matches!(conn.recv(&mut buf, &stop), Err(ConnError::Shutdown)));
        flooding.store(false, Ordering::Relaxed);
        flood.join().unwrap();
        // 2 s: a thousand free wake-ups a second, then one per millisecond.
        assert!(conn.idle_wakes() < 5000, "{} idle wake-ups in 2 s", conn.idle_wakes());
        assert!(conn.idle_wakes() > 100, "the flood reached the session");
    }

    /// A checkpoint ordered while the session waits for a request sets the
    /// frontend's "leave wanted" byte, once per order, within a wait slice.
    #[test]
    fn an_order_asks_a_waiting_frontend_for_a_call() {
        let (client, conn) = ring();
        let ordered = Arc::new(AtomicBool::new(false));
        let mut conn = conn.with_leave_hint(Some(ordered.clone()));
        let wanted = || client.region.read_byte(pvgpu_ring::layout::LEAVE_WANTED).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (o, s) = (ordered.clone(), stop.clone());
        let waiting = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let r = conn.recv(&mut buf, &s);
            (conn, r)
        });
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(wanted(), 0, "no order yet");
        o.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        while wanted() == 0 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(wanted(), 1, "asked within a wait slice");
        // The frontend takes the request; the same order does not ask again.
        client.region.write_byte(pvgpu_ring::layout::LEAVE_WANTED, 0).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(wanted(), 0);
        stop.store(true, Ordering::SeqCst);
        let (_conn, r) = waiting.join().unwrap();
        assert!(matches!(r, Err(ConnError::Shutdown)));
    }
}
