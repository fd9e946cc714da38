//! Plumbing of the local transport, shared by frontend and backend: a
//! memfd-backed region, the handshake over a Unix socket that passes its
//! file descriptor, and the doorbells, which are bytes on that socket.
//!
//! As in Xen, the frontend owns the memory: it creates the memfd, seals its
//! size (`F_SEAL_SHRINK | F_SEAL_GROW`, so a hostile frontend cannot truncate
//! it under the backend's mapping and make the backend fault), writes the
//! control page, and sends the memfd with its proposed geometry. The backend checks the seals, the size and the geometry against
//! its limits before it maps anything, and answers with a status.
//!
//! The backend maps the region at the frontend's address when that address
//! is free in its process (a session's worker usually has it free), so
//! that page-locked memory in the data area has one address in the program,
//! in the backend and, once the backend registers it with the driver, on
//! the GPU: kernels can then read and write it as they read and write
//! mapped host memory natively. Where the address is taken, it maps the
//! region elsewhere and everything but that works the same.
//!
//! After the handshake the socket is the doorbell in both directions: a side
//! rings by sending one byte and waits by polling the socket. Each side
//! sees the other die (end of file) while it waits. The backend never
//! blocks on it whatever the frontend does to the socket: every send and
//! receive is non-blocking per call (`MSG_DONTWAIT`), which a peer cannot
//! change, unlike the shared `O_NONBLOCK` flag of an eventfd the peer also
//! holds; a full socket only means the peer has not read earlier rings,
//! so it will wake anyway.

mod doorbell;
mod region;

pub use doorbell::SocketNotifier;
pub use region::{FixedMapping, MIN_SHARED_ADDRESS, MemfdMapping, create_region, map_region};

use crate::layout::{Geometry, LayoutError};
use crate::region::SharedRegion;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"PVGPULH1");
const WELCOME_MAGIC: u64 = u64::from_le_bytes(*b"PVGPULW1");
/// Version of the local handshake (3: doorbells on the socket).
pub const LOCAL_VERSION: u32 = 3;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most descriptors one message can carry (Linux's `SCM_MAX_FD`).
const SCM_MAX_FD: usize = 253;

/// Frontend to backend, with one fd: the region's memfd.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
struct LocalHello {
    magic: U64,
    version: U32,
    req_size: U32,
    rsp_size: U32,
    reserved: U32,
    data_size: U64,
    /// Where the frontend mapped the region.
    region_addr: U64,
}

// Another backend's copy opens with a message of the same size
// (`crate::peer_copy`), so one read takes either.
const _: () = assert!(size_of::<LocalHello>() == size_of::<crate::peer_copy::PeerCopyHello>());

/// Backend to frontend.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
struct LocalWelcome {
    magic: U64,
    /// 0: accepted; otherwise a [`Refusal`] code.
    status: U32,
    reserved: U32,
    /// Largest data area the backend accepts.
    max_data: U64,
}

/// Why the backend refused a local handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Refusal {
    /// Geometry out of range (for example a data area over the limit).
    Geometry = 1,
    /// The memfd is not sealed against shrinking, or is too small.
    Memory = 2,
    /// Malformed handshake.
    Malformed = 3,
    /// The backend is at its session limit.
    Busy = 4,
    /// This user may not use the backend.
    Denied = 5,
}

/// Why the local handshake or mapping failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// An OS call failed.
    #[error("{what} failed")]
    Os {
        /// The operation.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The peer sent something that is not a handshake.
    #[error("Malformed handshake: {0}")]
    Malformed(&'static str),
    /// The backend refused the connection.
    #[error("Backend refused the connection: {}", refusal_text(*reason, *max_data))]
    Refused {
        /// Why.
        reason: Refusal,
        /// The backend's data-area limit.
        max_data: u64,
    },
    /// The memfd is not usable.
    #[error("Shared memory rejected: {0}")]
    Memory(&'static str),
    /// The geometry is out of range.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

fn refusal_text(reason: Refusal, max_data: u64) -> String {
    match reason {
        Refusal::Geometry => format!("it accepts data areas up to {max_data} bytes (PVGPU_DATA_AREA_MB, PVGPU_PINNED_MB)"),
        Refusal::Memory => "the shared memory is not usable".into(),
        Refusal::Malformed => "it did not understand the handshake (frontend and backend versions differ?)".into(),
        Refusal::Busy => "it serves as many sessions as it may (for this user or in all); try again when one ends".into(),
        Refusal::Denied => "this user may not use it (the backend's --allow-uid)".into(),
    }
}

fn os(what: &'static str) -> impl FnOnce(nix::Error) -> LocalError {
    move |e| LocalError::Os { what, source: io::Error::from(e) }
}

fn ios(what: &'static str) -> impl FnOnce(io::Error) -> LocalError {
    move |source| LocalError::Os { what, source }
}

/// What the frontend holds after a successful handshake.
pub struct ClientSide {
    /// The region, control page written.
    pub region: SharedRegion,
    /// The geometry accepted.
    pub geometry: Geometry,
    /// Our doorbell: the socket.
    pub notifier: SocketNotifier,
}

/// Frontend side of the handshake on a connected socket.
pub fn client_handshake(sock: UnixStream, g: &Geometry) -> Result<ClientSide, LocalError> {
    g.validate(u64::MAX)?;
    let (region, memfd) = create_region(g)?;
    crate::layout::init_region(&region, g)?;
    let hello = LocalHello {
        magic: HELLO_MAGIC.into(),
        version: LOCAL_VERSION.into(),
        req_size: g.req_size.into(),
        rsp_size: g.rsp_size.into(),
        reserved: 0.into(),
        data_size: g.data_size.into(),
        region_addr: (region.as_ptr() as usize as u64).into(),
    };
    let fds = [memfd.as_raw_fd()];
    let sent = sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(hello.as_bytes())],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    );
    drop(memfd);
    // A backend that refuses at once (busy) may have answered and closed
    // before our hello went out: read its answer before reporting the
    // broken pipe.
    let sent_err = sent.err();
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(ios("socket timeout"))?;
    let mut w = [0u8; core::mem::size_of::<LocalWelcome>()];
    if let Err(e) = (&sock).read_exact(&mut w) {
        return Err(match sent_err {
            Some(s) => os("sending the handshake")(s),
            None => ios("reading the backend's answer")(e),
        });
    }
    let welcome = LocalWelcome::read_from_bytes(&w).map_err(|_| LocalError::Malformed("short answer"))?;
    if welcome.magic.get() != WELCOME_MAGIC {
        return Err(LocalError::Malformed("bad answer magic"));
    }
    let reason = match welcome.status.get() {
        0 => None,
        1 => Some(Refusal::Geometry),
        2 => Some(Refusal::Memory),
        4 => Some(Refusal::Busy),
        5 => Some(Refusal::Denied),
        _ => Some(Refusal::Malformed),
    };
    if let Some(reason) = reason {
        return Err(LocalError::Refused { reason, max_data: welcome.max_data.get() });
    }
    if let Some(e) = sent_err {
        return Err(os("sending the handshake")(e));
    }
    sock.set_read_timeout(None).map_err(ios("socket timeout"))?;
    let notifier = SocketNotifier::new(OwnedFd::from(sock));
    Ok(ClientSide { region, geometry: *g, notifier })
}

/// What the backend holds after a successful handshake.
pub struct ServerSide {
    /// The frontend's region, checked and mapped.
    pub region: SharedRegion,
    /// Whether the region is mapped at the frontend's address.
    pub same_address: bool,
    /// The geometry accepted.
    pub geometry: Geometry,
    /// Our doorbell: the socket.
    pub notifier: SocketNotifier,
}

fn answer(sock: &UnixStream, status: u32, max_data: u64) -> Result<(), LocalError> {
    let w = LocalWelcome { magic: WELCOME_MAGIC.into(), status: status.into(), reserved: 0.into(), max_data: max_data.into() };
    (&*sock).write_all(w.as_bytes()).map_err(ios("answering the handshake"))
}

/// A frontend's complete, checked hello: what the backend needs to map
/// its region. Read by whoever admits the connection
/// ([`read_hello`]); the session that serves it finishes the handshake
/// ([`finish_handshake`]), possibly in another process.
#[derive(Debug)]
pub struct Hello {
    /// The geometry proposed, already validated against the backend's
    /// data-area limit.
    pub geometry: Geometry,
    /// Where the frontend mapped the region.
    pub region_addr: u64,
    /// The region's memfd (not yet checked: [`finish_handshake`] does).
    pub memfd: OwnedFd,
}

/// Backend side, first half: reads the frontend's hello and its memfd from
/// an accepted socket and checks magic, version, descriptor count and
/// geometry (against `max_data`, the largest data area accepted). Blocks
/// until the whole hello has arrived or the socket fails; the caller bounds
/// the time (it shuts the socket down at its deadline). On failure the
/// frontend has been told why (when the socket still works).
pub fn read_hello(sock: &UnixStream, max_data: u64) -> Result<Opening, LocalError> {
    let mut hb = [0u8; core::mem::size_of::<LocalHello>()];
    // Room for every descriptor one message can carry (SCM_MAX_FD), so the
    // kernel never truncates them: nix reports a truncated message as an
    // error without handing over the descriptors already installed, which
    // would leak them.
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; SCM_MAX_FD]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut hb)];
        let msg =
            recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC).map_err(os("reading the handshake"))?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for c in msg.cmsgs().map_err(os("reading the handshake's fds"))? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel just installed these fds in our table
                // for us; nothing else owns them.
                fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            let _ = answer(sock, Refusal::Malformed as u32, max_data);
            return Err(LocalError::Malformed("too many fds"));
        }
        (msg.bytes, fds)
    };
    if n == 0 {
        return Err(LocalError::Malformed("closed before its hello"));
    }
    if n < hb.len() {
        (&*sock).read_exact(&mut hb[n..]).map_err(ios("reading the handshake"))?;
    }
    if fds.is_empty()
        && let Some(a) = crate::peer_copy::PeerCopyHello::parse(&hb, crate::peer_copy::LOCAL_MAGIC)
    {
        return Ok(Opening::Peer(a));
    }
    let hello = LocalHello::read_from_bytes(&hb).map_err(|_| LocalError::Malformed("short hello"))?;
    if hello.magic.get() != HELLO_MAGIC || hello.version.get() != LOCAL_VERSION || fds.len() != 1 {
        let _ = answer(sock, Refusal::Malformed as u32, max_data);
        return Err(LocalError::Malformed("bad magic, version or fd count"));
    }
    let g = Geometry { req_size: hello.req_size.get(), rsp_size: hello.rsp_size.get(), data_size: hello.data_size.get() };
    if let Err(e) = g.validate(max_data) {
        let _ = answer(sock, Refusal::Geometry as u32, max_data);
        return Err(e.into());
    }
    let Some(memfd) = fds.into_iter().next() else {
        let _ = answer(sock, Refusal::Malformed as u32, max_data);
        return Err(LocalError::Malformed("no memfd"));
    };
    Ok(Opening::Session(Hello { geometry: g, region_addr: hello.region_addr.get(), memfd }))
}

/// What a local connection opened with.
pub enum Opening {
    /// A session's hello.
    Session(Hello),
    /// Another backend's copy ([`crate::peer_copy`]): what its ticket
    /// asks for. The caller answers it ([`crate::peer_copy::answer`]).
    Peer(crate::peer_copy::Arrival),
}

/// Backend side, second half: checks and maps the hello's memfd and
/// welcomes the frontend. `max_data` is the largest data area accepted
/// (told to a refused frontend). With `same_address`, the region is
/// mapped at the frontend's address when that is free (only for a process
/// that serves this one session: the frontend then knows where its memory
/// lies in the process, which must hold nothing of anyone else's). On
/// failure the frontend has been told why (when the socket still works).
pub fn finish_handshake(sock: UnixStream, hello: Hello, max_data: u64, same_address: bool) -> Result<ServerSide, LocalError> {
    let Hello { geometry: g, region_addr, memfd } = hello;
    let at = usize::try_from(region_addr).ok().filter(|_| same_address);
    let region = match map_region(memfd, &g, at) {
        Ok(r) => r,
        Err(e) => {
            let _ = answer(&sock, Refusal::Memory as u32, max_data);
            return Err(e);
        }
    };
    if let Err(e) = crate::layout::attach_region(&region, &g) {
        let _ = answer(&sock, Refusal::Memory as u32, max_data);
        return Err(e.into());
    }
    answer(&sock, 0, max_data)?;
    sock.set_read_timeout(None).map_err(ios("socket timeout"))?;
    let notifier = SocketNotifier::new(OwnedFd::from(sock));
    let same_address = at == Some(region.as_ptr() as usize);
    Ok(ServerSide { region, same_address, geometry: g, notifier })
}

/// Backend side of the whole handshake on an accepted socket, in one call
/// ([`read_hello`], then [`finish_handshake`]), bounded by a 10 s timeout
/// per read.
pub fn server_handshake(sock: UnixStream, max_data: u64, same_address: bool) -> Result<ServerSide, LocalError> {
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(ios("socket timeout"))?;
    match read_hello(&sock, max_data)? {
        Opening::Session(hello) => finish_handshake(sock, hello, max_data, same_address),
        Opening::Peer(_) => Err(LocalError::Malformed("a backend's copy where a session was expected")),
    }
}

/// Refuses a connection during the handshake (for example when the backend
/// is at its session limit). A hello already sent is read first (and its
/// memfd closed), so the frontend reads the refusal rather than a broken
/// pipe; this never waits for one.
pub fn refuse(sock: &UnixStream, reason: Refusal, max_data: u64) {
    let mut hb = [0u8; core::mem::size_of::<LocalHello>()];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; SCM_MAX_FD]);
    let mut iov = [IoSliceMut::new(&mut hb)];
    if let Ok(msg) = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT) {
        for c in msg.cmsgs().into_iter().flatten() {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel just installed these fds in our table
                // for us; owning them closes them.
                raw.into_iter().for_each(|r| drop(unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
    }
    let _ = answer(sock, reason as u32, max_data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::attach_region;
    use crate::notify::{Notifier, NotifyError, Wake};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use std::fs::File;

    #[test]
    fn handshake_shares_region_and_doorbells() {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 1 << 20 };
        let t = std::thread::spawn(move || server_handshake(b, 16 << 20, true).unwrap());
        let c = client_handshake(a, &g).unwrap();
        let s = t.join().unwrap();
        assert_eq!(s.geometry, g);
        attach_region(&s.region, &g).unwrap();
        // The data area is the same memory on both sides.
        let ce = attach_region(&c.region, &g).unwrap();
        let se = attach_region(&s.region, &g).unwrap();
        ce.data.write(100, b"hello").unwrap();
        let mut buf = [0u8; 5];
        se.data.read(100, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        // Doorbells ring across.
        c.notifier.notify().unwrap();
        assert_eq!(s.notifier.wait(Some(Duration::from_secs(5))).unwrap(), Wake::Notified);
        assert_eq!(s.notifier.wait(Some(Duration::from_millis(10))).unwrap(), Wake::TimedOut);
        // The peer's death is seen.
        drop(c);
        assert!(matches!(s.notifier.wait(Some(Duration::from_secs(5))), Err(NotifyError::PeerGone)));
        assert!(s.notifier.peer_gone());
    }

    #[test]
    fn region_is_mapped_at_the_address_asked_for_when_it_is_free() {
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 1 << 20 };
        let (c, fd) = create_region(&g).unwrap();
        let dup = || OwnedFd::from(File::from(fd.try_clone().unwrap()));
        // Taken (by the frontend's own mapping, in this one process): mapped
        // elsewhere, the same memory.
        let taken = c.as_ptr() as usize;
        let s = map_region(dup(), &g, Some(taken)).unwrap();
        assert_ne!(s.as_ptr() as usize, taken);
        // Free: mapped there. An address freed just now is free (unless
        // another test's thread maps something there meanwhile: try again).
        let (free, s2) = (0..10)
            .map(|_| {
                let free = memmap2::MmapMut::map_anon(g.total_len()).unwrap().as_ptr() as usize;
                (free, map_region(dup(), &g, Some(free)).unwrap())
            })
            .find(|(free, s2)| s2.as_ptr() as usize == *free)
            .expect("a free address is mapped where asked");
        // SAFETY: both map the memfd, at least one page long.
        unsafe {
            c.as_ptr().write(42);
            assert_eq!(s2.as_ptr().read(), 42);
            assert_eq!(s.as_ptr().read(), 42);
        }
        // Not page-aligned, or low in the address space: mapped elsewhere.
        let s3 = map_region(dup(), &g, Some(free + 1)).unwrap();
        assert_ne!(s3.as_ptr() as usize, free + 1);
        let s4 = map_region(dup(), &g, Some(0x10000)).unwrap();
        assert_ne!(s4.as_ptr() as usize, 0x10000);
    }

    #[test]
    fn oversized_data_area_is_refused_with_the_limit() {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 8 << 20 };
        let t = std::thread::spawn(move || server_handshake(b, 4 << 20, true));
        let e = client_handshake(a, &g).err().unwrap();
        assert!(matches!(e, LocalError::Refused { reason: Refusal::Geometry, max_data } if max_data == 4 << 20));
        assert!(t.join().unwrap().is_err());
    }

    /// Sends a client hello for 4 KiB channels and data area with `fds`.
    fn send_hello(a: &UnixStream, fds: &[std::os::fd::RawFd]) {
        let hello = LocalHello {
            magic: HELLO_MAGIC.into(),
            version: LOCAL_VERSION.into(),
            req_size: 4096.into(),
            rsp_size: 4096.into(),
            reserved: 0.into(),
            data_size: 4096.into(),
            region_addr: 0.into(),
        };
        sendmsg::<()>(a.as_raw_fd(), &[IoSlice::new(hello.as_bytes())], &[ControlMessage::ScmRights(fds)], MsgFlags::empty(), None)
            .unwrap();
    }

    #[test]
    fn unsealed_memfd_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 4096 };
        let fd = memfd_create(c"x", MFdFlags::MFD_CLOEXEC).unwrap();
        File::from(fd.try_clone().unwrap()).set_len(g.total_len() as u64).unwrap();
        send_hello(&a, &[fd.as_raw_fd()]);
        assert!(matches!(server_handshake(b, 1 << 20, true), Err(LocalError::Memory(_))));
    }

    #[test]
    fn extra_fds_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 4096 };
        let (_r, memfd) = create_region(&g).unwrap();
        let (x, _y) = UnixStream::pair().unwrap();
        send_hello(&a, &[memfd.as_raw_fd(), x.as_raw_fd()]);
        assert!(matches!(server_handshake(b, 1 << 20, true), Err(LocalError::Malformed(_))));
    }

    /// A frontend that never reads its doorbell (its socket blocking, its
    /// buffer full) cannot make the backend's ring block.
    #[test]
    fn a_peer_that_never_reads_cannot_block_the_ring() {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 4096 };
        let t = std::thread::spawn(move || server_handshake(b, 1 << 20, false).unwrap());
        let c = client_handshake(a, &g).unwrap();
        let s = t.join().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..100_000 {
                s.notifier.notify().unwrap();
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(20)).expect("ringing a peer that never reads blocked");
        // The frontend still wakes, and the flood is drained a bounded
        // amount per wake-up.
        assert_eq!(c.notifier.wait(Some(Duration::from_secs(1))).unwrap(), Wake::Notified);
    }

    /// A hello with more descriptors than the handshake takes is refused,
    /// and every descriptor it carried is closed (fuzzing found them left
    /// open when they did not fit the receive buffer).
    #[test]
    fn surplus_fds_are_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        let copies: Vec<OwnedFd> = (0..5).map(|_| r.try_clone().unwrap()).collect();
        let raw: Vec<_> = copies.iter().map(|f| f.as_raw_fd()).collect();
        send_hello(&a, &raw);
        drop((r, copies));
        assert!(server_handshake(b, 1 << 20, false).is_err());
        // Every read end is closed now, ours and the backend's copies.
        assert_eq!(nix::unistd::write(&w, b"x"), Err(nix::Error::EPIPE));
    }
}
