//! Mapping another domain's grants through `/dev/xen/gntdev` (the Dom0 or
//! backend side of a grant).
//!
//! [`GntDev::map`] hands the kernel all the grant references at once
//! (`IOCTL_GNTDEV_MAP_GRANT_REF` with a variable-length array), which
//! reserves a range of the device's file offsets, then maps that whole range
//! with one `mmap`; the grant-map hypercall happens inside that `mmap`, so a
//! bad reference shows up as an mmap error. A writable mapping needs grants
//! the peer made writable.
//!
//! Teardown is `munmap` then `IOCTL_GNTDEV_UNMAP_GRANT_REF`. The peer's
//! pages are the peer's: everything read from them may change at any time
//! and must be copied out and validated before use.

use crate::XenError;
use crate::abi::{
    GntdevMapGrantRef, GntdevUnmapGrantRef, IOCTL_GNTDEV_MAP_GRANT_REF, IOCTL_GNTDEV_SET_UNMAP_NOTIFY, IOCTL_GNTDEV_UNMAP_GRANT_REF,
    XEN_PAGE_SIZE,
};
use crate::gntalloc::{notify_arg, notify_hint};
use crate::sys::{self, IoctlBuf};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use pvgpu_ring::region::SharedRegion;
use std::ffi::c_void;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

/// The device node.
pub const GNTDEV_PATH: &str = "/dev/xen/gntdev";

/// Most grants one [`GntDev::map`] call maps.
pub const MAX_MAP_REFS: usize = 65536;

const HINT_MISSING: &str = "load the xen-gntdev module (modprobe xen-gntdev); the device exists only when Linux runs under Xen";

/// An open `/dev/xen/gntdev`.
///
/// Closing it releases every mapping made through it, so each
/// [`MappedGrants`] keeps it open until dropped.
#[derive(Debug, Clone)]
pub struct GntDev {
    fd: Arc<OwnedFd>,
}

impl GntDev {
    /// Opens `/dev/xen/gntdev`.
    pub fn open() -> Result<Self, XenError> {
        sys::check_page_size()?;
        Ok(GntDev::from_fd(sys::open_device(GNTDEV_PATH, OFlag::empty(), HINT_MISSING)?))
    }

    /// Uses a descriptor the caller opened on `/dev/xen/gntdev` (or a
    /// stand-in, in tests).
    pub fn from_fd(fd: OwnedFd) -> Self {
        GntDev { fd: Arc::new(fd) }
    }

    /// Maps the pages that domain `domid` granted under `refs` (one page per
    /// reference, in order) into one contiguous range, read-write if
    /// `writable`, else read-only.
    pub fn map(&self, domid: u16, refs: &[u32], writable: bool) -> Result<MappedGrants, XenError> {
        self.map_at(domid, refs, writable, None)
    }

    /// As [`GntDev::map`], at address `at` when that is page-aligned, at
    /// or above [`crate::sys::MIN_SHARED_ADDRESS`] and free (never over a
    /// mapping of this process); elsewhere otherwise.
    pub fn map_at(&self, domid: u16, refs: &[u32], writable: bool, at: Option<usize>) -> Result<MappedGrants, XenError> {
        if refs.is_empty() || refs.len() > MAX_MAP_REFS {
            return Err(XenError::InvalidArgument(format!(
                "cannot map {} grant references: between 1 and {MAX_MAP_REFS} per call",
                refs.len()
            )));
        }
        let pages = refs.len();
        let mut buf = encode_map(domid, refs);
        // SAFETY: the buffer holds the header and all `pages` grant entries,
        // which is what the kernel reads; it writes back the header only.
        let r = unsafe { sys::ioctl(self.fd.as_fd(), IOCTL_GNTDEV_MAP_GRANT_REF, buf.as_mut_ptr()) };
        if let Err(errno) = r {
            return Err(XenError::Ioctl { device: GNTDEV_PATH, op: "IOCTL_GNTDEV_MAP_GRANT_REF", errno, hint: map_hint(errno) });
        }
        let index = buf.get_u64(offset_of!(GntdevMapGrantRef, index));
        let ptr = match sys::mmap_pages(self.fd.as_fd(), pages, index, writable, at) {
            Ok(p) => p,
            Err(errno) => {
                if let Err(e) = unmap_ref(self.fd.as_fd(), index, pages as u32) {
                    tracing::warn!(index, pages, "releasing the gntdev range after a failed mmap: {e}");
                }
                return Err(XenError::Mmap { device: GNTDEV_PATH, pages, errno, hint: mmap_hint(errno) });
            }
        };
        tracing::debug!(domid, pages, index, writable, first_ref = refs[0], "mapped grants");
        Ok(MappedGrants { dev: self.clone(), ptr, pages, index, domid, writable })
    }
}

/// The `IOCTL_GNTDEV_MAP_GRANT_REF` argument: the header and one
/// `{domid, ref}` entry per reference (at least the C struct's size).
pub(crate) fn encode_map(domid: u16, refs: &[u32]) -> IoctlBuf {
    let base = offset_of!(GntdevMapGrantRef, refs);
    let entry = size_of::<crate::abi::GntdevGrantRef>();
    let mut buf = IoctlBuf::new((base + entry * refs.len()).max(size_of::<GntdevMapGrantRef>()));
    buf.put_u32(offset_of!(GntdevMapGrantRef, count), refs.len() as u32);
    for (i, r) in refs.iter().enumerate() {
        buf.put_u32(base + i * entry + offset_of!(crate::abi::GntdevGrantRef, domid), u32::from(domid));
        buf.put_u32(base + i * entry + offset_of!(crate::abi::GntdevGrantRef, r#ref), *r);
    }
    buf
}

fn unmap_ref(fd: BorrowedFd<'_>, index: u64, count: u32) -> Result<(), XenError> {
    let mut op = GntdevUnmapGrantRef { index, count, pad: 0 };
    // SAFETY: `op` is the struct IOCTL_GNTDEV_UNMAP_GRANT_REF reads, alive
    // for the call.
    let r = unsafe { sys::ioctl(fd, IOCTL_GNTDEV_UNMAP_GRANT_REF, (&raw mut op).cast::<c_void>()) };
    r.map(drop).map_err(|errno| XenError::Ioctl { device: GNTDEV_PATH, op: "IOCTL_GNTDEV_UNMAP_GRANT_REF", errno, hint: "" })
}

fn map_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::ENOMEM => "out of memory, or over the gntdev limit (/sys/module/xen_gntdev/parameters/limit)",
        Errno::EINVAL => "the kernel refused the grant count",
        Errno::ENOTTY | Errno::ENOSYS => "the descriptor is not a gntdev device of a matching kernel",
        _ => "",
    }
}

fn mmap_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::EINVAL | Errno::EFAULT | Errno::EPERM => {
            "Xen refused to map a grant: check the domain id and references, that the guest granted them to this domain, and that they are writable if a writable mapping was asked"
        }
        Errno::ENOMEM => "the process is out of address space or the kernel out of memory",
        _ => "",
    }
}

/// Another domain's grants mapped here.
///
/// Dropping it unmaps them. A writable mapping can be wrapped in
/// [`SharedRegion::new`] (or use [`MappedGrants::into_region`]). A
/// read-only mapping presents itself to the [`pvgpu_ring::region::Mapping`]
/// trait as empty, since that trait promises writable memory, so a region
/// over it refuses every access; read it with [`MappedGrants::read`].
pub struct MappedGrants {
    dev: GntDev,
    ptr: NonNull<c_void>,
    pages: usize,
    index: u64,
    domid: u16,
    writable: bool,
}

impl std::fmt::Debug for MappedGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedGrants")
            .field("ptr", &self.ptr)
            .field("pages", &self.pages)
            .field("index", &self.index)
            .field("domid", &self.domid)
            .field("writable", &self.writable)
            .finish()
    }
}

impl MappedGrants {
    /// Number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Length of the mapping in bytes (whether writable or not).
    pub fn byte_len(&self) -> usize {
        self.pages * XEN_PAGE_SIZE
    }

    /// The gntdev file offset of the first page.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The granting domain.
    pub fn domid(&self) -> u16 {
        self.domid
    }

    /// Whether the pages are mapped writable.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Copies `dst.len()` bytes at `offset` out of the mapping. The peer may
    /// be writing them concurrently: validate the copy, never the original.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), XenError> {
        match offset.checked_add(dst.len()) {
            Some(end) if end <= self.byte_len() => {}
            _ => {
                return Err(XenError::InvalidArgument(format!(
                    "read of {:#x}+{:#x} is outside the {:#x}-byte grant mapping",
                    offset,
                    dst.len(),
                    self.byte_len()
                )));
            }
        }
        // SAFETY: the range is inside the mapping (checked above), which is
        // readable and mapped for as long as `self` lives; a racing peer only
        // makes the copied bytes arbitrary.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().cast::<u8>().add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Wraps a writable mapping in a [`SharedRegion`]; refuses a read-only
    /// one.
    pub fn into_region(self) -> Result<SharedRegion, XenError> {
        if !self.writable {
            return Err(XenError::InvalidArgument(
                "a shared region needs a writable grant mapping; map the grants with writable = true".into(),
            ));
        }
        Ok(SharedRegion::new(self))
    }

    /// Asks the kernel to act when this mapping is finally released (this
    /// value dropped, or the process gone): clear the byte at `offset`
    /// (relative to the start of the mapping; writable mappings only) if
    /// `clear_byte`, and signal `event_port` if given. A later call replaces
    /// the notification; `None` and `false` cancel it.
    ///
    /// `event_port` must be a local port bound through `/dev/xen/evtchn`
    /// ([`crate::evtchn::EvtChn`]) in this domain.
    pub fn set_unmap_notify(&self, offset: u64, event_port: Option<u32>, clear_byte: bool) -> Result<(), XenError> {
        let len = self.byte_len() as u64;
        if offset >= len {
            return Err(XenError::InvalidArgument(format!("unmap-notify offset {offset:#x} is outside the {len:#x}-byte grant mapping")));
        }
        if clear_byte && !self.writable {
            return Err(XenError::InvalidArgument("clear-byte unmap notification needs a writable grant mapping".into()));
        }
        let mut op = notify_arg(self.index + offset, event_port, clear_byte);
        // SAFETY: `op` is the struct IOCTL_GNTDEV_SET_UNMAP_NOTIFY reads,
        // alive for the call.
        let r = unsafe { sys::ioctl(self.dev.fd.as_fd(), IOCTL_GNTDEV_SET_UNMAP_NOTIFY, (&raw mut op).cast::<c_void>()) };
        r.map(drop).map_err(|errno| XenError::Ioctl {
            device: GNTDEV_PATH,
            op: "IOCTL_GNTDEV_SET_UNMAP_NOTIFY",
            errno,
            hint: notify_hint(errno, event_port.is_some()),
        })
    }
}

impl Drop for MappedGrants {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `map` with this length, and the
        // value is being dropped, so nothing reaches it any more.
        if let Err(errno) = unsafe { sys::munmap(self.ptr, self.byte_len()) } {
            tracing::warn!(index = self.index, pages = self.pages, "munmap of mapped grants failed: {errno}");
        }
        match unmap_ref(self.dev.fd.as_fd(), self.index, self.pages as u32) {
            Ok(()) => tracing::debug!(index = self.index, pages = self.pages, domid = self.domid, "unmapped grants"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

// SAFETY: for a writable mapping, `ptr` is a MAP_SHARED read-write mapping
// of `len()` bytes made in `map` that stays mapped until `Drop`, and this
// crate never creates Rust references into it. A read-only mapping reports
// a length of 0, so it promises nothing.
unsafe impl pvgpu_ring::region::Mapping for MappedGrants {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr().cast()
    }
    fn len(&self) -> usize {
        if self.writable { self.byte_len() } else { 0 }
    }
}

// SAFETY: the mapping is plain shared memory reached only through raw
// pointers; the other fields are owned values.
unsafe impl Send for MappedGrants {}
// SAFETY: as above; `&self` methods copy out of the mapping or issue
// ioctls on the descriptor.
unsafe impl Sync for MappedGrants {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::UnmapNotify;
    use crate::sys::fake;
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use pvgpu_ring::region::Mapping;

    #[test]
    fn map_argument_encoding() {
        let b = encode_map(3, &[10, 11, 12]);
        assert_eq!(b.len(), 16 + 3 * 8);
        assert_eq!(b.get_u32(0), 3);
        assert_eq!([b.get_u32(16), b.get_u32(20)], [3, 10]);
        assert_eq!([b.get_u32(24), b.get_u32(28)], [3, 11]);
        assert_eq!([b.get_u32(32), b.get_u32(36)], [3, 12]);
        assert_eq!(encode_map(1, &[5]).len(), 24);
    }

    fn fake_device(seen: std::rc::Rc<std::cell::RefCell<Vec<(u32, u32)>>>) -> GntDev {
        let fd = memfd_create(c"fake-gntdev", MFdFlags::MFD_CLOEXEC).unwrap();
        std::fs::File::from(fd.try_clone().unwrap()).set_len(16 * XEN_PAGE_SIZE as u64).unwrap();
        fake::set(move |req, arg| {
            if req == IOCTL_GNTDEV_MAP_GRANT_REF {
                // SAFETY: at least the 24-byte header.
                let hdr = unsafe { IoctlBuf::copy_from_raw(arg, 16) };
                let count = hdr.get_u32(0) as usize;
                // SAFETY: the code under test passes `count` entries.
                let mut full = unsafe { IoctlBuf::copy_from_raw(arg, 16 + 8 * count) };
                for i in 0..count {
                    seen.borrow_mut().push((full.get_u32(16 + 8 * i), full.get_u32(20 + 8 * i)));
                }
                full.put_u64(8, 2 * XEN_PAGE_SIZE as u64);
                // SAFETY: writes back no more than was read.
                unsafe { full.copy_to_raw(arg) };
                Ok(0)
            } else if req == IOCTL_GNTDEV_UNMAP_GRANT_REF {
                // SAFETY: a GntdevUnmapGrantRef.
                let op = unsafe { *(arg as *const GntdevUnmapGrantRef) };
                fake::log(format!("unmap {}@{:#x}", op.count, op.index));
                Ok(0)
            } else if req == IOCTL_GNTDEV_SET_UNMAP_NOTIFY {
                // SAFETY: an UnmapNotify.
                let op = unsafe { *(arg as *const UnmapNotify) };
                fake::log(format!("notify {:#x} {} {}", op.index, op.action, op.event_channel_port));
                Ok(0)
            } else {
                Err(Errno::ENOTTY)
            }
        });
        GntDev::from_fd(fd)
    }

    #[test]
    fn map_sends_all_refs_and_maps_once() {
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let dev = fake_device(seen.clone());
        let m = dev.map(4, &[7, 8, 9], true).unwrap();
        assert_eq!(*seen.borrow(), vec![(4, 7), (4, 8), (4, 9)]);
        assert_eq!(m.index(), 0x2000);
        assert_eq!(Mapping::len(&m), 3 * XEN_PAGE_SIZE);
        m.set_unmap_notify(5, Some(11), true).unwrap();
        let region = m.into_region().unwrap();
        region.write_u64(0, 1).unwrap();
        drop(region);
        let log = fake::clear();
        assert_eq!(log[1], "mmap 3@0x2000");
        assert_eq!(log[3], "notify 0x2005 3 11");
        assert_eq!(&log[4..], &["munmap 3".to_string(), format!("ioctl {IOCTL_GNTDEV_UNMAP_GRANT_REF:#x}"), "unmap 3@0x2000".into()]);
    }

    #[test]
    fn read_only_mappings_refuse_writes() {
        let dev = fake_device(Default::default());
        let m = dev.map(4, &[7], false).unwrap();
        assert_eq!(Mapping::len(&m), 0);
        let mut b = [1u8; 8];
        m.read(4088, &mut b).unwrap();
        assert_eq!(b, [0; 8]);
        assert!(m.read(4089, &mut b).is_err());
        assert!(m.read(usize::MAX, &mut b).is_err());
        assert!(matches!(m.set_unmap_notify(0, None, true), Err(XenError::InvalidArgument(_))));
        assert!(matches!(m.into_region(), Err(XenError::InvalidArgument(_))));
        fake::clear();
    }

    #[test]
    fn ref_counts_are_bounded() {
        let dev = fake_device(Default::default());
        assert!(matches!(dev.map(1, &[], true), Err(XenError::InvalidArgument(_))));
        let many = vec![1u32; MAX_MAP_REFS + 1];
        assert!(matches!(dev.map(1, &many, true), Err(XenError::InvalidArgument(_))));
        fake::set(|_, _| Err(Errno::ENOMEM));
        let e = dev.map(1, &[1], true).unwrap_err();
        assert!(e.to_string().contains("gntdev limit"), "{e}");
        fake::clear();
    }
}
