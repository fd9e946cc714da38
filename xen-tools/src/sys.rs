//! System-call plumbing shared by the device modules: opening a device with
//! a useful error, the one place that calls `ioctl(2)`, an aligned buffer
//! for the variable-length ioctl arguments, mmap of device pages and polls.
//!
//! Under `cfg(test)` the ioctl can be answered by a per-thread fake (see
//! [`fake`]), so the grant and event-channel code is unit-tested without
//! Xen, in the manner of vm-memory's `mmap/xen.rs`.

use crate::XenError;
use crate::abi::XEN_PAGE_SIZE;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::mman::{MapFlags, ProtFlags};
use nix::sys::stat::Mode;
use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Opens a `/dev/xen` device read-write and close-on-exec, turning a
/// missing node into [`XenError::DeviceMissing`] with `hint`.
pub(crate) fn open_device(path: &'static str, extra: OFlag, hint: &'static str) -> Result<OwnedFd, XenError> {
    match nix::fcntl::open(path, OFlag::O_RDWR | OFlag::O_CLOEXEC | extra, Mode::empty()) {
        Ok(fd) => {
            tracing::debug!(path, "opened");
            Ok(fd)
        }
        Err(Errno::ENOENT) => Err(XenError::DeviceMissing { path: path.to_string(), hint }),
        Err(errno) => Err(XenError::Open { path: path.to_string(), errno }),
    }
}

/// Checks that the kernel's pages are Xen's 4 KiB pages, which the mmap
/// offsets and grant counts of gntalloc and gntdev assume.
pub(crate) fn check_page_size() -> Result<(), XenError> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if ps == XEN_PAGE_SIZE as libc::c_long { Ok(()) } else { Err(XenError::PageSize(ps.max(0) as usize)) }
}

/// Calls `ioctl(fd, req, arg)` and returns its non-negative result.
///
/// # Safety
/// `arg` must point to memory that is valid for reads and writes of
/// everything the kernel reads or writes for `req` (the struct the number
/// encodes, plus any variable-length tail the struct announces).
pub(crate) unsafe fn ioctl(fd: BorrowedFd<'_>, req: u32, arg: *mut c_void) -> Result<i32, Errno> {
    #[cfg(test)]
    if let Some(r) = fake::call(req, arg) {
        return r;
    }
    // SAFETY: the caller guarantees that `arg` is valid for `req`; `fd` is
    // a live descriptor for the duration of the borrow.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req as libc::Ioctl, arg) };
    Errno::result(rc)
}

/// An 8-byte-aligned, zeroed byte buffer for an ioctl argument whose size is
/// only known at run time (a header followed by an array). Fields are put
/// and got at byte offsets taken with `offset_of!` on the `abi` structs, in
/// the host's byte order.
pub(crate) struct IoctlBuf {
    words: Vec<u64>,
    len: usize,
}

impl IoctlBuf {
    /// A zeroed buffer of at least `len` bytes.
    pub(crate) fn new(len: usize) -> Self {
        IoctlBuf { words: vec![0; len.div_ceil(8)], len }
    }

    /// Length in bytes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the Vec owns `words.len() * 8 >= len` initialised bytes;
        // u8 has no alignment or validity requirements.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }

    /// Writes `v` at byte offset `off`. The offsets are compile-time layout
    /// offsets within the buffer's size, so an overrun is a bug here.
    pub(crate) fn put<const N: usize>(&mut self, off: usize, v: [u8; N]) {
        self.bytes_mut()[off..off + N].copy_from_slice(&v);
    }

    /// Reads `N` bytes at byte offset `off`.
    pub(crate) fn get<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        b.copy_from_slice(&self.bytes()[off..off + N]);
        b
    }

    /// Writes a u16.
    pub(crate) fn put_u16(&mut self, off: usize, v: u16) {
        self.put(off, v.to_ne_bytes());
    }
    /// Writes a u32.
    pub(crate) fn put_u32(&mut self, off: usize, v: u32) {
        self.put(off, v.to_ne_bytes());
    }
    /// Writes a u64.
    #[cfg(test)]
    pub(crate) fn put_u64(&mut self, off: usize, v: u64) {
        self.put(off, v.to_ne_bytes());
    }
    /// Reads a u32.
    pub(crate) fn get_u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.get(off))
    }
    /// Reads a u64.
    pub(crate) fn get_u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.get(off))
    }

    /// The argument pointer to pass to the ioctl.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_void {
        self.words.as_mut_ptr().cast()
    }

    /// Wraps the memory behind a raw ioctl argument of `len` bytes (what a
    /// fake device sees).
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes and 8-byte aligned.
    #[cfg(test)]
    pub(crate) unsafe fn copy_from_raw(ptr: *const c_void, len: usize) -> Self {
        let mut b = IoctlBuf::new(len);
        // SAFETY: the caller guarantees `len` readable bytes at `ptr`; the
        // buffer holds at least `len` bytes and does not overlap it.
        unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), b.words.as_mut_ptr().cast::<u8>(), len) };
        b
    }

    /// Copies the buffer back over a raw ioctl argument (what a fake device
    /// writes back).
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `self.len()` bytes.
    #[cfg(test)]
    pub(crate) unsafe fn copy_to_raw(&self, ptr: *mut c_void) {
        // SAFETY: the caller guarantees `len` writable bytes at `ptr`.
        unsafe { std::ptr::copy_nonoverlapping(self.words.as_ptr().cast::<u8>(), ptr.cast::<u8>(), self.len) };
    }
}

/// Maps `pages` pages of `fd` at file offset `offset`, shared, readable and
/// (if `writable`) writable.
pub(crate) fn mmap_pages(
    fd: BorrowedFd<'_>,
    pages: usize,
    offset: u64,
    writable: bool,
    at: Option<usize>,
) -> Result<NonNull<c_void>, Errno> {
    let len = pages.checked_mul(XEN_PAGE_SIZE).and_then(NonZeroUsize::new).ok_or(Errno::EINVAL)?;
    let offset = libc::off_t::try_from(offset).map_err(|_| Errno::EOVERFLOW)?;
    let prot = if writable { ProtFlags::PROT_READ | ProtFlags::PROT_WRITE } else { ProtFlags::PROT_READ };
    if let Some(p) = at.and_then(|a| mmap_fixed(fd, a, len, prot, offset)) {
        return Ok(p);
    }
    // SAFETY: a fresh mapping at an address the kernel picks cannot alias
    // any existing Rust object; the caller owns it from here and unmaps it.
    let p = unsafe { nix::sys::mman::mmap(None, len, prot, MapFlags::MAP_SHARED, fd, offset) }?;
    #[cfg(test)]
    fake::log(format!("mmap {pages}@{offset:#x}"));
    Ok(p)
}

/// Lowest address grants are mapped at on a peer's request: far above the
/// page at 0 and the program's image (as the local transport's regions).
pub const MIN_SHARED_ADDRESS: usize = 1 << 32;

/// Maps at exactly `addr`, if it is page-aligned, at or above
/// [`MIN_SHARED_ADDRESS`] and nothing is mapped there; `None` otherwise.
fn mmap_fixed(fd: BorrowedFd<'_>, addr: usize, len: NonZeroUsize, prot: ProtFlags, offset: libc::off_t) -> Option<NonNull<c_void>> {
    let want = NonZeroUsize::new(addr)?;
    if addr % XEN_PAGE_SIZE != 0 || addr < MIN_SHARED_ADDRESS || addr.checked_add(len.get()).is_none() {
        return None;
    }
    let flags = MapFlags::MAP_SHARED | MapFlags::MAP_FIXED_NOREPLACE;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping (the
    // call fails instead), so no memory of this process changes meaning.
    let p = unsafe { nix::sys::mman::mmap(Some(want), len, prot, flags, fd, offset) }.ok()?;
    if p.as_ptr() as usize != addr {
        // A kernel without MAP_FIXED_NOREPLACE took it as a hint.
        // SAFETY: the mapping just made, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(p, len.get()) };
        return None;
    }
    #[cfg(test)]
    fake::log(format!("mmap {}@{offset:#x} at {addr:#x}", len.get() / XEN_PAGE_SIZE));
    Some(p)
}

/// Unmaps what [`mmap_pages`] mapped.
///
/// # Safety
/// `ptr` and `len` must describe a mapping made by [`mmap_pages`] that
/// nothing will access afterwards.
pub(crate) unsafe fn munmap(ptr: NonNull<c_void>, len: usize) -> Result<(), Errno> {
    #[cfg(test)]
    fake::log(format!("munmap {}", len / XEN_PAGE_SIZE));
    // SAFETY: guaranteed by the caller.
    unsafe { nix::sys::mman::munmap(ptr, len) }
}

/// Polls one descriptor for `events` until `deadline` (`None`: forever).
/// Returns the events seen, or an empty set on timeout. EINTR restarts the
/// poll with the remaining time.
pub(crate) fn poll_until(fd: BorrowedFd<'_>, events: PollFlags, deadline: Option<Instant>) -> Result<PollFlags, Errno> {
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so that a sub-millisecond remainder still waits.
                let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(fd.as_fd(), events)];
        match poll(&mut fds, timeout) {
            Ok(0) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(PollFlags::empty());
                }
            }
            Ok(_) => return Ok(fds[0].revents().unwrap_or(PollFlags::empty())),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `Instant::now() + d`, or `None` (forever) if that overflows or `d` is
/// `None`.
pub(crate) fn deadline(d: Option<Duration>) -> Option<Instant> {
    d.and_then(|d| Instant::now().checked_add(d))
}

/// A per-thread fake of the `/dev/xen` ioctls for unit tests.
#[cfg(test)]
pub(crate) mod fake {
    use nix::errno::Errno;
    use std::cell::RefCell;
    use std::ffi::c_void;

    type Handler = Box<dyn FnMut(u32, *mut c_void) -> Result<i32, Errno>>;

    thread_local! {
        static HANDLER: RefCell<Option<Handler>> = const { RefCell::new(None) };
        static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    /// Answers this thread's ioctls with `f` until [`clear`].
    pub(crate) fn set(f: impl FnMut(u32, *mut c_void) -> Result<i32, Errno> + 'static) {
        HANDLER.with(|h| *h.borrow_mut() = Some(Box::new(f)));
        LOG.with(|l| l.borrow_mut().clear());
    }

    /// Stops faking and returns the log of calls.
    pub(crate) fn clear() -> Vec<String> {
        HANDLER.with(|h| h.borrow_mut().take());
        LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
    }

    /// Records an event (ioctl, mmap, munmap) in order.
    pub(crate) fn log(s: String) {
        LOG.with(|l| l.borrow_mut().push(s));
    }

    pub(super) fn call(req: u32, arg: *mut c_void) -> Option<Result<i32, Errno>> {
        let mut f = HANDLER.with(|h| h.borrow_mut().take())?;
        log(format!("ioctl {req:#x}"));
        let r = f(req, arg);
        HANDLER.with(|h| *h.borrow_mut() = Some(f));
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_buf_is_aligned_and_zeroed() {
        let mut b = IoctlBuf::new(20);
        assert_eq!(b.len(), 20);
        assert_eq!(b.as_mut_ptr() as usize % 8, 0);
        assert_eq!(b.get_u32(16), 0);
        b.put_u16(0, 0x1234);
        b.put_u32(16, 7);
        b.put_u64(8, u64::MAX);
        assert_eq!(b.get::<2>(0), 0x1234u16.to_ne_bytes());
        assert_eq!(b.get_u32(16), 7);
        assert_eq!(b.get_u64(8), u64::MAX);
    }

    #[test]
    fn missing_device_says_what_to_do() {
        let e = open_device("/dev/xen/does-not-exist", OFlag::empty(), "load the module").unwrap_err();
        assert_eq!(e.to_string(), "/dev/xen/does-not-exist not found: load the module");
    }

    #[test]
    fn poll_times_out() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let t = Instant::now();
        let r = poll_until(a.as_fd(), PollFlags::POLLIN, deadline(Some(Duration::from_millis(20)))).unwrap();
        assert!(r.is_empty());
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
