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
use super::restore::RestoreError;
use super::{Alloc, AllocKind, Session, end_of};
use crate::exec::{CuRes, ExecContext, Executor};
use crate::handles::HandleTable;
use pvgpu_ctl::snapshot;
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
    /// Where in the physical memory it starts.
    offset: u64,
    /// `CUmemAccess_flags` of its device (0 until `cuMemSetAccess`).
    access: u32,
}

impl Vmm {
    pub(super) fn new(max_objects: usize) -> Self {
        Vmm { reservations: BTreeMap::new(), reserved: 0, phys: HandleTable::new(max_objects), mappings: BTreeMap::new() }
    }

    /// Makes ids of address space `space` ([`HandleTable::set_space`]).
    pub(super) fn set_space(&mut self, space: u16) {
        self.phys.set_space(space);
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
    map(s, r.ptr.get(), r.size.get(), r.offset.get(), r.handle.get())
}

/// Maps `size` bytes of physical memory `id` from `offset` at `ptr`.
fn map<E: Executor>(s: &mut Session<E>, ptr: u64, size: u64, offset: u64, id: u64) -> CuRes<()> {
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
    s.vmm.mappings.insert(ptr, Mapping { size, phys: id, ctx, offset, access: 0 });
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
    set_access(s, r.ptr.get(), r.size.get(), r.flags.get())
}

/// Sets the access of the whole mappings covering `[ptr, ptr+size)`.
fn set_access<E: Executor>(s: &mut Session<E>, ptr: u64, size: u64, flags: u32) -> CuRes<()> {
    for ptr in s.vmm.whole_mappings(ptr, size)? {
        let m = &s.vmm.mappings[&ptr];
        let (size, ctx) = (m.size, m.ctx);
        s.enter(ctx)?.vmm_set_access(ptr, size, flags)?;
        if let Some(m) = s.vmm.mappings.get_mut(&ptr) {
            m.access = flags;
        }
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

/// What a snapshot cannot hold of the session's virtual memory, by name:
/// another session's physical memory, and physical memory whose bytes no
/// mapping the device may read holds.
pub(super) fn uncoverable<E: Executor>(s: &Session<E>) -> Option<&'static str> {
    if s.vmm.phys.iter().any(|(_, p)| !p.counted) {
        return Some("physical memory imported from another process");
    }
    let unread = |id: u64| !s.vmm.mappings.values().any(|m| m.phys == id && m.access != 0);
    if s.vmm.phys.iter().any(|(id, p)| !p.released && unread(id)) || s.vmm.mappings.values().any(|m| m.access == 0) {
        return Some("physical memory not mapped with access (its bytes cannot be read)");
    }
    None
}

/// The session's reservations, physical memory and mappings (in address
/// order; each mapping's blob is the caller's to number).
pub(super) fn describe<E: Executor>(s: &Session<E>) -> (Vec<snapshot::Reservation>, Vec<snapshot::Physical>, Vec<snapshot::Mapped>) {
    let reservations =
        s.vmm.reservations.iter().map(|(&address, r)| snapshot::Reservation { ctx: r.ctx, address, length: r.size }).collect();
    let physical = s
        .vmm
        .phys
        .iter()
        .map(|(id, p)| snapshot::Physical { id, ctx: p.ctx, length: p.size, flags: p.flags, released: p.released })
        .collect();
    let mappings = s
        .vmm
        .mappings
        .iter()
        .map(|(&address, m)| snapshot::Mapped {
            ctx: m.ctx,
            address,
            length: m.size,
            physical: m.phys,
            offset: m.offset,
            access: m.access,
            blob: 0,
        })
        .collect();
    (reservations, physical, mappings)
}

/// Rebuilds reservations at their addresses (first of all, in address
/// order: nothing else of the session holds addresses yet).
pub(super) fn rebuild_reservations<E: Executor>(s: &mut Session<E>, reservations: &[snapshot::Reservation]) -> Result<(), RestoreError> {
    for r in reservations {
        let what = || format!("an address reservation of context {:#x}", r.ctx);
        // Made already by a worker prepared from the session's skeleton.
        if s.vmm.reservations.get(&r.address).is_some_and(|h| h.size == r.length && h.ctx == r.ctx) {
            continue;
        }
        if r.length == 0 || s.vmm.reserved.saturating_add(r.length) > MAX_RESERVED || s.vmm.reservations.len() >= s.limits.max_objects {
            return Err(RestoreError::Inconsistent(what()));
        }
        let got = s.enter(r.ctx).and_then(|c| c.vmm_reserve(r.length, 0, r.address));
        match got {
            Ok(p) if p == r.address => {}
            Ok(p) => {
                let _ = s.enter(r.ctx).and_then(|c| c.vmm_free(p, r.length));
                return Err(RestoreError::Address { what: what(), address: r.address, error: CuError::ALREADY_MAPPED });
            }
            Err(error) => return Err(RestoreError::Address { what: what(), address: r.address, error }),
        }
        s.vmm.reservations.insert(r.address, Reservation { size: r.length, ctx: r.ctx });
        s.vmm.reserved += r.length;
    }
    Ok(())
}

/// Rebuilds physical memory under the guest's handles and its mappings
/// with their access, each checked as the command that made it; then
/// releases what the guest had released. The mappings' bytes are the
/// caller's to write.
pub(super) fn rebuild_mappings<E: Executor>(
    s: &mut Session<E>,
    physical: &[snapshot::Physical],
    mappings: &[snapshot::Mapped],
) -> Result<(), RestoreError> {
    for p in physical {
        let what = format!("physical memory {:#x}", p.id);
        if p.length == 0 {
            return Err(RestoreError::Inconsistent(what));
        }
        let (raw, flags) = s.enter(p.ctx).and_then(|c| c.vmm_create(p.length, p.flags)).map_err(failed(what.clone()))?;
        if flags != p.flags {
            let _ = s.enter(p.ctx).and_then(|c| c.vmm_release(raw));
            return Err(RestoreError::Rebuild {
                what: format!("{what} (flags {:#x}, now {flags:#x})", p.flags),
                error: CuError::NOT_SUPPORTED,
            });
        }
        let entry = Phys { ctx: p.ctx, size: p.length, raw, maps: 0, released: false, flags, counted: true };
        if s.vmm.phys.insert_at(p.id, entry).is_err() {
            let _ = s.enter(p.ctx).and_then(|c| c.vmm_release(raw));
            return Err(RestoreError::Inconsistent(format!(
                "physical memory handle {:#x} is not one a backend hands out, or comes twice",
                p.id
            )));
        }
        s.mem_used += p.length;
    }
    for m in mappings {
        let what = format!("the mapping at {:#x}", m.address);
        if s.vmm.phys.get(m.physical).is_some_and(|p| p.ctx != m.ctx) {
            return Err(RestoreError::Inconsistent(what));
        }
        map(s, m.address, m.length, m.offset, m.physical).map_err(failed(what.clone()))?;
        if m.access != 0 {
            set_access(s, m.address, m.length, m.access).map_err(failed(what))?;
        }
    }
    for p in physical.iter().filter(|p| p.released) {
        let raw = s.vmm.phys.get(p.id).map(|e| e.raw).ok_or_else(|| RestoreError::Inconsistent("physical memory gone".into()))?;
        s.enter(p.ctx).and_then(|c| c.vmm_release(raw)).map_err(failed(format!("physical memory {:#x}", p.id)))?;
        if let Some(e) = s.vmm.phys.get_mut(p.id) {
            e.released = true;
        }
        settle(s, p.id);
    }
    Ok(())
}

fn failed(what: String) -> impl FnOnce(CuError) -> RestoreError {
    move |error| RestoreError::Rebuild { what, error }
}
