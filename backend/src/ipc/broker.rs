//! How a session reaches the registry: directly, or from a worker process
//! over a socket pair with the supervisor.
//!
//! One message each way per call, on a `SOCK_SEQPACKET` pair (message
//! boundaries kept, descriptors passed with `SCM_RIGHTS`): a [`Msg`], and
//! at most one descriptor. The supervisor serves each worker's end on a
//! thread of its own ([`serve_worker`]), knows the worker's session and
//! scope itself (nothing the worker says changes them), and forgets the
//! session's exports when the worker's end closes.

use super::registry::{Registry, Token};
use super::{IpcError, IpcObject};
use crate::checkpoints::{Desk, OrderKind, Wrote};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

const OP_EXPORT: u32 = 1;
const OP_IMPORT: u32 = 2;
const OP_REVOKE: u32 = 3;
/// The worker's checkpoint order ([`crate::checkpoints`]): the file, and
/// in `kind` whether the session stays (bit 0), hands its memory over in
/// place (bit 1), or writes only its skeleton (bit 2).
const OP_ORDER: u32 = 4;
/// The worker's checkpoint report: `kind` 0 and the bytes in `size`, or
/// `kind` 1 (the reason is in the file).
const OP_REPORT: u32 = 5;
/// A parked snapshot for the token in `token`.
const OP_CLAIM: u32 = 6;
/// Where the session with the token in `token` moved (the address in
/// `bytes`, its length in `size`).
const OP_MOVED: u32 = 7;
/// A ticket for a copy of `size` bytes from another backend
/// ([`crate::peer_copy`]): its token.
const OP_COPY_OPEN: u32 = 8;
/// The connection that arrived for the ticket in `token`.
const OP_COPY_TAKE: u32 = 9;
/// A connection to the backend at the address in `bytes` (its length in
/// `kind`) for the ticket in `token`, of `size` bytes.
const OP_COPY_CONNECT: u32 = 10;
/// The worker is done with the snapshot it claimed for `token`.
const OP_RELEASE: u32 = 11;
/// A piece of device memory the checkpointing session hands over in place
/// (its descriptor), before its report.
const OP_HANDED: u32 = 12;
/// Piece `kind` of the memory handed over in place with the snapshot
/// claimed for `token`.
const OP_CLAIM_HANDED: u32 = 13;

const OK: u32 = 0;
const UNKNOWN: u32 = 1;
const FULL: u32 = 2;
const BAD: u32 = 3;
const OWN: u32 = 4;

/// A request (op, kind, size, object bytes) or a reply (status in `op`,
/// size, token, object bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct Msg {
    op: U32,
    kind: U32,
    size: U64,
    token: Token,
    bytes: [u8; 64],
}

impl Default for Msg {
    fn default() -> Self {
        <Self as zerocopy::FromZeros>::new_zeroed()
    }
}

/// A session's way to the registry.
#[derive(Debug)]
pub enum Broker {
    /// The registry of this process (thread isolation).
    Direct {
        /// The registry.
        registry: Arc<Registry>,
        /// Who the session's peer is.
        scope: Arc<str>,
        /// The session's number.
        session: u64,
        /// Checkpoint orders and parked snapshots.
        desk: Arc<Desk>,
    },
    /// The supervisor, over this worker's end of a socket pair.
    Remote(Mutex<OwnedFd>),
}

impl Drop for Broker {
    fn drop(&mut self) {
        // A worker's exports go when its socket closes (the supervisor's
        // thread sees it); a thread's when its broker goes.
        if let Broker::Direct { registry, session, desk, .. } = self {
            registry.end_session(*session);
            desk.copies.end_session(*session);
        }
    }
}

impl Broker {
    /// Exports `object`, `size` bytes of `kind`: its token.
    pub fn export(&self, kind: u32, size: u64, object: IpcObject) -> Result<Token, IpcError> {
        match self {
            Broker::Direct { registry, scope, session, .. } => registry.export(scope, *session, kind, size, object),
            Broker::Remote(sock) => {
                let m = Msg { op: OP_EXPORT.into(), kind: kind.into(), size: size.into(), bytes: object.bytes, ..Default::default() };
                let (r, _) = call(sock, &m, object.fd.as_deref())?;
                Ok(r.token)
            }
        }
    }

    /// The object of `kind` exported under `token` by another session of
    /// this one's scope, and its size.
    pub fn import(&self, kind: u32, token: &Token) -> Result<(u64, IpcObject), IpcError> {
        match self {
            Broker::Direct { registry, scope, session, .. } => registry.import(scope, *session, kind, token),
            Broker::Remote(sock) => {
                let m = Msg { op: OP_IMPORT.into(), kind: kind.into(), token: *token, ..Default::default() };
                let (r, fd) = call(sock, &m, None)?;
                Ok((r.size.get(), IpcObject { bytes: r.bytes, fd: fd.map(Arc::new) }))
            }
        }
    }

    /// The checkpoint ordered for this session, if any: the file to write,
    /// and what to do.
    pub fn checkpoint_order(&self) -> Option<(std::fs::File, OrderKind)> {
        match self {
            Broker::Direct { desk, session, .. } => {
                let (fd, kind) = desk.take_order(*session)?;
                Some((std::fs::File::from(fd.try_clone().ok()?), kind))
            }
            Broker::Remote(sock) => {
                let m = Msg { op: OP_ORDER.into(), ..Default::default() };
                let (r, fd) = call(sock, &m, None).ok()?;
                let kind = OrderKind { stay: r.kind.get() & 1 != 0, hand_over: r.kind.get() & 2 != 0, skeleton: r.kind.get() & 4 != 0 };
                Some((std::fs::File::from(fd?), kind))
            }
        }
    }

    /// Hands the device memory the checkpoint ordered left on the GPU to
    /// the supervisor, before the report: all of it, or an error (the
    /// checkpoint then fails, and the session keeps its memory).
    pub fn hand_over(&self, fds: Vec<OwnedFd>) -> Result<(), IpcError> {
        match self {
            Broker::Direct { desk, session, .. } => fds.into_iter().try_for_each(|fd| desk.add_handed(*session, fd)),
            Broker::Remote(sock) => {
                fds.iter().try_for_each(|fd| call(sock, &Msg { op: OP_HANDED.into(), ..Default::default() }, Some(fd)).map(drop))
            }
        }
    }

    /// Reports the checkpoint: the bytes of device state written and the
    /// session's token, or a failure (`None`) whose reason the session
    /// wrote into the file.
    pub fn checkpoint_report(&self, written: Option<Wrote>) {
        match self {
            Broker::Direct { desk, session, .. } => desk.report(*session, written.ok_or_else(String::new)),
            Broker::Remote(sock) => {
                let (bytes, token, held) = written.map_or((0, [0; 16], 0), |w| (w.bytes, w.token, nanos(w.held)));
                let mut m = Msg {
                    op: OP_REPORT.into(),
                    kind: u32::from(written.is_none()).into(),
                    size: bytes.into(),
                    token,
                    ..Default::default()
                };
                m.bytes[..8].copy_from_slice(&held.to_le_bytes());
                if let Err(e) = call(sock, &m, None) {
                    tracing::warn!(error = %e, "reporting a checkpoint failed");
                }
            }
        }
    }

    /// The snapshot parked under `token` for this session's peer, and the
    /// device memory handed over in place with it.
    pub fn claim(&self, token: &Token) -> Result<(std::fs::File, Vec<OwnedFd>), IpcError> {
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|_| IpcError::Unreachable);
        match self {
            Broker::Direct { desk, scope, .. } => {
                let (fd, n) = desk.claim(scope, token)?;
                let handed = (0..n).map(|i| desk.claimed_handed(scope, token, i).and_then(|fd| dup(&fd))).collect::<Result<_, _>>()?;
                Ok((std::fs::File::from(dup(&fd)?), handed))
            }
            Broker::Remote(sock) => {
                let m = Msg { op: OP_CLAIM.into(), token: *token, ..Default::default() };
                let (r, fd) = call(sock, &m, None)?;
                let file = fd.map(std::fs::File::from).ok_or(IpcError::Unreachable)?;
                let n = u32::try_from(r.size.get()).map_err(|_| IpcError::Unreachable)?;
                let handed = (0..n)
                    .map(|i| {
                        let m = Msg { op: OP_CLAIM_HANDED.into(), kind: i.into(), token: *token, ..Default::default() };
                        call(sock, &m, None)?.1.ok_or(IpcError::Unreachable)
                    })
                    .collect::<Result<_, _>>()?;
                Ok((file, handed))
            }
        }
    }

    /// Tells the supervisor this session is done with the snapshot it
    /// claimed for `token` (whose descriptor it closed).
    pub fn release_snapshot(&self, token: &Token) {
        match self {
            Broker::Direct { desk, scope, .. } => desk.release(scope, token),
            Broker::Remote(sock) => {
                let m = Msg { op: OP_RELEASE.into(), token: *token, ..Default::default() };
                let _ = call(sock, &m, None);
            }
        }
    }

    /// Where this peer's session with `token` moved to (`pvgpu-ctl
    /// migrate`), if it did.
    pub fn moved_to(&self, token: &Token) -> Option<String> {
        match self {
            Broker::Direct { desk, scope, .. } => desk.moved_to(scope, token),
            Broker::Remote(sock) => {
                let m = Msg { op: OP_MOVED.into(), token: *token, ..Default::default() };
                let (r, _) = call(sock, &m, None).ok()?;
                let len = usize::try_from(r.size.get()).ok().filter(|&n| n <= r.bytes.len())?;
                String::from_utf8(r.bytes[..len].to_vec()).ok()
            }
        }
    }

    /// A ticket for `len` bytes into this session from another backend.
    pub fn copy_open(&self, len: u64) -> Result<Token, IpcError> {
        match self {
            Broker::Direct { desk, session, .. } => desk.copies.open(*session, len),
            Broker::Remote(sock) => {
                let m = Msg { op: OP_COPY_OPEN.into(), size: len.into(), ..Default::default() };
                Ok(call(sock, &m, None)?.0.token)
            }
        }
    }

    /// The connection of the copy this session's `ticket` names, once it
    /// has arrived (waiting up to [`crate::peer_copy::TICKET_LIFE`]).
    pub fn copy_take(&self, ticket: &Token) -> Result<OwnedFd, IpcError> {
        match self {
            Broker::Direct { desk, session, .. } => desk.copies.take(*session, ticket, crate::peer_copy::TICKET_LIFE),
            Broker::Remote(sock) => {
                let m = Msg { op: OP_COPY_TAKE.into(), token: *ticket, ..Default::default() };
                call(sock, &m, None)?.1.ok_or(IpcError::Unreachable)
            }
        }
    }

    /// A connection to the backend at `address` for the copy `ticket`
    /// names, of `len` bytes, accepted there.
    pub fn copy_connect(&self, address: &str, ticket: &Token, len: u64) -> Result<OwnedFd, IpcError> {
        let a = pvgpu_ring::peer_copy::Arrival { ticket: *ticket, len };
        match self {
            Broker::Direct { desk, .. } => desk.copies.connect(address, a),
            Broker::Remote(sock) => {
                let mut m = Msg { op: OP_COPY_CONNECT.into(), size: len.into(), token: *ticket, ..Default::default() };
                let to = m.bytes.get_mut(..address.len()).ok_or(IpcError::Unknown)?;
                to.copy_from_slice(address.as_bytes());
                m.kind = (address.len() as u32).into();
                call(sock, &m, None)?.1.ok_or(IpcError::Unreachable)
            }
        }
    }

    /// Withdraws an export of this session (what it named was freed).
    pub fn revoke(&self, token: &Token) {
        match self {
            Broker::Direct { registry, session, .. } => registry.revoke(*session, token),
            Broker::Remote(sock) => {
                let m = Msg { op: OP_REVOKE.into(), token: *token, ..Default::default() };
                if let Err(e) = call(sock, &m, None) {
                    tracing::debug!(error = %e, "revoking an export failed");
                }
            }
        }
    }
}

/// A duration in whole nanoseconds, as a report carries it.
fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sends `m` (with `fd`) and waits for the reply: one call at a time.
fn call(sock: &Mutex<OwnedFd>, m: &Msg, fd: Option<&OwnedFd>) -> Result<(Msg, Option<OwnedFd>), IpcError> {
    let sock = sock.lock().unwrap_or_else(|p| p.into_inner());
    send(&sock, m, fd).map_err(|_| IpcError::Unreachable)?;
    let (r, fd) = recv(&sock).map_err(|_| IpcError::Unreachable)?.ok_or(IpcError::Unreachable)?;
    match r.op.get() {
        OK => Ok((r, fd)),
        UNKNOWN => Err(IpcError::Unknown),
        FULL => Err(IpcError::Full),
        OWN => Err(IpcError::Own),
        _ => Err(IpcError::Unreachable),
    }
}

fn send(sock: &OwnedFd, m: &Msg, fd: Option<&OwnedFd>) -> nix::Result<()> {
    let raw: Vec<RawFd> = fd.map(|f| f.as_raw_fd()).into_iter().collect();
    let cmsg: Vec<ControlMessage<'_>> = if raw.is_empty() { vec![] } else { vec![ControlMessage::ScmRights(&raw)] };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(m.as_bytes())], &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map(|_| ()),
        }
    }
}

/// The next message and its descriptor; `None` at end of file. A message
/// of the wrong size, or with more than one descriptor, is an error.
fn recv(sock: &OwnedFd) -> nix::Result<Option<(Msg, Option<OwnedFd>)>> {
    let mut m = Msg::default();
    let mut cmsg = nix::cmsg_space!([RawFd; 4]);
    let (n, mut fds, truncated) = loop {
        let mut iov = [IoSliceMut::new(m.as_mut_bytes())];
        match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e),
            Ok(msg) => {
                let mut fds = Vec::new();
                for c in msg.cmsgs()? {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: the kernel just installed these descriptors
                        // in this process for us; nothing else owns them.
                        fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
                    }
                }
                let truncated = msg.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
                break (msg.bytes, fds, truncated);
            }
        }
    };
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    if n != size_of::<Msg>() || fds.len() > 1 || truncated {
        return Err(nix::errno::Errno::EBADMSG);
    }
    Ok(Some((m, fds.pop())))
}

/// Serves worker `session` of `scope` on the supervisor's end of its
/// socket pair until the worker closes it, then forgets the session's
/// exports. A message that makes no sense ends the service (the worker's
/// later calls fail; its session goes on).
pub fn serve_worker(registry: &Registry, desk: &Desk, scope: &Arc<str>, session: u64, sock: &OwnedFd) {
    loop {
        let (m, fd) = match recv(sock) {
            Ok(Some(x)) => x,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(session, error = %e, "handle broker: bad message; no more service for this worker");
                break;
            }
        };
        let mut reply = Msg::default();
        let mut out_fd = None;
        let status = match m.op.get() {
            OP_EXPORT => {
                let object = IpcObject { bytes: m.bytes, fd: fd.map(Arc::new) };
                registry.export(scope, session, m.kind.get(), m.size.get(), object).map(|t| reply.token = t)
            }
            OP_IMPORT => registry.import(scope, session, m.kind.get(), &m.token).map(|(size, o)| {
                reply.size = size.into();
                reply.bytes = o.bytes;
                out_fd = o.fd;
            }),
            OP_REVOKE => {
                registry.revoke(session, &m.token);
                Ok(())
            }
            OP_ORDER => desk.take_order(session).ok_or(IpcError::Unknown).map(|(fd, kind)| {
                reply.kind = (u32::from(kind.stay) | u32::from(kind.hand_over) << 1 | u32::from(kind.skeleton) << 2).into();
                out_fd = Some(fd);
            }),
            OP_HANDED => fd.ok_or(IpcError::Unreachable).and_then(|fd| desk.add_handed(session, fd)),
            OP_REPORT => {
                let held = std::time::Duration::from_nanos(u64::from_le_bytes(m.bytes[..8].try_into().unwrap_or_default()));
                let wrote = Wrote { bytes: m.size.get(), token: m.token, held };
                desk.report(session, if m.kind.get() == 0 { Ok(wrote) } else { Err(String::new()) });
                Ok(())
            }
            OP_CLAIM => desk.claim(scope, &m.token).map(|(fd, n)| {
                reply.size = (n as u64).into();
                out_fd = Some(fd);
            }),
            OP_CLAIM_HANDED => desk.claimed_handed(scope, &m.token, m.kind.get() as usize).map(|fd| out_fd = Some(fd)),
            OP_RELEASE => {
                desk.release(scope, &m.token);
                Ok(())
            }
            OP_MOVED => match desk.moved_to(scope, &m.token).filter(|to| to.len() <= reply.bytes.len()) {
                Some(to) => {
                    reply.bytes[..to.len()].copy_from_slice(to.as_bytes());
                    reply.size = (to.len() as u64).into();
                    Ok(())
                }
                None => Err(IpcError::Unknown),
            },
            OP_COPY_OPEN => desk.copies.open(session, m.size.get()).map(|t| reply.token = t),
            OP_COPY_TAKE => desk.copies.take(session, &m.token, crate::peer_copy::TICKET_LIFE).map(|fd| out_fd = Some(Arc::new(fd))),
            OP_COPY_CONNECT => {
                let address = usize::try_from(m.kind.get()).ok().and_then(|n| m.bytes.get(..n)).and_then(|b| std::str::from_utf8(b).ok());
                match address {
                    Some(a) => desk
                        .copies
                        .connect(a, pvgpu_ring::peer_copy::Arrival { ticket: m.token, len: m.size.get() })
                        .map(|fd| out_fd = Some(Arc::new(fd))),
                    None => Err(IpcError::Unreachable),
                }
            }
            _ => Err(IpcError::Unreachable),
        };
        reply.op = match status {
            Ok(()) => OK,
            Err(IpcError::Unknown) => UNKNOWN,
            Err(IpcError::Full) => FULL,
            Err(IpcError::Own) => OWN,
            Err(IpcError::Unreachable) => BAD,
        }
        .into();
        if send(sock, &reply, out_fd.as_deref()).is_err() {
            break;
        }
    }
    registry.end_session(session);
    desk.copies.end_session(session);
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    use std::io::{Read, Seek, Write};

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap()
    }

    #[test]
    fn a_worker_exports_and_another_imports_a_descriptor_through_the_supervisor() {
        let reg = Arc::new(Registry::default());
        let scope: Arc<str> = "uid:1000".into();
        let (w1, s1) = pair();
        let (w2, s2) = pair();
        let (r1, sc1) = (reg.clone(), scope.clone());
        let t1 = std::thread::spawn(move || serve_worker(&r1, &Desk::default(), &sc1, 1, &s1));
        let (r2, sc2) = (reg.clone(), scope.clone());
        let t2 = std::thread::spawn(move || serve_worker(&r2, &Desk::default(), &sc2, 2, &s2));
        let a = Broker::Remote(Mutex::new(w1));
        let b = Broker::Remote(Mutex::new(w2));

        let mut f = tempfile_with(b"shared bytes");
        let object = IpcObject { bytes: [7; 64], fd: Some(Arc::new(OwnedFd::from(f.try_clone().unwrap()))) };
        let token = a.export(1, 12, object).unwrap();
        assert_eq!(a.import(1, &token).map(|x| x.0), Err(IpcError::Own), "not by the exporter");
        let (size, got) = b.import(1, &token).unwrap();
        assert_eq!((size, got.bytes), (12, [7; 64]));
        let mut g = std::fs::File::from(Arc::try_unwrap(got.fd.unwrap()).unwrap());
        let mut s = String::new();
        g.rewind().unwrap();
        g.read_to_string(&mut s).unwrap();
        assert_eq!(s, "shared bytes");
        f.write_all(b"!").unwrap();

        a.revoke(&token);
        assert_eq!(b.import(1, &token).map(|x| x.0), Err(IpcError::Unknown));
        let again = a.export(2, 0, IpcObject::default()).unwrap();
        drop(a);
        t1.join().unwrap();
        assert_eq!(b.import(2, &again).map(|x| x.0), Err(IpcError::Unknown), "gone with its session");
        drop(b);
        t2.join().unwrap();
        assert!(reg.is_empty());
    }

    fn tempfile_with(b: &[u8]) -> std::fs::File {
        let fd = nix::sys::memfd::memfd_create("pvgpu-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(b).unwrap();
        f
    }
}
