//! Event channels through `/dev/xen/evtchn`, and the ring doorbell built on
//! them.
//!
//! An interdomain event channel is made in two steps: one side allocates an
//! unbound port that a named domain may connect to
//! ([`EvtChn::bind_unbound_port`]) and publishes its number (in XenStore);
//! the other side binds to it ([`EvtChn::bind_interdomain`]). Either side
//! then signals the other with [`EvtChn::notify`] on its own local port.
//!
//! How the device delivers events: when an event arrives on a bound port,
//! the kernel masks the port and queues its number; `read` returns queued
//! port numbers as `u32`s, and the port stays masked until its number is
//! written back to the device ([`EvtChn::unmask`]). An event that arrives
//! while the port is masked stays pending in Xen and is delivered on unmask,
//! so none is lost. If nobody reads, the kernel's queue (one page of ports)
//! overflows: reads fail with `EFBIG` and poll reports `POLLERR` until
//! [`EvtChn::reset`].
//!
//! [`EvtchnNotifier`] implements the ring's [`Notifier`] on one port.

use crate::XenError;
use crate::abi::{
    EvtchnBindInterdomain, EvtchnBindUnboundPort, EvtchnPort, IOCTL_EVTCHN_BIND_INTERDOMAIN, IOCTL_EVTCHN_BIND_UNBOUND_PORT,
    IOCTL_EVTCHN_NOTIFY, IOCTL_EVTCHN_RESET, IOCTL_EVTCHN_UNBIND,
};
use crate::sys;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::PollFlags;
use pvgpu_ring::notify::{Notifier, NotifyError, Wake};
use std::ffi::c_void;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// The device node.
pub const EVTCHN_PATH: &str = "/dev/xen/evtchn";

const HINT_MISSING: &str = "load the xen-evtchn module (modprobe xen-evtchn); the device exists only when Linux runs under Xen";

/// An open `/dev/xen/evtchn` (non-blocking). Closing it unbinds every port
/// bound through it.
#[derive(Debug)]
pub struct EvtChn {
    fd: OwnedFd,
}

impl EvtChn {
    /// Opens `/dev/xen/evtchn`.
    pub fn open() -> Result<Self, XenError> {
        Ok(EvtChn::from_fd(sys::open_device(EVTCHN_PATH, OFlag::O_NONBLOCK, HINT_MISSING)?))
    }

    /// Uses a descriptor the caller opened on `/dev/xen/evtchn` (or a
    /// stand-in, in tests). It should be non-blocking; reads are preceded by
    /// a poll either way.
    pub fn from_fd(fd: OwnedFd) -> Self {
        EvtChn { fd }
    }

    fn ioctl_port(&self, req: u32, op: &'static str, arg: *mut c_void) -> Result<u32, XenError> {
        // SAFETY: every caller passes a pointer to the live struct that
        // `req` encodes.
        let r = unsafe { sys::ioctl(self.fd.as_fd(), req, arg) };
        match r {
            Ok(port) => Ok(port as u32),
            Err(errno) => Err(XenError::Ioctl { device: EVTCHN_PATH, op, errno, hint: ioctl_hint(req, errno) }),
        }
    }

    /// Allocates a local port that domain `remote_domid` may bind to, and
    /// binds it here. Returns the local port, which the peer passes to its
    /// [`EvtChn::bind_interdomain`].
    pub fn bind_unbound_port(&self, remote_domid: u16) -> Result<u32, XenError> {
        let mut op = EvtchnBindUnboundPort { remote_domain: u32::from(remote_domid) };
        let port = self.ioctl_port(IOCTL_EVTCHN_BIND_UNBOUND_PORT, "IOCTL_EVTCHN_BIND_UNBOUND_PORT", (&raw mut op).cast())?;
        tracing::debug!(remote_domid, port, "allocated unbound event channel");
        Ok(port)
    }

    /// Connects to the unbound port `remote_port` that domain
    /// `remote_domid` allocated for this domain. Returns the local port.
    pub fn bind_interdomain(&self, remote_domid: u16, remote_port: u32) -> Result<u32, XenError> {
        let mut op = EvtchnBindInterdomain { remote_domain: u32::from(remote_domid), remote_port };
        let port = self.ioctl_port(IOCTL_EVTCHN_BIND_INTERDOMAIN, "IOCTL_EVTCHN_BIND_INTERDOMAIN", (&raw mut op).cast())?;
        tracing::debug!(remote_domid, remote_port, port, "bound interdomain event channel");
        Ok(port)
    }

    /// Signals the other end of local port `port`.
    pub fn notify(&self, port: u32) -> Result<(), XenError> {
        let mut op = EvtchnPort { port };
        self.ioctl_port(IOCTL_EVTCHN_NOTIFY, "IOCTL_EVTCHN_NOTIFY", (&raw mut op).cast()).map(drop)
    }

    /// Unbinds local port `port` (closing the channel).
    pub fn unbind(&self, port: u32) -> Result<(), XenError> {
        let mut op = EvtchnPort { port };
        self.ioctl_port(IOCTL_EVTCHN_UNBIND, "IOCTL_EVTCHN_UNBIND", (&raw mut op).cast())?;
        tracing::debug!(port, "unbound event channel");
        Ok(())
    }

    /// Empties the queue of pending ports and clears an overflow. Ports that
    /// were queued stay masked: unmask them (and re-check whatever they
    /// guard) afterwards.
    pub fn reset(&self) -> Result<(), XenError> {
        self.ioctl_port(IOCTL_EVTCHN_RESET, "IOCTL_EVTCHN_RESET", std::ptr::null_mut()).map(drop)
    }

    /// Re-enables delivery on `port` after its number was read.
    pub fn unmask(&self, port: u32) -> Result<(), XenError> {
        self.unmask_all(&[port])
    }

    /// Re-enables delivery on several ports with one write.
    pub fn unmask_all(&self, ports: &[u32]) -> Result<(), XenError> {
        if ports.is_empty() {
            return Ok(());
        }
        let bytes: Vec<u8> = ports.iter().flat_map(|p| p.to_ne_bytes()).collect();
        loop {
            match nix::unistd::write(&self.fd, &bytes) {
                Ok(n) if n == bytes.len() => return Ok(()),
                Ok(_) => return Err(XenError::Sys { what: "unmasking event-channel ports (short write)", errno: Errno::EIO }),
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(XenError::Sys { what: "unmasking event-channel ports", errno }),
            }
        }
    }

    /// Reads whatever pending ports are queued, without waiting, into
    /// `ports`; returns how many. The ports stay masked until unmasked.
    pub fn read_ready(&self, ports: &mut [u32]) -> Result<usize, XenError> {
        let mut bytes = vec![0u8; ports.len().min(1024) * 4];
        if bytes.is_empty() {
            return Ok(0);
        }
        let n = loop {
            match nix::unistd::read(&self.fd, &mut bytes) {
                Ok(0) => return Err(XenError::Sys { what: "reading pending event-channel ports (end of file)", errno: Errno::EPIPE }),
                Ok(n) => break n,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return Ok(0),
                Err(Errno::EFBIG) => return Err(XenError::EvtchnOverflow),
                Err(errno) => return Err(XenError::Sys { what: "reading pending event-channel ports", errno }),
            }
        };
        if n % 4 != 0 {
            tracing::warn!(bytes = n, "event-channel read returned a partial port; ignoring the tail");
        }
        let count = n / 4;
        for (dst, chunk) in ports.iter_mut().zip(bytes[..count * 4].chunks_exact(4)) {
            *dst = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        Ok(count)
    }

    /// Waits up to `timeout` (`None`: forever) for a pending port and reads
    /// one. The port stays masked until [`EvtChn::unmask`]. Returns `None`
    /// on timeout.
    pub fn read_pending(&self, timeout: Option<Duration>) -> Result<Option<u32>, XenError> {
        let deadline = sys::deadline(timeout);
        loop {
            let ev = sys::poll_until(self.fd.as_fd(), PollFlags::POLLIN, deadline)
                .map_err(|errno| XenError::Sys { what: "polling /dev/xen/evtchn", errno })?;
            if ev.is_empty() {
                return Ok(None);
            }
            let mut port = [0u32; 1];
            if self.read_ready(&mut port)? == 1 {
                return Ok(Some(port[0]));
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Ok(None);
            }
        }
    }
}

impl AsFd for EvtChn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn ioctl_hint(req: u32, errno: Errno) -> &'static str {
    match (req, errno) {
        (IOCTL_EVTCHN_BIND_INTERDOMAIN, Errno::EINVAL | Errno::ESRCH | Errno::EPERM) => {
            "check the remote domain and port: the port must be one that domain allocated unbound for this domain, and not yet bound"
        }
        (IOCTL_EVTCHN_BIND_UNBOUND_PORT, Errno::ESRCH) => "no such remote domain",
        (_, Errno::ENOTCONN) => "the port is not bound through this descriptor",
        (_, Errno::ENOSPC | Errno::EMFILE) => "out of event channels for this domain",
        _ => "",
    }
}

/// A liveness check for [`EvtchnNotifier`]: returns `false` once the peer is
/// known to be gone.
pub type Liveness = Arc<dyn Fn() -> bool + Send + Sync>;

/// The ring doorbell over one interdomain event channel.
///
/// `notify` signals the peer; `wait` blocks until the port fires or the
/// timeout passes, then reads the pending ports and unmasks them. Dropping
/// it unbinds the port.
///
/// Event channels cannot tell that the peer died: Xen closes the other end
/// silently and notifications go nowhere. A dead peer is detected through
/// XenStore instead (its xenbus `state` going to Closing/Closed, or its
/// domain vanishing from `@releaseDomain`), done by whoever watches
/// XenStore. That party can hand the notifier a cheap check with
/// [`EvtchnNotifier::with_liveness`] (for example reading an `AtomicBool`
/// its watch thread clears); `wait` then returns
/// [`NotifyError::PeerGone`] after any wake-up or timeout at which the check
/// says the peer is gone. Since the ring's `Waiter` blocks in slices, that
/// bounds how long a dead peer goes unnoticed.
pub struct EvtchnNotifier {
    evtchn: EvtChn,
    port: u32,
    alive: Option<Liveness>,
}

impl std::fmt::Debug for EvtchnNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvtchnNotifier").field("evtchn", &self.evtchn).field("port", &self.port).finish()
    }
}

impl EvtchnNotifier {
    /// Takes ownership of `evtchn` and of the already bound local `port`.
    pub fn new(evtchn: EvtChn, port: u32) -> Self {
        EvtchnNotifier { evtchn, port, alive: None }
    }

    /// Opens the device and allocates an unbound port for `remote_domid`
    /// (the side that offers the channel; publish [`EvtchnNotifier::port`]).
    pub fn offer(remote_domid: u16) -> Result<Self, XenError> {
        let evtchn = EvtChn::open()?;
        let port = evtchn.bind_unbound_port(remote_domid)?;
        Ok(EvtchnNotifier::new(evtchn, port))
    }

    /// Opens the device and binds to the port `remote_domid` offered.
    pub fn connect(remote_domid: u16, remote_port: u32) -> Result<Self, XenError> {
        let evtchn = EvtChn::open()?;
        let port = evtchn.bind_interdomain(remote_domid, remote_port)?;
        Ok(EvtchnNotifier::new(evtchn, port))
    }

    /// Adds a liveness check, consulted after every wake-up and timeout.
    pub fn with_liveness(mut self, alive: Liveness) -> Self {
        self.alive = Some(alive);
        self
    }

    /// The local port.
    pub fn port(&self) -> u32 {
        self.port
    }

    /// The underlying device (for polling it alongside other descriptors).
    pub fn evtchn(&self) -> &EvtChn {
        &self.evtchn
    }

    /// Reads and unmasks everything pending.
    fn drain(&self) -> Result<(), XenError> {
        let mut ports = [0u32; 64];
        loop {
            match self.evtchn.read_ready(&mut ports) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    if ports[..n].iter().any(|p| *p != self.port) {
                        tracing::debug!(port = self.port, "foreign port pending on a notifier's device");
                    }
                    self.evtchn.unmask_all(&ports[..n])?;
                    if n < ports.len() {
                        return Ok(());
                    }
                }
                Err(XenError::EvtchnOverflow) => {
                    // Dropped notifications: start over and unmask our port
                    // (it may have been queued, and so masked, when the queue
                    // was cleared). The caller re-checks the ring.
                    tracing::warn!(port = self.port, "event-channel queue overflowed; resetting");
                    self.evtchn.reset()?;
                    self.evtchn.unmask(self.port)?;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Notifier for EvtchnNotifier {
    fn notify(&self) -> Result<(), NotifyError> {
        self.evtchn.notify(self.port).map_err(|e| NotifyError::Io(e.into()))
    }

    fn wait(&self, timeout: Option<Duration>) -> Result<Wake, NotifyError> {
        let ev = match sys::poll_until(self.evtchn.as_fd(), PollFlags::POLLIN, sys::deadline(timeout)) {
            Ok(ev) => ev,
            Err(errno) => return Err(NotifyError::Io(errno.into())),
        };
        let woke = !ev.is_empty();
        if woke {
            // A wake-up without a pending port (spurious) still counts as
            // notified: callers re-check their condition either way.
            self.drain().map_err(|e| NotifyError::Io(e.into()))?;
        }
        if self.alive.as_ref().is_some_and(|alive| !alive()) {
            return Err(NotifyError::PeerGone);
        }
        Ok(if woke { Wake::Notified } else { Wake::TimedOut })
    }
}

impl Drop for EvtchnNotifier {
    fn drop(&mut self) {
        if let Err(e) = self.evtchn.unbind(self.port) {
            tracing::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A fake device: a non-blocking socket whose peer plays the kernel's
    /// pending-port queue, and a fake ioctl handler.
    fn fake_device() -> (EvtChn, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        fake::set(|req, arg| {
            // SAFETY: all evtchn arguments start with a u32 (and RESET has
            // none).
            let first = if arg.is_null() { 0 } else { unsafe { *(arg as *const u32) } };
            if req == IOCTL_EVTCHN_BIND_INTERDOMAIN {
                // SAFETY: an EvtchnBindInterdomain.
                let op = unsafe { *(arg as *const EvtchnBindInterdomain) };
                fake::log(format!("bind {} {}", op.remote_domain, op.remote_port));
                Ok(23)
            } else if req == IOCTL_EVTCHN_BIND_UNBOUND_PORT {
                fake::log(format!("unbound {first}"));
                Ok(17)
            } else if req == IOCTL_EVTCHN_NOTIFY || req == IOCTL_EVTCHN_UNBIND {
                fake::log(format!("port {first}"));
                Ok(0)
            } else if req == IOCTL_EVTCHN_RESET {
                Ok(0)
            } else {
                Err(Errno::ENOTTY)
            }
        });
        (EvtChn::from_fd(a.into()), b)
    }

    fn ports(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|p| p.to_ne_bytes()).collect()
    }

    #[test]
    fn binds_return_the_local_port() {
        let (e, _k) = fake_device();
        assert_eq!(e.bind_unbound_port(5).unwrap(), 17);
        assert_eq!(e.bind_interdomain(0, 40).unwrap(), 23);
        e.notify(17).unwrap();
        let log = fake::clear();
        assert_eq!(log[1], "unbound 5");
        assert_eq!(log[3], "bind 0 40");
        assert_eq!(log[5], "port 17");
        assert_eq!(log[4], format!("ioctl {IOCTL_EVTCHN_NOTIFY:#x}"));
    }

    #[test]
    fn read_pending_returns_ports_one_by_one() {
        let (e, mut k) = fake_device();
        k.write_all(&ports(&[3, 4])).unwrap();
        assert_eq!(e.read_pending(Some(Duration::from_secs(5))).unwrap(), Some(3));
        assert_eq!(e.read_pending(Some(Duration::from_secs(5))).unwrap(), Some(4));
        assert_eq!(e.read_pending(Some(Duration::from_millis(10))).unwrap(), None);
        e.unmask(3).unwrap();
        let mut b = [0u8; 4];
        k.read_exact(&mut b).unwrap();
        assert_eq!(u32::from_ne_bytes(b), 3);
        fake::clear();
    }

    #[test]
    fn notifier_rings_waits_unmasks_and_unbinds() {
        let (e, mut k) = fake_device();
        let n = EvtchnNotifier::new(e, 17);
        n.notify().unwrap();
        assert_eq!(n.wait(Some(Duration::from_millis(10))).unwrap(), Wake::TimedOut);
        k.write_all(&ports(&[17])).unwrap();
        assert_eq!(n.wait(Some(Duration::from_secs(5))).unwrap(), Wake::Notified);
        // The port was written back, unmasking it.
        let mut b = [0u8; 4];
        k.read_exact(&mut b).unwrap();
        assert_eq!(u32::from_ne_bytes(b), 17);
        assert_eq!(n.wait(Some(Duration::from_millis(10))).unwrap(), Wake::TimedOut);
        drop(n);
        let log = fake::clear();
        assert_eq!(
            log,
            vec![
                format!("ioctl {IOCTL_EVTCHN_NOTIFY:#x}"),
                "port 17".to_string(),
                format!("ioctl {IOCTL_EVTCHN_UNBIND:#x}"),
                "port 17".to_string()
            ]
        );
    }

    #[test]
    fn liveness_check_reports_a_dead_peer() {
        let (e, mut k) = fake_device();
        let alive = Arc::new(AtomicBool::new(true));
        let a2 = alive.clone();
        let n = EvtchnNotifier::new(e, 17).with_liveness(Arc::new(move || a2.load(Ordering::Acquire)));
        assert_eq!(n.wait(Some(Duration::from_millis(5))).unwrap(), Wake::TimedOut);
        alive.store(false, Ordering::Release);
        assert!(matches!(n.wait(Some(Duration::from_millis(5))), Err(NotifyError::PeerGone)));
        k.write_all(&ports(&[17])).unwrap();
        assert!(matches!(n.wait(Some(Duration::from_secs(5))), Err(NotifyError::PeerGone)));
        drop(n);
        fake::clear();
    }

    #[test]
    fn errors_name_the_ioctl_and_the_fix() {
        let (e, _k) = fake_device();
        fake::set(|_, _| Err(Errno::EINVAL));
        let err = e.bind_interdomain(3, 9).unwrap_err();
        let s = err.to_string();
        assert!(s.contains("IOCTL_EVTCHN_BIND_INTERDOMAIN") && s.contains("EINVAL") && s.contains("remote domain"), "{s}");
        fake::clear();
    }
}
