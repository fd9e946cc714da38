//! Mirrored host memory, the client's side: over a transport that shares no
//! memory with the backend (TCP), page-locked memory the device must reach
//! through the program's own pointer is held again in the backend at the
//! same address ([`pvgpu_ring::proto::HostMirrorMap`]). The connection keeps
//! the two coherent: before it sends a call it sends what the program
//! changed since the last time (compared with what the backend was last
//! sent or told), and after a call that may have let device work finish
//! (a synchronisation, a query, a copy to the host) it pulls what the
//! device changed and writes it into the program's memory.
//!
//! The cost is a comparison of every mirrored byte at each call and one
//! round trip after each synchronising call, so only memory the device is
//! seen to reach is mirrored (see the drop-in library). The program's
//! other threads may write the memory meanwhile: it is read and written
//! with relaxed atomic accesses, so a concurrent write is a race on values
//! (as on a GPU), never undefined behaviour.
//!
//! Ordinary (pageable) memory a graph copies from or to is mirrored too
//! ([`Client::mirror_pageable`]): the program may unmap it while the mirror
//! lives (a graph that will not run again needs none of it), so it is read
//! and written through the kernel (`process_vm_readv`/`writev` on this
//! process), which fails instead of faulting; a range that is gone is
//! skipped until something is mapped there again. Only graphs read such
//! memory, so the program's changes to it are sent before a graph launch
//! and before the answer to a host call, not before every call.

use pvgpu_ring::proto::{MirrorPullRep, MirrorWriteHead, changed_runs};
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest piece of one `HostMirrorWrite`.
const WRITE_PIECE: usize = 1 << 20;
/// Unchanged bytes between two changed runs that still go in one write.
const JOIN_GAP: usize = 64;

/// One mirrored range.
struct Mirror {
    ptr: usize,
    /// What the backend holds as far as the client knows.
    known: Vec<u8>,
    /// Ordinary memory of the program, which may be unmapped under it.
    pageable: bool,
}

/// Reads `len` bytes at `ptr` of this process through the kernel: `None`
/// if any of them is not mapped readable.
fn read_own(ptr: usize, len: usize) -> Option<Vec<u8>> {
    use nix::sys::uio::{RemoteIoVec, process_vm_readv};
    let mut out = vec![0u8; len];
    let remote = [RemoteIoVec { base: ptr, len }];
    let n = process_vm_readv(nix::unistd::Pid::this(), &mut [std::io::IoSliceMut::new(&mut out)], &remote).ok()?;
    (n == len).then_some(out)
}

/// Writes `bytes` at `ptr` of this process through the kernel; whether all
/// of them were written.
fn write_own(ptr: usize, bytes: &[u8]) -> bool {
    use nix::sys::uio::{RemoteIoVec, process_vm_writev};
    let remote = [RemoteIoVec { base: ptr, len: bytes.len() }];
    process_vm_writev(nix::unistd::Pid::this(), &[std::io::IoSlice::new(bytes)], &remote).is_ok_and(|n| n == bytes.len())
}

impl Mirror {
    /// The program's bytes now (`None`: a pageable range is gone).
    fn now(&self) -> Option<Vec<u8>> {
        if self.pageable {
            return read_own(self.ptr, self.known.len());
        }
        let mut out = vec![0u8; self.known.len()];
        for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
            // SAFETY: the range is live and 8-aligned (page-aligned start,
            // page-multiple length) while mirrored (the library unmirrors
            // before it frees); relaxed atomic loads (Release/Acquire pairs
            // are not needed: the program orders its own writes before the
            // call that sends them).
            let v = unsafe { AtomicU64::from_ptr((self.ptr as *mut u64).add(i)) }.load(Ordering::Relaxed);
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
        Some(out)
    }

    /// Writes what the device changed of `bytes` (those that differ from
    /// what both sides last agreed on) at offset `off` of the program's
    /// memory. A pulled range may join changed runs across a few unchanged
    /// bytes; the program may have written those since, so they are left
    /// alone.
    fn store_changed(&mut self, off: usize, bytes: &[u8]) {
        for (start, len) in changed_runs(bytes, &self.known[off..off + bytes.len()], 0, usize::MAX) {
            self.store(off + start, &bytes[start..start + len]);
        }
    }

    /// Writes `bytes` at offset `off` of the program's memory.
    fn store(&mut self, off: usize, bytes: &[u8]) {
        if self.pageable {
            if write_own(self.ptr + off, bytes) {
                self.known[off..off + bytes.len()].copy_from_slice(bytes);
            }
            return;
        }
        for (i, b) in bytes.iter().enumerate() {
            let at = off + i;
            // SAFETY: inside the live range (the caller checked); relaxed
            // byte stores, as above.
            unsafe { std::sync::atomic::AtomicU8::from_ptr((self.ptr as *mut u8).add(at)) }.store(*b, Ordering::Relaxed);
        }
        self.known[off..off + bytes.len()].copy_from_slice(bytes);
    }
}

/// The connection's mirrors.
#[derive(Default)]
pub(crate) struct Mirrors {
    list: Vec<Mirror>,
}

impl Mirrors {
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Starts tracking `[ptr, ptr+len)`, which the backend holds zeroed.
    pub(crate) fn add(&mut self, ptr: usize, len: usize, pageable: bool) {
        self.list.push(Mirror { ptr, known: vec![0; len], pageable });
    }

    /// Stops tracking the mirror at `ptr`.
    pub(crate) fn remove(&mut self, ptr: usize) -> bool {
        let before = self.list.len();
        self.list.retain(|m| m.ptr != ptr);
        self.list.len() != before
    }

    /// The mirrors that overlap `[start, end)`: (start, length, pageable).
    pub(crate) fn overlapping(&self, start: usize, end: usize) -> Vec<(usize, usize, bool)> {
        self.list.iter().filter(|m| m.ptr < end && start < m.ptr + m.known.len()).map(|m| (m.ptr, m.known.len(), m.pageable)).collect()
    }

    /// Whether `[ptr, ptr+len)` lies in a mirror.
    pub(crate) fn covers(&self, ptr: usize, len: usize) -> bool {
        self.list.iter().any(|m| ptr >= m.ptr && ptr.saturating_add(len) <= m.ptr + m.known.len())
    }

    /// What the program changed: (head, bytes) of each write to send, each
    /// at most `piece` bytes; the backend is then assumed to hold them.
    /// Pageable mirrors only with `pageable` (only graphs read them).
    pub(crate) fn changes(&mut self, piece: usize, pageable: bool) -> Vec<(MirrorWriteHead, Vec<u8>)> {
        let piece = piece.clamp(1, WRITE_PIECE);
        let mut out = Vec::new();
        for m in self.list.iter_mut().filter(|m| pageable || !m.pageable) {
            // Pageable memory the program unmapped is skipped until it is
            // mapped again (a graph may still name it).
            let Some(now) = m.now() else { continue };
            if now == m.known {
                continue;
            }
            for (start, len) in changed_runs(&now, &m.known, JOIN_GAP, piece) {
                let head = MirrorWriteHead { ptr: ((m.ptr + start) as u64).into(), len: (len as u64).into() };
                out.push((head, now[start..start + len].to_vec()));
            }
            m.known = now;
        }
        out
    }

    /// Bytes of page-locked memory mirrored (what a look at the program's
    /// changes compares).
    pub(crate) fn page_locked_bytes(&self) -> usize {
        self.list.iter().filter(|m| !m.pageable).map(|m| m.known.len()).sum()
    }

    /// Writes what the device changed into the program's memory.
    pub(crate) fn apply(&mut self, rep: &MirrorPullRep) {
        for (ptr, bytes) in &rep.ranges {
            let ptr = *ptr as usize;
            if let Some(m) = self.list.iter_mut().find(|m| ptr >= m.ptr && ptr.saturating_add(bytes.len()) <= m.ptr + m.known.len()) {
                let off = ptr - m.ptr;
                m.store_changed(off, bytes);
            }
        }
    }
}

impl crate::Client {
    /// Mirrors the program's page-locked memory `[ptr, ptr+len)` (start and
    /// length page-aligned) in the backend, mapped for the device at the
    /// same address, and keeps the two coherent from now on; returns the
    /// device address (`ptr`). For transports without shared memory (TCP).
    ///
    /// # Safety
    /// The range must stay mapped, readable and writable until
    /// [`Client::unmirror_host`].
    pub unsafe fn mirror_host(&self, ptr: *mut u8, len: usize) -> crate::Result<u64> {
        let mut c = self.conn();
        if c.mirrors.covers(ptr as usize, len) {
            return Ok(ptr as u64);
        }
        let map =
            pvgpu_ring::proto::HostMirrorMap { ptr: (ptr as u64).into(), len: (len as u64).into(), pageable: 0.into(), reserved: 0.into() };
        let rep = c.call(&map)?;
        c.mirrors.add(ptr as usize, len, false);
        drop(c);
        self.keep_mirrors();
        Ok(rep.value.get())
    }

    /// Mirrors the pages of ordinary memory `[ptr, ptr+len)` of the
    /// program (a graph copies from or to it at every launch) at the same
    /// address, for the device, as one mirror (pageable mirrors it overlaps
    /// are merged into it, after their device changes are pulled), and
    /// keeps it coherent as page-locked mirrors are. The program may unmap
    /// the memory later; its mirror is then dropped.
    pub fn mirror_pageable(&self, ptr: *const u8, len: usize) -> crate::Result<()> {
        const PAGE: usize = 4096;
        let mut start = (ptr as usize) & !(PAGE - 1);
        let mut end = (ptr as usize).saturating_add(len.max(1)).next_multiple_of(PAGE);
        let mut c = self.conn();
        if c.mirrors.covers(ptr as usize, len.max(1)) {
            return Ok(());
        }
        let overlapping = c.mirrors.overlapping(start, end);
        if overlapping.iter().any(|&(_, _, pageable)| !pageable) {
            // Page-locked memory and ordinary memory in one copy: not
            // mirrored as one range.
            return Err(pvgpu_ring::CuError::INVALID_VALUE.into());
        }
        for &(p, l, _) in &overlapping {
            start = start.min(p);
            end = end.max(p + l);
        }
        if read_own(start, end - start).is_none() {
            return Err(pvgpu_ring::CuError::INVALID_VALUE.into());
        }
        if !overlapping.is_empty() {
            c.pull_mirrors()?;
            for &(p, _, _) in &overlapping {
                c.mirrors.remove(p);
                c.call(&pvgpu_ring::proto::HostMirrorUnmap { ptr: (p as u64).into() })?;
            }
        }
        let map = pvgpu_ring::proto::HostMirrorMap {
            ptr: (start as u64).into(),
            len: ((end - start) as u64).into(),
            pageable: 1.into(),
            reserved: 0.into(),
        };
        c.call(&map)?;
        c.mirrors.add(start, end - start, true);
        Ok(())
    }

    /// Stops mirroring the range that starts at `ptr`.
    pub fn unmirror_host(&self, ptr: *mut u8) -> crate::Result<()> {
        let mut c = self.conn();
        if !c.mirrors.remove(ptr as usize) {
            return Err(pvgpu_ring::CuError::INVALID_VALUE.into());
        }
        c.call(&pvgpu_ring::proto::HostMirrorUnmap { ptr: (ptr as u64).into() })
    }

    /// Whether `[ptr, ptr+len)` lies in mirrored memory.
    pub fn is_mirrored(&self, ptr: *const u8, len: usize) -> bool {
        self.conn().mirrors.covers(ptr as usize, len)
    }
}
