//! Sharing pages with another domain through `/dev/xen/gntalloc` (the
//! guest side of a grant).
//!
//! [`GntAlloc::share`] asks the kernel for `pages` zeroed pages granted to
//! one domain (`IOCTL_GNTALLOC_ALLOC_GREF`, one call for all pages), then
//! maps them into this process at the file offset the kernel returned. The
//! grant references go to the peer (through XenStore), which maps them with
//! `/dev/xen/gntdev` ([`crate::gntdev`]).
//!
//! Teardown is `munmap` then `IOCTL_GNTALLOC_DEALLOC_GREF`. The kernel frees
//! a page only once the peer has unmapped it too: Xen does not let a domain
//! revoke a grant that is in use, so the memory lives on (and counts against
//! the gntalloc limit) until the peer lets go. An unmap notification
//! ([`GrantedPages::set_unmap_notify`]) tells the peer when this side is
//! gone, even if the process dies.

use crate::XenError;
use crate::abi::{
    GNTALLOC_FLAG_WRITABLE, GntallocAllocGref, GntallocDeallocGref, IOCTL_GNTALLOC_ALLOC_GREF, IOCTL_GNTALLOC_DEALLOC_GREF,
    IOCTL_GNTALLOC_SET_UNMAP_NOTIFY, UNMAP_NOTIFY_CLEAR_BYTE, UNMAP_NOTIFY_SEND_EVENT, UnmapNotify, XEN_PAGE_SIZE,
};
use crate::sys::{self, IoctlBuf};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use std::ffi::c_void;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

/// The device node.
pub const GNTALLOC_PATH: &str = "/dev/xen/gntalloc";

/// Most pages one [`GntAlloc::share`] call grants. The kernel's own limit
/// (the `limit` parameter of the xen_gntalloc module, 1024 pages by
/// default) is usually lower.
pub const MAX_SHARE_PAGES: usize = 65536;

const HINT_MISSING: &str =
    "load the xen-gntalloc module (modprobe xen-gntalloc); the device exists only in a Linux guest running under Xen";

/// An open `/dev/xen/gntalloc`.
///
/// Closing it releases this process's hold on every grant made through it,
/// so each [`GrantedPages`] keeps it open until dropped.
#[derive(Debug, Clone)]
pub struct GntAlloc {
    fd: Arc<OwnedFd>,
}

impl GntAlloc {
    /// Opens `/dev/xen/gntalloc`.
    pub fn open() -> Result<Self, XenError> {
        sys::check_page_size()?;
        Ok(GntAlloc::from_fd(sys::open_device(GNTALLOC_PATH, OFlag::empty(), HINT_MISSING)?))
    }

    /// Uses a descriptor the caller opened on `/dev/xen/gntalloc` (or a
    /// stand-in, in tests).
    pub fn from_fd(fd: OwnedFd) -> Self {
        GntAlloc { fd: Arc::new(fd) }
    }

    /// Grants `pages` zeroed pages to domain `domid` (writable by it if
    /// `writable`; this side can always write them) and maps them here.
    pub fn share(&self, domid: u16, pages: usize, writable: bool) -> Result<GrantedPages, XenError> {
        if pages == 0 || pages > MAX_SHARE_PAGES {
            return Err(XenError::InvalidArgument(format!("cannot share {pages} pages: between 1 and {MAX_SHARE_PAGES} per call")));
        }
        let mut buf = encode_alloc(domid, pages as u32, writable);
        // SAFETY: the buffer holds the header and room for `pages` grant
        // references after it, which is all the kernel reads and writes.
        let r = unsafe { sys::ioctl(self.fd.as_fd(), IOCTL_GNTALLOC_ALLOC_GREF, buf.as_mut_ptr()) };
        if let Err(errno) = r {
            return Err(XenError::Ioctl { device: GNTALLOC_PATH, op: "IOCTL_GNTALLOC_ALLOC_GREF", errno, hint: alloc_hint(errno) });
        }
        let (index, refs) = decode_alloc(&buf, pages);
        // The grants exist from here on: every failure path must drop them.
        let ptr = match sys::mmap_pages(self.fd.as_fd(), pages, index, true, None) {
            Ok(p) => p,
            Err(errno) => {
                if let Err(e) = dealloc(self.fd.as_fd(), index, pages as u32) {
                    tracing::warn!(index, pages, "releasing grants after a failed mmap: {e}");
                }
                return Err(XenError::Mmap { device: GNTALLOC_PATH, pages, errno, hint: mmap_hint(errno) });
            }
        };
        let len = pages * XEN_PAGE_SIZE;
        // SAFETY: `ptr` is a fresh writable mapping of `len` bytes that
        // nothing else in this process references. The kernel allocates the
        // pages zeroed; clearing them again makes that a property of this
        // type rather than of the kernel version (the references are not
        // published yet, so the peer has no business writing them).
        unsafe { std::ptr::write_bytes(ptr.as_ptr().cast::<u8>(), 0, len) };
        tracing::debug!(domid, pages, index, writable, first_ref = refs[0], "granted pages");
        Ok(GrantedPages { dev: self.clone(), ptr, pages, index, refs })
    }
}

/// The `IOCTL_GNTALLOC_ALLOC_GREF` argument for `count` pages: the header
/// and `count` grant-reference slots (at least the C struct's size).
pub(crate) fn encode_alloc(domid: u16, count: u32, writable: bool) -> IoctlBuf {
    let len = (offset_of!(GntallocAllocGref, gref_ids) + 4 * count as usize).max(size_of::<GntallocAllocGref>());
    let mut buf = IoctlBuf::new(len);
    buf.put_u16(offset_of!(GntallocAllocGref, domid), domid);
    buf.put_u16(offset_of!(GntallocAllocGref, flags), if writable { GNTALLOC_FLAG_WRITABLE } else { 0 });
    buf.put_u32(offset_of!(GntallocAllocGref, count), count);
    buf
}

/// The mmap index and the `pages` grant references the kernel wrote back.
pub(crate) fn decode_alloc(buf: &IoctlBuf, pages: usize) -> (u64, Vec<u32>) {
    let index = buf.get_u64(offset_of!(GntallocAllocGref, index));
    let refs = (0..pages).map(|i| buf.get_u32(offset_of!(GntallocAllocGref, gref_ids) + 4 * i)).collect();
    (index, refs)
}

fn dealloc(fd: BorrowedFd<'_>, index: u64, count: u32) -> Result<(), XenError> {
    let mut op = GntallocDeallocGref { index, count };
    // SAFETY: `op` is the struct IOCTL_GNTALLOC_DEALLOC_GREF reads, alive
    // for the call.
    let r = unsafe { sys::ioctl(fd, IOCTL_GNTALLOC_DEALLOC_GREF, (&raw mut op).cast::<c_void>()) };
    r.map(drop).map_err(|errno| XenError::Ioctl { device: GNTALLOC_PATH, op: "IOCTL_GNTALLOC_DEALLOC_GREF", errno, hint: "" })
}

fn alloc_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::ENOSPC => {
            "out of grants: the xen_gntalloc page limit (/sys/module/xen_gntalloc/parameters/limit, default 1024) or this domain's grant table (max_grant_frames in the xl config) is exhausted"
        }
        Errno::ENOMEM => "the kernel is out of memory",
        Errno::ENOTTY | Errno::ENOSYS | Errno::EINVAL => "the descriptor is not a gntalloc device of a matching kernel",
        _ => "",
    }
}

fn mmap_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::ENOENT => "the kernel has no grants at the offset it returned (concurrent dealloc on this descriptor?)",
        Errno::ENOMEM => "the process is out of address space or the kernel out of memory",
        _ => "",
    }
}

/// Pages granted to another domain and mapped here, read-write.
///
/// Dropping it unmaps the pages and releases the grants (the kernel frees
/// them once the peer has unmapped them as well). Wrap it in
/// [`pvgpu_ring::region::SharedRegion::new`] to carve a ring out of it.
pub struct GrantedPages {
    dev: GntAlloc,
    ptr: NonNull<c_void>,
    pages: usize,
    index: u64,
    refs: Vec<u32>,
}

impl std::fmt::Debug for GrantedPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantedPages").field("ptr", &self.ptr).field("pages", &self.pages).field("index", &self.index).finish()
    }
}

impl GrantedPages {
    /// The grant references, one per page, in order.
    pub fn refs(&self) -> &[u32] {
        &self.refs
    }

    /// Number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// The gntalloc file offset of the first page.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Asks the kernel to act when these pages are finally released (this
    /// value dropped, or the process gone): clear the byte at `offset`
    /// (relative to the start of the mapping) if `clear_byte`, and signal
    /// `event_port` if given. The notification belongs to the page holding
    /// `offset`; a later call replaces it for that page. `None` and `false`
    /// cancel it.
    ///
    /// `event_port` must be a local port bound through `/dev/xen/evtchn`
    /// ([`crate::evtchn::EvtChn`]) in this domain.
    pub fn set_unmap_notify(&self, offset: u64, event_port: Option<u32>, clear_byte: bool) -> Result<(), XenError> {
        self.unmap_notice().set(offset, event_port, clear_byte)
    }

    /// A handle that sets these pages' unmap notification
    /// ([`GrantedPages::set_unmap_notify`]) after they were handed to a
    /// region.
    pub fn unmap_notice(&self) -> UnmapNotice {
        UnmapNotice { dev: self.dev.clone(), index: self.index, len: (self.pages * XEN_PAGE_SIZE) as u64 }
    }
}

/// Sets the unmap notification of granted pages ([`GrantedPages::unmap_notice`]).
#[derive(Debug, Clone)]
pub struct UnmapNotice {
    dev: GntAlloc,
    index: u64,
    len: u64,
}

impl UnmapNotice {
    /// As [`GrantedPages::set_unmap_notify`]. Changing it releases the
    /// kernel's hold on the port named before, so that the port can be
    /// unbound for good.
    pub fn set(&self, offset: u64, event_port: Option<u32>, clear_byte: bool) -> Result<(), XenError> {
        if offset >= self.len {
            return Err(XenError::InvalidArgument(format!(
                "unmap-notify offset {offset:#x} is outside the {:#x}-byte grant mapping",
                self.len
            )));
        }
        let mut op = notify_arg(self.index + offset, event_port, clear_byte);
        // SAFETY: `op` is the struct IOCTL_GNTALLOC_SET_UNMAP_NOTIFY reads,
        // alive for the call.
        let r = unsafe { sys::ioctl(self.dev.fd.as_fd(), IOCTL_GNTALLOC_SET_UNMAP_NOTIFY, (&raw mut op).cast::<c_void>()) };
        r.map(drop).map_err(|errno| XenError::Ioctl {
            device: GNTALLOC_PATH,
            op: "IOCTL_GNTALLOC_SET_UNMAP_NOTIFY",
            errno,
            hint: notify_hint(errno, event_port.is_some()),
        })
    }
}

/// The unmap-notify argument (same layout for gntalloc and gntdev).
pub(crate) fn notify_arg(index: u64, event_port: Option<u32>, clear_byte: bool) -> UnmapNotify {
    let mut action = 0;
    if clear_byte {
        action |= UNMAP_NOTIFY_CLEAR_BYTE;
    }
    if event_port.is_some() {
        action |= UNMAP_NOTIFY_SEND_EVENT;
    }
    UnmapNotify { index, action, event_channel_port: event_port.unwrap_or(0) }
}

pub(crate) fn notify_hint(errno: Errno, with_event: bool) -> &'static str {
    match errno {
        Errno::EINVAL if with_event => "the event channel must be a local port bound through /dev/xen/evtchn in this domain",
        Errno::ENOENT => "no grant at that offset",
        _ => "",
    }
}

impl Drop for GrantedPages {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `share` with this length, and the
        // value is being dropped, so nothing reaches it any more (the
        // `Mapping` contract ends here).
        if let Err(errno) = unsafe { sys::munmap(self.ptr, self.pages * XEN_PAGE_SIZE) } {
            tracing::warn!(index = self.index, pages = self.pages, "munmap of granted pages failed: {errno}");
        }
        match dealloc(self.dev.fd.as_fd(), self.index, self.pages as u32) {
            Ok(()) => tracing::debug!(index = self.index, pages = self.pages, "released granted pages"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

// SAFETY: `ptr` is a MAP_SHARED mapping of `pages` pages, readable and
// writable, made in `share`; it stays mapped at that address until `Drop`,
// and this crate never creates Rust references into it.
unsafe impl pvgpu_ring::region::Mapping for GrantedPages {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr().cast()
    }
    fn len(&self) -> usize {
        self.pages * XEN_PAGE_SIZE
    }
}

// SAFETY: the mapping is plain shared memory reached only through raw
// pointers (by `Mapping` users, who synchronise with atomics); the other
// fields are owned values.
unsafe impl Send for GrantedPages {}
// SAFETY: as above; `&self` methods only issue ioctls on the descriptor.
unsafe impl Sync for GrantedPages {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake;
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use pvgpu_ring::region::{Mapping, SharedRegion};

    #[test]
    fn alloc_argument_encoding() {
        let b = encode_alloc(7, 3, true);
        assert_eq!(b.len(), 16 + 3 * 4);
        assert_eq!(b.get::<2>(0), 7u16.to_ne_bytes());
        assert_eq!(b.get::<2>(2), GNTALLOC_FLAG_WRITABLE.to_ne_bytes());
        assert_eq!(b.get_u32(4), 3);
        // One page still gets the whole C struct.
        assert_eq!(encode_alloc(0, 1, false).len(), 24);
        assert_eq!(encode_alloc(0, 1, false).get::<2>(2), [0, 0]);
        assert_eq!(notify_arg(0x1005, Some(9), true), UnmapNotify { index: 0x1005, action: 3, event_channel_port: 9 });
        assert_eq!(notify_arg(0, None, false).action, 0);
    }

    /// A fake gntalloc on a memfd: ALLOC hands out offsets and references,
    /// mmap maps the memfd at that offset.
    fn fake_device(pages_capacity: usize) -> GntAlloc {
        let fd = memfd_create(c"fake-gntalloc", MFdFlags::MFD_CLOEXEC).unwrap();
        std::fs::File::from(fd.try_clone().unwrap()).set_len((pages_capacity * XEN_PAGE_SIZE) as u64).unwrap();
        let mut next_index = 0u64;
        fake::set(move |req, arg| {
            if req == IOCTL_GNTALLOC_ALLOC_GREF {
                // SAFETY: the code under test passes a buffer of at least
                // the header's size, 8-aligned.
                let hdr = unsafe { IoctlBuf::copy_from_raw(arg, 16) };
                let count = hdr.get_u32(4) as usize;
                assert_eq!(hdr.get::<2>(0), 5u16.to_ne_bytes(), "domid");
                let mut out = IoctlBuf::new(16 + 4 * count);
                out.put(0, hdr.get::<8>(0));
                out.put_u64(8, next_index);
                for i in 0..count {
                    out.put_u32(16 + 4 * i, 100 + i as u32);
                }
                // SAFETY: the buffer has room for `count` references.
                unsafe { out.copy_to_raw(arg) };
                next_index += (count * XEN_PAGE_SIZE) as u64;
                Ok(0)
            } else if req == IOCTL_GNTALLOC_DEALLOC_GREF {
                // SAFETY: a GntallocDeallocGref.
                let op = unsafe { *(arg as *const GntallocDeallocGref) };
                fake::log(format!("dealloc {}@{:#x}", op.count, op.index));
                Ok(0)
            } else if req == IOCTL_GNTALLOC_SET_UNMAP_NOTIFY {
                // SAFETY: an UnmapNotify.
                let op = unsafe { *(arg as *const UnmapNotify) };
                fake::log(format!("notify {:#x} {} {}", op.index, op.action, op.event_channel_port));
                Ok(0)
            } else {
                Err(Errno::ENOTTY)
            }
        });
        GntAlloc::from_fd(fd)
    }

    #[test]
    fn share_maps_at_the_returned_index_and_releases_in_order() {
        let dev = fake_device(8);
        let first = dev.share(5, 1, true).unwrap();
        let g = dev.share(5, 3, true).unwrap();
        assert_eq!(g.refs(), &[100, 101, 102]);
        assert_eq!(g.index(), XEN_PAGE_SIZE as u64);
        assert_eq!(g.len(), 3 * XEN_PAGE_SIZE);
        g.set_unmap_notify(2 * XEN_PAGE_SIZE as u64 + 1, Some(9), true).unwrap();
        assert!(matches!(g.set_unmap_notify(3 * XEN_PAGE_SIZE as u64, None, true), Err(XenError::InvalidArgument(_))));
        let region = SharedRegion::new(g);
        region.write_u64(8, 0xfeed).unwrap();
        assert_eq!(region.read_u64(8).unwrap(), 0xfeed);
        drop(region);
        drop(first);
        let log = fake::clear();
        let want = [
            format!("ioctl {IOCTL_GNTALLOC_ALLOC_GREF:#x}"),
            "mmap 1@0x0".into(),
            format!("ioctl {IOCTL_GNTALLOC_ALLOC_GREF:#x}"),
            "mmap 3@0x1000".into(),
            format!("ioctl {IOCTL_GNTALLOC_SET_UNMAP_NOTIFY:#x}"),
            "notify 0x3001 3 9".into(),
            "munmap 3".into(),
            format!("ioctl {IOCTL_GNTALLOC_DEALLOC_GREF:#x}"),
            "dealloc 3@0x1000".into(),
            "munmap 1".into(),
            format!("ioctl {IOCTL_GNTALLOC_DEALLOC_GREF:#x}"),
            "dealloc 1@0x0".into(),
        ];
        assert_eq!(log, want);
    }

    #[test]
    fn failed_mmap_releases_the_grants() {
        // The fake returns an index beyond off_t, so the mmap fails.
        let dev = fake_device(1);
        fake::set(|req, arg| {
            if req == IOCTL_GNTALLOC_ALLOC_GREF {
                let mut out = IoctlBuf::new(24);
                out.put(0, [5, 0, 0, 0, 1, 0, 0, 0]);
                out.put_u64(8, u64::MAX - 4095);
                // SAFETY: the buffer is at least 24 bytes.
                unsafe { out.copy_to_raw(arg) };
                Ok(0)
            } else {
                Ok(0)
            }
        });
        let e = dev.share(5, 1, false).unwrap_err();
        assert!(matches!(e, XenError::Mmap { .. }), "{e}");
        let log = fake::clear();
        assert_eq!(log.last().unwrap(), &format!("ioctl {IOCTL_GNTALLOC_DEALLOC_GREF:#x}"));
    }

    #[test]
    fn bad_counts_and_errors_are_reported() {
        let dev = fake_device(1);
        assert!(matches!(dev.share(5, 0, true), Err(XenError::InvalidArgument(_))));
        assert!(matches!(dev.share(5, MAX_SHARE_PAGES + 1, true), Err(XenError::InvalidArgument(_))));
        fake::set(|_, _| Err(Errno::ENOSPC));
        let e = dev.share(5, 1, true).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        fake::clear();
    }
}
