//! Mirrored host memory: for a program whose transport shares no memory
//! with the backend (TCP), page-locked memory the device must reach through
//! the program's own pointer (a kernel spinning on a flag in page-locked
//! memory, a pointer from `cuMemHostGetDevicePointer`) is held a second time
//! here, at the same address of this process, page-locked and mapped for
//! the device through a context of the session. The program's client keeps
//! the two copies coherent: it sends what the program changed before each
//! call, and after each call that may have let device work finish it pulls
//! what the device changed. What the guest last knew of each mirror is kept
//! (`known`), so a pull returns only what differs.
//!
//! A mirror is process memory of the session, counted in its quota: it
//! outlives the context it was registered through and is registered again
//! through the next one. A guest names the address; `MAP_FIXED_NOREPLACE`
//! refuses any address the process already uses, so a guest can never
//! replace the backend's own memory.

use super::restore::RestoreError;
use super::{Alloc, AllocKind, Io, Session};
use crate::exec::graph::ExecGraph;
use crate::exec::{CuRes, ExecContext, Executor};
use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, munmap};
use pvgpu_ctl::snapshot::MirrorRec;
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::CU_STREAM_CAPTURE_MODE_RELAXED;
use pvgpu_ring::proto::{self, MAX_PAYLOAD, MirrorPullRep, U64Rep, changed_runs};
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// Most bytes of mirrors one session holds.
pub(super) const MIRROR_MAX: u64 = 256 << 20;
/// Page size the guest's ranges are aligned to.
const PAGE: u64 = 4096;
/// The end of the user half of the address space.
const USER_END: u64 = 0x7fff_ffff_f000;
/// Unchanged bytes between two changed runs that still join them in one
/// range of a pull.
const JOIN_GAP: usize = 64;

/// One mirror.
pub(super) struct Mirror {
    len: u64,
    /// Ordinary memory of the program (graphs copy from or to it as host
    /// memory), never registered for the device.
    pageable: bool,
    /// What the guest last knew of it.
    known: Vec<u8>,
    /// The context it is registered through, if any is.
    registered_by: Option<u64>,
}

/// The session's mirrors, by address.
#[derive(Default)]
pub(super) struct Mirrors {
    map: BTreeMap<u64, Mirror>,
    bytes: u64,
    /// Where the last pull stopped for want of room (a mirror's address
    /// and an offset in it): the next pull goes on from there, so a pull
    /// of many pieces compares each byte once, not once per piece.
    cursor: Option<(u64, usize)>,
}

impl Mirrors {
    /// Whether `[ptr, ptr+len)` lies in a mirror of ordinary memory: copies
    /// name it as host memory (a node of the driver that named it as device
    /// memory would not survive the mirror being mapped again, larger, when
    /// the program's next range overlaps it: measured on the H100).
    pub(super) fn pageable(&self, ptr: u64, len: u64) -> bool {
        self.containing(ptr, len).ok().and_then(|a| self.map.get(&a)).is_some_and(|m| m.pageable)
    }

    /// The mirror holding `[ptr, ptr+len)`: its address.
    fn containing(&self, ptr: u64, len: u64) -> CuRes<u64> {
        let end = ptr.checked_add(len).ok_or(CuError::INVALID_VALUE)?;
        match self.map.range(..=ptr).next_back() {
            Some((&start, m)) if end <= start + m.len => Ok(start),
            _ => Err(CuError::INVALID_VALUE),
        }
    }
}

/// The bytes of the mirror at `ptr`.
///
/// # Safety
/// `ptr` must be the address of a live mirror of `len` bytes; the slice
/// must not outlive it. The device may write the memory meanwhile (it is
/// mapped for it): what is read is a snapshot, as a copy would be.
unsafe fn bytes<'a>(ptr: u64, len: u64) -> &'a mut [u8] {
    // SAFETY: per the caller: mapped, readable and writable, `len` long.
    unsafe { std::slice::from_raw_parts_mut(ptr as usize as *mut u8, len as usize) }
}

/// Runs `f` on context `c` in relaxed capture mode. Registering host
/// memory is a call the driver refuses while the calling thread captures in
/// global mode, and it invalidates the capture; the program did not make
/// it (a mirror is often made while it captures: a copy from or to its
/// memory, or a kernel reaching page-locked memory, recorded into a graph).
fn relaxed<C: ExecGraph, R>(c: &mut C, f: impl FnOnce(&mut C) -> R) -> R {
    let old = c.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED.0);
    let r = f(c);
    if let Ok(old) = old {
        let _ = c.exchange_capture_mode(old);
    }
    r
}

/// Registers mirror `ptr` for the device through context `ctx`: true if
/// the device reaches it at its own address.
fn register<E: Executor>(s: &mut Session<E>, ctx: u64, ptr: u64, len: u64) -> bool {
    let Ok(c) = s.enter(ctx) else { return false };
    relaxed(c, |c| {
        // SAFETY: the mirror stays mapped until `unmap`, which unregisters
        // it first.
        match unsafe { c.register_host(ptr as usize as *mut u8, len as usize) } {
            Ok(Some(d)) if d == ptr => true,
            Ok(_) | Err(_) => {
                let _ = c.unregister_host(ptr as usize as *mut u8);
                false
            }
        }
    })
}

/// Unregisters mirror `ptr` from context `ctx` (in relaxed capture mode,
/// as [`register`]).
fn unregister<E: Executor>(s: &mut Session<E>, ctx: u64, ptr: u64) {
    if let Ok(c) = s.enter(ctx) {
        relaxed(c, |c| c.unregister_host(ptr as usize as *mut u8)).ok();
    }
}

/// Checks that the guest may have a mirror at `[ptr, ptr+len)`: page
/// aligned, in the user half, clear of the session's mirrors and
/// allocations, within the mirrors' limit and the quota.
fn check_range<E: Executor>(s: &Session<E>, ptr: u64, len: u64) -> CuRes<()> {
    let end = ptr.checked_add(len).ok_or(CuError::INVALID_VALUE)?;
    if len == 0 || ptr % PAGE != 0 || len % PAGE != 0 || ptr < 1 << 20 || end > USER_END {
        return Err(CuError::INVALID_VALUE);
    }
    let mirrored = s.mirrors.map.range(..end).next_back().is_some_and(|(&a, m)| a + m.len > ptr);
    let allocated = s.allocs.range(..end).next_back().is_some_and(|(&a, x)| a + x.len > ptr);
    if mirrored || allocated {
        return Err(CuError::INVALID_VALUE);
    }
    if s.mirrors.bytes + len > MIRROR_MAX || s.over_quota(len) {
        return Err(CuError::OUT_OF_MEMORY);
    }
    Ok(())
}

/// Maps fresh memory at exactly `[ptr, ptr+len)`, or fails with
/// `CUDA_ERROR_NOT_SUPPORTED` where this process uses any of it.
fn map_at(ptr: u64, len: u64) -> CuRes<NonNull<std::ffi::c_void>> {
    let at = NonZeroUsize::new(ptr as usize).ok_or(CuError::INVALID_VALUE)?;
    let size = NonZeroUsize::new(len as usize).ok_or(CuError::INVALID_VALUE)?;
    // SAFETY: fresh anonymous memory at an address no mapping of this
    // process uses (MAP_FIXED_NOREPLACE refuses one in use).
    let got = unsafe {
        mmap_anonymous(Some(at), size, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED_NOREPLACE)
    }
    .map_err(|_| CuError::NOT_SUPPORTED)?;
    if got.as_ptr() as u64 != ptr {
        // A kernel without MAP_FIXED_NOREPLACE took the address as a hint.
        // SAFETY: the mapping just made, used by nothing.
        let _ = unsafe { munmap(got, len as usize) };
        return Err(CuError::NOT_SUPPORTED);
    }
    Ok(got)
}

/// Lists mirror `ptr` (mapped at its address) in the session's books, its
/// allocation entry under context `ctx`, counted in the quota.
fn keep<E: Executor>(s: &mut Session<E>, ptr: u64, mirror: Mirror, ctx: u64) {
    let len = mirror.len;
    s.mirrors.map.insert(ptr, mirror);
    s.mirrors.bytes += len;
    s.allocs.insert(ptr, Alloc { len, ctx, kind: AllocKind::Mirror });
    s.mem_used += len;
}

pub(super) fn host_mirror_map<E: Executor>(s: &mut Session<E>, r: proto::HostMirrorMap, _: &mut Io<'_>) -> CuRes<U64Rep> {
    let (ptr, len) = (r.ptr.get(), r.len.get());
    check_range(s, ptr, len)?;
    let ctx = s.current.ok_or(CuError::INVALID_CONTEXT)?;
    let got = map_at(ptr, len)?;
    let pageable = r.pageable.get() == 1;
    if !pageable && !register(s, ctx, ptr, len) {
        // SAFETY: the mapping just made, used by nothing.
        let _ = unsafe { munmap(got, len as usize) };
        return Err(CuError::NOT_SUPPORTED);
    }
    let registered_by = (!pageable).then_some(ctx);
    keep(s, ptr, Mirror { len, pageable, known: vec![0; len as usize], registered_by }, ctx);
    Ok(U64Rep { value: ptr.into() })
}

/// The session's mirrors as a snapshot holds them: each one's record
/// (its blob numbers for the caller to fill in), its bytes, and what the
/// guest last knew of it where that differs (device writes not pulled
/// yet).
pub(super) fn describe<E: Executor>(s: &Session<E>) -> Vec<(MirrorRec, Vec<u8>, Option<Vec<u8>>)> {
    s.mirrors
        .map
        .iter()
        .map(|(&ptr, m)| {
            // SAFETY: a live mirror of the session; every context was
            // synchronised for the checkpoint, so no device work writes it.
            let now = unsafe { bytes(ptr, m.len) }.to_vec();
            let known = (m.known != now).then(|| m.known.clone());
            let rec = MirrorRec { address: ptr, length: m.len, pageable: m.pageable, ctx: m.registered_by, blob: 0, known: None };
            (rec, now, known)
        })
        .collect()
}

/// Makes mirror `m` of a snapshot again, at its address, with its bytes
/// and what the guest knew of it; registered through its context, whose
/// handle the restored session holds.
pub(super) fn restore<E: Executor>(s: &mut Session<E>, m: &MirrorRec, now: &[u8], known: Option<&[u8]>) -> Result<(), RestoreError> {
    let (ptr, len) = (m.address, m.length);
    let what = || format!("mirrored host memory of {len} bytes");
    if now.len() as u64 != len || known.is_some_and(|k| k.len() != now.len()) {
        return Err(RestoreError::Inconsistent(format!("{} whose bytes are {} long", what(), now.len())));
    }
    let address = |error| RestoreError::Address { what: what(), address: ptr, error };
    check_range(s, ptr, len).map_err(address)?;
    let ctx = match m.ctx {
        Some(c) if s.ctxs.get(c).is_none() => {
            return Err(RestoreError::Inconsistent(format!("{} of context {c:#x}, which it lacks", what())));
        }
        Some(c) => c,
        None => s.current.ok_or_else(|| RestoreError::Inconsistent(format!("{} in a session without a context", what())))?,
    };
    let got = map_at(ptr, len).map_err(address)?;
    // SAFETY: the mapping just made, `len` bytes, used by nothing else.
    unsafe { bytes(ptr, len) }.copy_from_slice(now);
    let registered_by = m.ctx.filter(|_| !m.pageable);
    if let Some(c) = registered_by
        && !register(s, c, ptr, len)
    {
        // SAFETY: as above.
        let _ = unsafe { munmap(got, len as usize) };
        return Err(address(CuError::NOT_SUPPORTED));
    }
    let known = known.unwrap_or(now).to_vec();
    keep(s, ptr, Mirror { len, pageable: m.pageable, known, registered_by }, ctx);
    Ok(())
}

/// Unregisters and unmaps the mirror at `ptr`.
fn unmap<E: Executor>(s: &mut Session<E>, ptr: u64) -> CuRes<()> {
    let m = s.mirrors.map.remove(&ptr).ok_or(CuError::INVALID_VALUE)?;
    if let Some(ctx) = m.registered_by {
        unregister(s, ctx, ptr);
    }
    s.mirrors.bytes -= m.len;
    s.allocs.remove(&ptr);
    s.mem_used -= m.len;
    let p = NonNull::new(ptr as usize as *mut std::ffi::c_void).ok_or(CuError::INVALID_VALUE)?;
    // SAFETY: the mirror's own mapping, no longer registered or listed.
    unsafe { munmap(p, m.len as usize) }.map_err(|_| CuError::OPERATING_SYSTEM)
}

pub(super) fn host_mirror_unmap<E: Executor>(s: &mut Session<E>, r: proto::HostMirrorUnmap, _: &mut Io<'_>) -> CuRes<()> {
    unmap(s, r.ptr.get())
}

pub(super) fn host_mirror_write<E: Executor>(s: &mut Session<E>, r: proto::HostMirrorWrite<'_>, _: &mut Io<'_>) -> CuRes<()> {
    let (ptr, len) = (r.head.ptr.get(), r.data.len() as u64);
    let start = s.mirrors.containing(ptr, len)?;
    let m = s.mirrors.map.get_mut(&start).ok_or(CuError::INVALID_VALUE)?;
    let off = (ptr - start) as usize;
    // SAFETY: a live mirror, `[ptr, ptr+len)` inside it (checked above).
    let mem = unsafe { bytes(start, m.len) };
    mem[off..off + r.data.len()].copy_from_slice(r.data);
    m.known[off..off + r.data.len()].copy_from_slice(r.data);
    Ok(())
}

/// Bytes of a mirror one pull compares at a time.
const PULL_WINDOW: usize = 1 << 20;

pub(super) fn host_mirror_pull<E: Executor>(s: &mut Session<E>, _: proto::HostMirrorPull, _: &mut Io<'_>) -> CuRes<MirrorPullRep> {
    let mut rep = MirrorPullRep::default();
    // Room for the ranges' bytes and heads in one reply.
    let mut room = s.max_reply.min(MAX_PAYLOAD).saturating_sub(64);
    // Each range fits an empty reply, so every pull makes progress.
    let piece = room.saturating_sub(16).max(1);
    let (from, mut skip) = s.mirrors.cursor.take().unwrap_or((0, 0));
    for (&ptr, m) in s.mirrors.map.range_mut(from..) {
        // SAFETY: a live mirror of the session.
        let now: &[u8] = unsafe { bytes(ptr, m.len) };
        // Only the mirror the last pull stopped in is resumed mid-way.
        let start = if ptr == from { skip.min(now.len()) } else { 0 };
        skip = 0;
        // A window at a time, so a pull compares about what it can send.
        let mut at = start;
        while at < now.len() {
            let end = now.len().min(at + PULL_WINDOW.max(piece));
            for (off, len) in changed_runs(&now[at..end], &m.known[at..end], JOIN_GAP, piece) {
                let off = at + off;
                if len + 16 > room {
                    rep.more = true;
                    s.mirrors.cursor = Some((ptr, off));
                    return Ok(rep);
                }
                room -= len + 16;
                let piece = now[off..off + len].to_vec();
                m.known[off..off + len].copy_from_slice(&piece);
                rep.ranges.push((ptr + off as u64, piece));
            }
            at = end;
        }
    }
    Ok(rep)
}

/// Context `ctx` is going: the mirrors registered through it are
/// registered again through another context of the session, if one is
/// left (else through the next one made, [`register_all`]).
pub(super) fn context_going<E: Executor>(s: &mut Session<E>, ctx: u64) {
    let others: Vec<u64> = s.ctxs.iter().map(|(id, _)| id).filter(|&id| id != ctx).collect();
    let mine: Vec<(u64, u64)> = s.mirrors.map.iter().filter(|(_, m)| m.registered_by == Some(ctx)).map(|(&p, m)| (p, m.len)).collect();
    for (ptr, len) in mine {
        unregister(s, ctx, ptr);
        let by = others.iter().copied().find(|&o| register(s, o, ptr, len));
        if let Some(m) = s.mirrors.map.get_mut(&ptr) {
            m.registered_by = by;
        }
    }
}

/// Registers every mirror no context holds through context `ctx`.
pub(super) fn register_all<E: Executor>(s: &mut Session<E>, ctx: u64) {
    let loose: Vec<(u64, u64)> =
        s.mirrors.map.iter().filter(|(_, m)| m.registered_by.is_none() && !m.pageable).map(|(&p, m)| (p, m.len)).collect();
    for (ptr, len) in loose {
        if register(s, ctx, ptr, len)
            && let Some(m) = s.mirrors.map.get_mut(&ptr)
        {
            m.registered_by = Some(ctx);
        }
    }
}

/// Unmaps every mirror (the session ends).
pub(super) fn forget<E: Executor>(s: &mut Session<E>) {
    let all: Vec<u64> = s.mirrors.map.keys().copied().collect();
    for ptr in all {
        let _ = unmap(s, ptr);
    }
}
