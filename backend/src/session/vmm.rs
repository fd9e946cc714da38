//! Virtual memory management: address reservations, physical allocations,
//! mappings and access (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`,
//! `cuMemSetAccess`, ...), as XLA and PyTorch's expandable segments use
//! them.
//!
//! Rules enforced here, on top of the driver's own checks:
//! - physical memory counts against the quota from `cuMemCreate` until it
//!   is released and unmapped;
//! - a mapping lies inside one reservation of the session, overlaps none
//!   of its mappings, and maps a physical allocation of the session made
//!   in the same context;
//! - unmapping and access changes cover whole mappings; freeing a
//!   reservation takes the whole reservation, with nothing mapped in it;
//! - an accessible mapping is a range copies and kernels may touch, like
//!   an allocation; an inaccessible one is not.
//!
//! The driver does not tie these objects to a context, but here each
//! belongs to the context it was made in and goes with it (and with the
//! session), so nothing outlives its owner.

use super::Io;
use super::{Alloc, AllocKind, Session, end_of};
use crate::exec::{CuRes, ExecContext, Executor};
use crate::handles::HandleTable;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, DptrRep, HandleRep, U64Rep};
use std::collections::BTreeMap;

/// Address space a session may hold reserved at once (16 TiB).
const MAX_RESERVED: u64 = 1 << 44;

/// A session's reservations, physical allocations and mappings.
pub(super) struct Vmm {
    reservations: BTreeMap<u64, Reservation>,
    reserved: u64,
    phys: HandleTable<Phys>,
    mappings: BTreeMap<u64, Mapping>,
}

impl Vmm {
    /// Whether it holds nothing (a checkpoint covers only such sessions).
    pub(super) fn is_empty(&self) -> bool {
        self.reservations.is_empty() && self.phys.len() == 0 && self.mappings.is_empty()
    }
}

struct Reservation {
    size: u64,
    ctx: u64,
}

struct Phys {
    ctx: u64,
    size: u64,
    /// The executor's handle.
    raw: u64,
    /// Mappings of it.
    maps: u32,
    /// `cuMemRelease` was called; it goes with its last mapping.
    released: bool,
    /// `MEM_COMPRESSIBLE`, `MEM_SHAREABLE`, as the device gave them.
    flags: u32,
    /// Counted in `mem_used` (made here, not imported from another
    /// session, whose quota counts it).
    counted: bool,
}

struct Mapping {
    size: u64,
    phys: u64,
    ctx: u64,
}

impl Vmm {
    pub(super) fn new(max_objects: usize) -> Self {
        Vmm { reservations: BTreeMap::new(), reserved: 0, phys: HandleTable::new(max_objects), mappings: BTreeMap::new() }
    }

    /// The mappings covering exactly `[ptr, ptr+size)`, in order.
    fn whole_mappings(&self, ptr: u64, size: u64) -> CuRes<Vec<u64>> {
        let end = end_of(ptr, size)?;
        let (mut at, mut out) = (ptr, Vec::new());
        while at < end {
            let m = self.mappings.get(&at).ok_or(CuError::INVALID_VALUE)?;
            out.push(at);
            at += m.size;
        }
        if at != end || out.is_empty() {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(out)
    }

    /// Whether `[ptr, end)` overlaps a mapping.
    fn overlaps(&self, ptr: u64, end: u64) -> bool {
        let before = self.mappings.range(..ptr).next_back().is_some_and(|(&s, m)| s + m.size > ptr);
        let inside = self.mappings.range(ptr..end).next().is_some();
        before || inside
    }
}

pub(super) fn mem_granularity<E: Executor>(s: &mut Session<E>, r: proto::MemGranularity, _: &mut Io<'_>) -> CuRes<U64Rep> {
    let d = s.device(r.device.get())?;
    let g = s.exec.vmm_granularity(d, r.option.get())?;
    Ok(U64Rep { value: g.into() })
}

pub(super) fn mem_address_reserve<E: Executor>(s: &mut Session<E>, r: proto::MemAddressReserve, _: &mut Io<'_>) -> CuRes<DptrRep> {
    let (ctx, size) = (r.ctx.get(), r.size.get());
    if size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    if s.vmm.reservations.len() >= s.limits.max_objects || s.vmm.reserved.saturating_add(size) > MAX_RESERVED {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let ptr = s.enter(ctx)?.vmm_reserve(size, r.alignment.get(), r.addr.get())?;
    s.vmm.reservations.insert(ptr, Reservation { size, ctx });
    s.vmm.reserved += size;
    Ok(DptrRep { dptr: ptr.into() })
}

pub(super) fn mem_address_free<E: Executor>(s: &mut Session<E>, r: proto::MemAddressFree, _: &mut Io<'_>) -> CuRes<()> {
    let (ptr, size) = (r.ptr.get(), r.size.get());
    let res = s.vmm.reservations.get(&ptr).filter(|v| v.size == size).ok_or(CuError::INVALID_VALUE)?;
    if s.vmm.overlaps(ptr, ptr + size) {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = res.ctx;
    s.enter(ctx)?.vmm_free(ptr, size)?;
    s.vmm.reservations.remove(&ptr);
    s.vmm.reserved -= size;
    Ok(())
}

/// Physical memory of `size` bytes with `flags` in `ctx`: its id and the
/// flags it has.
fn create<E: Executor>(s: &mut Session<E>, ctx: u64, size: u64, flags: u32) -> CuRes<(u64, u32)> {
    if size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    if s.over_quota(size) {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let (raw, flags) = s.enter(ctx)?.vmm_create(size, flags)?;
    let id = adopt(s, ctx, size, raw, flags, true)?;
    Ok((id, flags))
}

/// Enters physical memory the executor made (or imported) in the table:
/// its id. On failure the executor's handle is released.
pub(super) fn adopt<E: Executor>(s: &mut Session<E>, ctx: u64, size: u64, raw: u64, flags: u32, counted: bool) -> CuRes<u64> {
    match s.vmm.phys.insert(Phys { ctx, size, raw, maps: 0, released: false, flags, counted }) {
        Ok(id) => {
            if counted {
                s.mem_used += size;
            }
            Ok(id)
        }
        Err(e) => {
            let _ = s.enter(ctx).and_then(|c| c.vmm_release(raw));
            Err(e)
        }
    }
}

/// Context, executor handle, size and flags of physical memory `id`, while
/// not released.
pub(super) fn phys<E: Executor>(s: &Session<E>, id: u64) -> Option<(u64, u64, u64, u32)> {
    s.vmm.phys.get(id).filter(|p| !p.released).map(|p| (p.ctx, p.raw, p.size, p.flags))
}

pub(super) fn mem_create<E: Executor>(s: &mut Session<E>, r: proto::MemCreate, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let (id, _) = create(s, r.ctx.get(), r.size.get(), 0)?;
    Ok(HandleRep { handle: id.into() })
}

pub(super) fn mem_create_with<E: Executor>(s: &mut Session<E>, r: proto::MemCreateWith, _: &mut Io<'_>) -> CuRes<proto::MemCreateRep> {
    let size = r.size.get();
    let (id, flags) = create(s, r.ctx.get(), size, r.flags.get())?;
    Ok(proto::MemCreateRep { handle: id.into(), size: size.into(), flags: flags.into(), reserved: 0.into() })
}

/// Forgets physical allocation `id` once it is released and unmapped.
fn settle<E: Executor>(s: &mut Session<E>, id: u64) {
    if s.vmm.phys.get(id).is_some_and(|p| p.released && p.maps == 0) {
        if let Some(p) = s.vmm.phys.remove(id) {
            if p.counted {
                s.mem_used -= p.size;
            }
            super::ipc::withdraw(s, pvgpu_ring::proto::IPC_PHYSICAL, id);
        }
    }
}

pub(super) fn mem_release<E: Executor>(s: &mut Session<E>, r: proto::MemRelease, _: &mut Io<'_>) -> CuRes<()> {
    let id = r.handle.get();
    let p = s.vmm.phys.get(id).filter(|p| !p.released).ok_or(CuError::INVALID_VALUE)?;
    let (ctx, raw) = (p.ctx, p.raw);
    s.enter(ctx)?.vmm_release(raw)?;
    if let Some(p) = s.vmm.phys.get_mut(id) {
        p.released = true;
    }
    settle(s, id);
    Ok(())
}

pub(super) fn mem_map<E: Executor>(s: &mut Session<E>, r: proto::MemMap, _: &mut Io<'_>) -> CuRes<()> {
    let (ptr, size, offset, id) = (r.ptr.get(), r.size.get(), r.offset.get(), r.handle.get());
    let end = end_of(ptr, size)?;
    let (&start, res) = s.vmm.reservations.range(..=ptr).next_back().ok_or(CuError::INVALID_VALUE)?;
    let p = s.vmm.phys.get(id).filter(|p| !p.released).ok_or(CuError::INVALID_VALUE)?;
    if size == 0 || end > start + res.size || end_of(offset, size)? > p.size || s.vmm.overlaps(ptr, end) {
        return Err(CuError::INVALID_VALUE);
    }
    if p.ctx != res.ctx {
        return Err(CuError::NOT_SUPPORTED);
    }
    if s.vmm.mappings.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let (ctx, raw) = (p.ctx, p.raw);
    s.enter(ctx)?.vmm_map(ptr, size, offset, raw)?;
    s.vmm.mappings.insert(ptr, Mapping { size, phys: id, ctx });
    if let Some(p) = s.vmm.phys.get_mut(id) {
        p.maps += 1;
    }
    Ok(())
}

/// Unmaps the mapping at `ptr`.
fn unmap_one<E: Executor>(s: &mut Session<E>, ptr: u64) -> CuRes<()> {
    let m = s.vmm.mappings.get(&ptr).ok_or(CuError::INVALID_VALUE)?;
    let (size, id, ctx) = (m.size, m.phys, m.ctx);
    s.enter(ctx)?.vmm_unmap(ptr, size)?;
    s.vmm.mappings.remove(&ptr);
    if s.allocs.get(&ptr).is_some_and(|a| a.kind == AllocKind::Mapped) {
        s.allocs.remove(&ptr);
    }
    if let Some(p) = s.vmm.phys.get_mut(id) {
        p.maps -= 1;
    }
    settle(s, id);
    Ok(())
}

pub(super) fn mem_unmap<E: Executor>(s: &mut Session<E>, r: proto::MemUnmap, _: &mut Io<'_>) -> CuRes<()> {
    for ptr in s.vmm.whole_mappings(r.ptr.get(), r.size.get())? {
        unmap_one(s, ptr)?;
    }
    Ok(())
}

pub(super) fn mem_set_access<E: Executor>(s: &mut Session<E>, r: proto::MemSetAccess, _: &mut Io<'_>) -> CuRes<()> {
    let flags = r.flags.get();
    for ptr in s.vmm.whole_mappings(r.ptr.get(), r.size.get())? {
        let m = &s.vmm.mappings[&ptr];
        let (size, ctx) = (m.size, m.ctx);
        s.enter(ctx)?.vmm_set_access(ptr, size, flags)?;
        if flags == 0 {
            if s.allocs.get(&ptr).is_some_and(|a| a.kind == AllocKind::Mapped) {
                s.allocs.remove(&ptr);
            }
        } else {
            s.allocs.insert(ptr, Alloc { len: size, ctx, kind: AllocKind::Mapped });
        }
    }
    Ok(())
}

/// Unmaps, releases and frees everything of context `ctx` (every context
/// with `None`), while the context still exists: the driver would keep
/// them past the context.
pub(super) fn forget<E: Executor>(s: &mut Session<E>, ctx: Option<u64>) {
    let mine = |c: u64| ctx.is_none_or(|x| x == c);
    let mapped: Vec<u64> = s.vmm.mappings.iter().filter(|(_, m)| mine(m.ctx)).map(|(&p, _)| p).collect();
    for ptr in mapped {
        if unmap_one(s, ptr).is_err() {
            s.vmm.mappings.remove(&ptr);
        }
    }
    for p in s.vmm.phys.drain_where(|p| mine(p.ctx)) {
        if !p.released {
            let _ = s.enter(p.ctx).and_then(|c| c.vmm_release(p.raw));
        }
        if p.counted {
            s.mem_used -= p.size;
        }
    }
    let reserved: Vec<(u64, u64, u64)> = s.vmm.reservations.iter().filter(|(_, r)| mine(r.ctx)).map(|(&p, r)| (p, r.size, r.ctx)).collect();
    for (ptr, size, c) in reserved {
        let _ = s.enter(c).and_then(|x| x.vmm_free(ptr, size));
        s.vmm.reservations.remove(&ptr);
        s.vmm.reserved -= size;
    }
}
