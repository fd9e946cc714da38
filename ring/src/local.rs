//! Plumbing of the local transport, shared by frontend and backend: a
//! memfd-backed region, eventfd doorbells, and the handshake over a Unix
//! socket that passes their file descriptors.
//!
//! As in Xen, the frontend owns the memory: it creates the memfd, seals its
//! size (`F_SEAL_SHRINK | F_SEAL_GROW`, so a hostile frontend cannot truncate
//! it under the backend's mapping and make the backend fault), writes the
//! control page, and sends the memfd and two eventfds with its proposed
//! geometry. The backend checks the seals, the size and the geometry against
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
//! After the handshake the socket carries nothing; it stays open so that each
//! side sees the other die (`POLLHUP`) while it waits on its doorbell.

use crate::layout::{Geometry, LayoutError};
use crate::notify::{Notifier, NotifyError, Wake};
use crate::region::{Mapping, SharedRegion};
use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"PVGPULH1");
const WELCOME_MAGIC: u64 = u64::from_le_bytes(*b"PVGPULW1");
/// Version of the local handshake.
pub const LOCAL_VERSION: u32 = 2;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Frontend to backend, with three fds: region memfd, backend doorbell,
/// frontend doorbell.
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
    #[error("Backend refused the connection ({reason:?}); it accepts data areas up to {max_data} bytes")]
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

fn os(what: &'static str) -> impl FnOnce(nix::Error) -> LocalError {
    move |e| LocalError::Os { what, source: io::Error::from(e) }
}

fn ios(what: &'static str) -> impl FnOnce(io::Error) -> LocalError {
    move |source| LocalError::Os { what, source }
}

/// A shared mapping of a memfd.
pub struct MemfdMapping {
    map: memmap2::MmapRaw,
    _file: File,
}

// SAFETY: the mapping stays at its address with its length until dropped
// (MmapRaw unmaps on drop); the memfd is sealed against shrinking, so every
// byte stays backed; the process reaches it only through raw pointers.
unsafe impl Mapping for MemfdMapping {
    fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Frontend side: a sealed, zeroed memfd of the geometry's size, mapped.
pub fn create_region(g: &Geometry) -> Result<(SharedRegion, OwnedFd), LocalError> {
    let fd = memfd_create(c"pvgpu-ring", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).map_err(os("memfd_create"))?;
    let file = File::from(fd);
    file.set_len(g.total_len() as u64).map_err(ios("sizing the shared memory"))?;
    fcntl(&file, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL))
        .map_err(os("sealing the shared memory"))?;
    let map = memmap2::MmapOptions::new().len(g.total_len()).map_raw(&file).map_err(ios("mapping the shared memory"))?;
    let dup = file.try_clone().map_err(ios("duplicating the memfd"))?;
    Ok((SharedRegion::new(MemfdMapping { map, _file: file }), OwnedFd::from(dup)))
}

/// A shared mapping of a memfd at an address of the peer's choosing.
pub struct FixedMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    _file: File,
}

// SAFETY: as for `MemfdMapping`: mapped at `ptr` with `len` bytes until
// dropped (unmapped in `Drop`), backed by a memfd sealed against shrinking.
unsafe impl Mapping for FixedMapping {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the mapping is reached only through raw pointers, from any
// thread; nothing in it is tied to the thread that made it.
unsafe impl Send for FixedMapping {}
// SAFETY: as above.
unsafe impl Sync for FixedMapping {}

impl Drop for FixedMapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes at `ptr`, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.len) };
    }
}

/// Lowest address the backend maps a region at for the frontend: far
/// above the page at 0 (a privileged backend could otherwise be made to
/// map guest memory where a null pointer reads) and the program's image.
pub const MIN_SHARED_ADDRESS: usize = 1 << 32;

/// Maps `file` at exactly `addr`, if nothing is mapped there.
fn map_at(file: &File, addr: usize, len: usize) -> Option<std::ptr::NonNull<u8>> {
    use nix::sys::mman::{MapFlags, ProtFlags, mmap};
    let want = std::num::NonZeroUsize::new(addr)?;
    let len = std::num::NonZeroUsize::new(len)?;
    if addr % 4096 != 0 || addr < MIN_SHARED_ADDRESS || addr.checked_add(len.get()).is_none() {
        return None;
    }
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping (the
    // call fails instead), so no memory of this process changes meaning.
    let p = unsafe {
        mmap(Some(want), len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED | MapFlags::MAP_FIXED_NOREPLACE, file, 0)
    }
    .ok()?;
    if p.as_ptr() as usize != addr {
        // A kernel without MAP_FIXED_NOREPLACE took it as a hint.
        // SAFETY: the mapping just made, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(p, len.get()) };
        return None;
    }
    Some(p.cast())
}

/// Backend side: checks that `fd` is a memfd sealed against shrinking and
/// large enough for `g`, then maps it, at `at` if that address is free.
pub fn map_region(fd: OwnedFd, g: &Geometry, at: Option<usize>) -> Result<SharedRegion, LocalError> {
    let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(|_| LocalError::Memory("not a sealable memfd"))?;
    let seals = SealFlag::from_bits_truncate(seals);
    if !seals.contains(SealFlag::F_SEAL_SHRINK) {
        return Err(LocalError::Memory("memfd is not sealed against shrinking"));
    }
    let file = File::from(fd);
    let meta = file.metadata().map_err(ios("fstat of the memfd"))?;
    if !meta.is_file() || meta.len() < g.total_len() as u64 {
        return Err(LocalError::Memory("memfd is smaller than the geometry"));
    }
    if let Some(ptr) = at.and_then(|a| map_at(&file, a, g.total_len())) {
        return Ok(SharedRegion::new(FixedMapping { ptr, len: g.total_len(), _file: file }));
    }
    let map = memmap2::MmapOptions::new().len(g.total_len()).map_raw(&file).map_err(ios("mapping the shared memory"))?;
    Ok(SharedRegion::new(MemfdMapping { map, _file: file }))
}

/// A doorbell made of two eventfds, watching a socket for the peer's death.
pub struct EventFdNotifier {
    ours: OwnedFd,
    theirs: OwnedFd,
    liveness: Option<OwnedFd>,
}

impl EventFdNotifier {
    /// `ours` is rung by the peer; `theirs` we ring. `liveness`, if given,
    /// is a socket whose hang-up means the peer is gone.
    /// Both must be non-blocking eventfds.
    pub fn new(ours: OwnedFd, theirs: OwnedFd, liveness: Option<OwnedFd>) -> Self {
        EventFdNotifier { ours, theirs, liveness }
    }

    /// Whether the liveness socket shows the peer gone, without blocking.
    pub fn peer_gone(&self) -> bool {
        let Some(s) = &self.liveness else { return false };
        let mut fds = [PollFd::new(s.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(0) => false,
            Ok(_) => socket_closed(s),
            Err(_) => true,
        }
    }
}

fn socket_closed(s: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: recv into a valid 1-byte buffer on a socket we own.
    let n = unsafe { libc::recv(s.as_raw_fd(), b.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    if n == 0 {
        return true;
    }
    n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock
}

impl Notifier for EventFdNotifier {
    fn notify(&self) -> Result<(), NotifyError> {
        match nix::unistd::write(&self.theirs, &1u64.to_ne_bytes()) {
            Ok(_) | Err(nix::Error::EAGAIN) => Ok(()),
            Err(e) => Err(NotifyError::Io(e.into())),
        }
    }

    fn wait(&self, timeout: Option<Duration>) -> Result<Wake, NotifyError> {
        let t = match timeout {
            None => PollTimeout::NONE,
            Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
        };
        let mut fds = vec![PollFd::new(self.ours.as_fd(), PollFlags::POLLIN)];
        if let Some(s) = &self.liveness {
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        let n = match poll(&mut fds, t) {
            Ok(n) => n,
            Err(nix::Error::EINTR) => return Ok(Wake::Notified),
            Err(e) => return Err(NotifyError::Io(e.into())),
        };
        if n == 0 {
            return Ok(Wake::TimedOut);
        }
        let rang = fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLIN));
        let sock_event = fds.get(1).and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        drop(fds);
        if rang {
            // Clear the counter; a concurrent ring is not lost because the
            // caller re-checks the ring after every wake-up.
            let mut b = [0u8; 8];
            let _ = nix::unistd::read(&self.ours, &mut b);
        }
        if sock_event && self.liveness.as_ref().is_some_and(socket_closed) {
            return Err(NotifyError::PeerGone);
        }
        Ok(Wake::Notified)
    }
}

fn new_eventfd() -> Result<OwnedFd, LocalError> {
    let e = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).map_err(os("eventfd"))?;
    Ok(OwnedFd::from(e))
}

fn check_eventfd(fd: &OwnedFd) -> Result<(), LocalError> {
    // An eventfd's /proc link reads "anon_inode:[eventfd]".
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(ios("inspecting a doorbell fd"))?;
    if link.to_string_lossy() != "anon_inode:[eventfd]" {
        return Err(LocalError::Malformed("doorbell fd is not an eventfd"));
    }
    Ok(())
}

/// What the frontend holds after a successful handshake.
pub struct ClientSide {
    /// The region, control page written.
    pub region: SharedRegion,
    /// The geometry accepted.
    pub geometry: Geometry,
    /// Our doorbell, watching the socket.
    pub notifier: EventFdNotifier,
}

/// Frontend side of the handshake on a connected socket.
pub fn client_handshake(sock: UnixStream, g: &Geometry) -> Result<ClientSide, LocalError> {
    g.validate(u64::MAX)?;
    let (region, memfd) = create_region(g)?;
    crate::layout::init_region(&region, g)?;
    let to_backend = new_eventfd()?;
    let to_frontend = new_eventfd()?;
    let hello = LocalHello {
        magic: HELLO_MAGIC.into(),
        version: LOCAL_VERSION.into(),
        req_size: g.req_size.into(),
        rsp_size: g.rsp_size.into(),
        reserved: 0.into(),
        data_size: g.data_size.into(),
        region_addr: (region.as_ptr() as usize as u64).into(),
    };
    let fds = [memfd.as_raw_fd(), to_backend.as_raw_fd(), to_frontend.as_raw_fd()];
    sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(hello.as_bytes())], &[ControlMessage::ScmRights(&fds)], MsgFlags::MSG_NOSIGNAL, None)
        .map_err(os("sending the handshake"))?;
    drop(memfd);
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(ios("socket timeout"))?;
    let mut w = [0u8; core::mem::size_of::<LocalWelcome>()];
    (&sock).read_exact(&mut w).map_err(ios("reading the backend's answer"))?;
    let welcome = LocalWelcome::read_from_bytes(&w).map_err(|_| LocalError::Malformed("short answer"))?;
    if welcome.magic.get() != WELCOME_MAGIC {
        return Err(LocalError::Malformed("bad answer magic"));
    }
    let reason = match welcome.status.get() {
        0 => None,
        1 => Some(Refusal::Geometry),
        2 => Some(Refusal::Memory),
        4 => Some(Refusal::Busy),
        _ => Some(Refusal::Malformed),
    };
    if let Some(reason) = reason {
        return Err(LocalError::Refused { reason, max_data: welcome.max_data.get() });
    }
    sock.set_read_timeout(None).map_err(ios("socket timeout"))?;
    let notifier = EventFdNotifier::new(to_frontend, to_backend, Some(OwnedFd::from(sock)));
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
    /// Our doorbell, watching the socket.
    pub notifier: EventFdNotifier,
}

fn answer(sock: &UnixStream, status: u32, max_data: u64) -> Result<(), LocalError> {
    let w = LocalWelcome { magic: WELCOME_MAGIC.into(), status: status.into(), reserved: 0.into(), max_data: max_data.into() };
    (&*sock).write_all(w.as_bytes()).map_err(ios("answering the handshake"))
}

/// Backend side of the handshake on an accepted socket. `max_data` is the
/// largest data area accepted. With `same_address`, the region is mapped
/// at the frontend's address when that is free (only for a process that
/// serves this one session: the frontend then knows where its memory lies
/// in the process, which must hold nothing of anyone else's). On failure
/// the frontend has been told why (when the socket still works).
pub fn server_handshake(sock: UnixStream, max_data: u64, same_address: bool) -> Result<ServerSide, LocalError> {
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(ios("socket timeout"))?;
    let mut hb = [0u8; core::mem::size_of::<LocalHello>()];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 3]);
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
        let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
        if truncated {
            let _ = answer(&sock, Refusal::Malformed as u32, max_data);
            return Err(LocalError::Malformed("too many fds"));
        }
        (msg.bytes, fds)
    };
    if n < hb.len() {
        (&sock).read_exact(&mut hb[n..]).map_err(ios("reading the handshake"))?;
    }
    let hello = LocalHello::read_from_bytes(&hb).map_err(|_| LocalError::Malformed("short hello"))?;
    if hello.magic.get() != HELLO_MAGIC || hello.version.get() != LOCAL_VERSION || fds.len() != 3 {
        let _ = answer(&sock, Refusal::Malformed as u32, max_data);
        return Err(LocalError::Malformed("bad magic, version or fd count"));
    }
    let g = Geometry { req_size: hello.req_size.get(), rsp_size: hello.rsp_size.get(), data_size: hello.data_size.get() };
    if let Err(e) = g.validate(max_data) {
        let _ = answer(&sock, Refusal::Geometry as u32, max_data);
        return Err(e.into());
    }
    let mut fds = fds.into_iter();
    let (memfd, to_backend, to_frontend) = match (fds.next(), fds.next(), fds.next()) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => unreachable!("length checked above"),
    };
    if let Err(e) = check_eventfd(&to_backend).and_then(|_| check_eventfd(&to_frontend)) {
        let _ = answer(&sock, Refusal::Malformed as u32, max_data);
        return Err(e);
    }
    let at = usize::try_from(hello.region_addr.get()).ok().filter(|_| same_address);
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
    let notifier = EventFdNotifier::new(to_backend, to_frontend, Some(OwnedFd::from(sock)));
    let same_address = at == Some(region.as_ptr() as usize);
    Ok(ServerSide { region, same_address, geometry: g, notifier })
}

/// Refuses a connection during the handshake (for example when the backend
/// is at its session limit).
pub fn refuse(sock: &UnixStream, reason: Refusal, max_data: u64) {
    let _ = answer(sock, reason as u32, max_data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::attach_region;

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

    /// Sends a client hello for 4 KiB channels and data area with `fds`
    /// (region, then the two doorbells).
    fn send_hello(a: &UnixStream, fds: [std::os::fd::RawFd; 3]) {
        let hello = LocalHello {
            magic: HELLO_MAGIC.into(),
            version: LOCAL_VERSION.into(),
            req_size: 4096.into(),
            rsp_size: 4096.into(),
            reserved: 0.into(),
            data_size: 4096.into(),
            region_addr: 0.into(),
        };
        sendmsg::<()>(a.as_raw_fd(), &[IoSlice::new(hello.as_bytes())], &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
            .unwrap();
    }

    #[test]
    fn unsealed_memfd_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 4096 };
        let fd = memfd_create(c"x", MFdFlags::MFD_CLOEXEC).unwrap();
        File::from(fd.try_clone().unwrap()).set_len(g.total_len() as u64).unwrap();
        let e1 = new_eventfd().unwrap();
        let e2 = new_eventfd().unwrap();
        send_hello(&a, [fd.as_raw_fd(), e1.as_raw_fd(), e2.as_raw_fd()]);
        assert!(matches!(server_handshake(b, 1 << 20, true), Err(LocalError::Memory(_))));
    }

    #[test]
    fn non_eventfd_doorbell_is_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 4096 };
        let (_r, memfd) = create_region(&g).unwrap();
        let (x, _y) = UnixStream::pair().unwrap();
        let e2 = new_eventfd().unwrap();
        send_hello(&a, [memfd.as_raw_fd(), x.as_raw_fd(), e2.as_raw_fd()]);
        assert!(matches!(server_handshake(b, 1 << 20, true), Err(LocalError::Malformed(_))));
    }
}
