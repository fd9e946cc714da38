//! The host test double's interprocess handles and the memory behind
//! them.
//!
//! An allocation lives in a `Vec` until it is exported; then its bytes
//! move into a memfd mapped shared, and the memfd is what the registry
//! hands to the opening session, which maps it too, so both sessions see
//! one set of bytes whether they run on threads of one process or in two
//! workers, as two processes see one allocation on a GPU. Events need no
//! sharing here: the double runs all work at once, so an event is complete
//! whenever another session looks.

use super::HostContext;
use crate::exec::CuRes;
use crate::ipc::IpcObject;
use pvgpu_ring::CuError;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// One allocation's bytes.
pub enum Buf {
    /// The context's own.
    Own(Vec<u8>),
    /// A shared mapping of a memfd: exported, or opened from another
    /// session.
    Shared(Shared),
}

/// A memfd and its shared mapping.
pub struct Shared {
    map: memmap2::MmapRaw,
    fd: Arc<OwnedFd>,
}

impl Shared {
    /// Maps `size` bytes of `fd` shared, if it has that many.
    fn open(fd: Arc<OwnedFd>, size: u64) -> CuRes<Shared> {
        let len = usize::try_from(size).map_err(|_| CuError::INVALID_VALUE)?;
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|_| CuError::INVALID_VALUE)?;
        // A shorter file would fault (SIGBUS) on access past its end.
        if len == 0 || (st.st_size as u64) < size {
            return Err(CuError::INVALID_VALUE);
        }
        let map = memmap2::MmapOptions::new().len(len).map_raw(&*fd).map_err(|_| CuError::OUT_OF_MEMORY)?;
        Ok(Shared { map, fd })
    }

    /// A new memfd holding `bytes`, mapped.
    fn with(bytes: &[u8]) -> CuRes<Shared> {
        let fd = nix::sys::memfd::memfd_create("pvgpu-ipc", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).map_err(|_| CuError::OUT_OF_MEMORY)?;
        nix::unistd::ftruncate(&fd, bytes.len() as i64).map_err(|_| CuError::OUT_OF_MEMORY)?;
        let s = Shared::open(Arc::new(fd), bytes.len() as u64)?;
        // SAFETY: the mapping is `bytes.len()` bytes long, writable, and
        // new: nothing else refers to it yet.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), s.map.as_mut_ptr(), bytes.len()) };
        Ok(s)
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Own(v) => v,
            // SAFETY: the mapping lives as long as `self` and is `len()`
            // bytes. Another session may write it meanwhile, as another
            // process may write shared device memory: the program orders
            // such accesses (events, synchronisation), as on a GPU.
            Buf::Shared(s) => unsafe { std::slice::from_raw_parts(s.map.as_ptr(), s.map.len()) },
        }
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Buf::Own(v) => v,
            // SAFETY: as in `deref`; the mapping is writable.
            Buf::Shared(s) => unsafe { std::slice::from_raw_parts_mut(s.map.as_mut_ptr(), s.map.len()) },
        }
    }
}

impl From<Vec<u8>> for Buf {
    fn from(v: Vec<u8>) -> Self {
        Buf::Own(v)
    }
}

impl Buf {
    /// `len` bytes of memory another process handed over in place.
    pub(super) fn handed(fd: OwnedFd, len: u64) -> CuRes<Buf> {
        Ok(Buf::Shared(Shared::open(Arc::new(fd), len)?))
    }

    /// The memfd behind these bytes, moving them into one first.
    fn share(&mut self) -> CuRes<Arc<OwnedFd>> {
        if let Buf::Own(v) = self {
            *self = Buf::Shared(Shared::with(v)?);
        }
        match self {
            Buf::Shared(s) => Ok(s.fd.clone()),
            Buf::Own(_) => Err(CuError::UNKNOWN),
        }
    }
}

impl HostContext {
    pub(super) fn export_mem(&mut self, ptr: u64) -> CuRes<IpcObject> {
        self.ok()?;
        let buf = self.mem.allocs.get_mut(&ptr).ok_or(CuError::INVALID_VALUE)?;
        Ok(IpcObject { bytes: [0; 64], fd: Some(buf.share()?) })
    }

    pub(super) fn open_mem(&mut self, o: &IpcObject, size: u64) -> CuRes<u64> {
        self.ok()?;
        let fd = o.fd.clone().ok_or(CuError::INVALID_VALUE)?;
        let shared = Shared::open(fd, size)?;
        let addr = self.mem.reserve(size).ok_or(CuError::OUT_OF_MEMORY)?;
        self.mem.allocs.insert(addr, Buf::Shared(shared));
        self.opened.insert(addr);
        Ok(addr)
    }

    /// The memfd of physical memory `handle`, wherever its bytes are now
    /// (with the handle, or at the address it is mapped at).
    pub(super) fn export_phys(&mut self, handle: u64) -> CuRes<IpcObject> {
        self.ok()?;
        let at = self.mapped.iter().find(|(_, h)| **h == handle).map(|(p, _)| *p);
        let buf = match at {
            Some(p) => self.mem.allocs.get_mut(&p),
            None => self.phys.get_mut(&handle).and_then(|p| p.bytes_mut()),
        };
        Ok(IpcObject { bytes: [0; 64], fd: Some(buf.ok_or(CuError::INVALID_VALUE)?.share()?) })
    }

    /// Physical memory of another session: its memfd, mapped, as a handle
    /// of this context (not counted here: it is the exporter's).
    pub(super) fn import_phys(&mut self, o: &IpcObject, size: u64) -> CuRes<u64> {
        self.ok()?;
        let fd = o.fd.clone().ok_or(CuError::INVALID_VALUE)?;
        let shared = Shared::open(fd, size)?;
        let h = self.handle();
        self.phys.insert(h, super::vmm::Phys::imported(size, Buf::Shared(shared)));
        Ok(h)
    }

    /// The memfds of the allocations `ranges` names, for another process
    /// to map in place (a migration): each moved into its memfd first.
    pub(super) fn hand_over_mem(&mut self, ranges: &[(u64, u64)]) -> CuRes<Vec<crate::exec::HandedPiece>> {
        self.ok()?;
        let mut pieces = Vec::with_capacity(ranges.len());
        for &(address, length) in ranges {
            let buf = self.mem.allocs.get_mut(&address).filter(|b| b.len() as u64 == length).ok_or(CuError::INVALID_VALUE)?;
            let fd = buf.share()?.try_clone().map_err(|_| CuError::OUT_OF_MEMORY)?;
            pieces.push(crate::exec::HandedPiece { address, length, fd });
        }
        Ok(pieces)
    }

    pub(super) fn close_mem(&mut self, ptr: u64) -> CuRes<()> {
        if !self.opened.remove(&ptr) {
            return Err(CuError::INVALID_VALUE);
        }
        self.mem.allocs.remove(&ptr);
        Ok(())
    }
}
