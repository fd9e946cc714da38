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
}

impl Mirror {
    /// The program's bytes now.
    fn now(&self) -> Vec<u8> {
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
        out
    }

    /// Writes `bytes` at offset `off` of the program's memory.
    fn store(&mut self, off: usize, bytes: &[u8]) {
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
    pub(crate) fn add(&mut self, ptr: usize, len: usize) {
        self.list.push(Mirror { ptr, known: vec![0; len] });
    }

    /// Stops tracking the mirror at `ptr`.
    pub(crate) fn remove(&mut self, ptr: usize) -> bool {
        let before = self.list.len();
        self.list.retain(|m| m.ptr != ptr);
        self.list.len() != before
    }

    /// Whether `[ptr, ptr+len)` lies in a mirror.
    pub(crate) fn covers(&self, ptr: usize, len: usize) -> bool {
        self.list.iter().any(|m| ptr >= m.ptr && ptr.saturating_add(len) <= m.ptr + m.known.len())
    }

    /// What the program changed: (head, bytes) of each write to send; the
    /// backend is then assumed to hold them.
    pub(crate) fn changes(&mut self) -> Vec<(MirrorWriteHead, Vec<u8>)> {
        let mut out = Vec::new();
        for m in &mut self.list {
            let now = m.now();
            if now == m.known {
                continue;
            }
            for (start, len) in changed_runs(&now, &m.known, JOIN_GAP, WRITE_PIECE) {
                let head = MirrorWriteHead { ptr: ((m.ptr + start) as u64).into(), len: (len as u64).into() };
                out.push((head, now[start..start + len].to_vec()));
            }
            m.known = now;
        }
        out
    }

    /// Writes what the device changed into the program's memory.
    pub(crate) fn apply(&mut self, rep: &MirrorPullRep) {
        for (ptr, bytes) in &rep.ranges {
            let ptr = *ptr as usize;
            if let Some(m) = self.list.iter_mut().find(|m| ptr >= m.ptr && ptr.saturating_add(bytes.len()) <= m.ptr + m.known.len()) {
                let off = ptr - m.ptr;
                m.store(off, bytes);
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
        let rep = c.call(&pvgpu_ring::proto::HostMirrorMap { ptr: (ptr as u64).into(), len: (len as u64).into() })?;
        c.mirrors.add(ptr as usize, len);
        Ok(rep.value.get())
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
