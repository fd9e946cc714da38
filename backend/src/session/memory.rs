//! Device memory: allocations against the quota, and copies and memsets
//! whose every device range must lie inside the session's own allocations.

use super::{Alloc, Io, Session};
use crate::exec::{CuRes, ExecContext, Executor};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, DataLoc, DataRef, DptrRep, MemInfoRep};

pub(super) fn alloc<E: Executor>(s: &mut Session<E>, r: proto::MemAlloc) -> CuRes<DptrRep> {
    let (ctx, size) = (r.ctx.get(), r.size.get());
    if size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    if s.limits.mem_quota.is_some_and(|q| s.mem_used.saturating_add(size) > q) || s.allocs.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let dptr = s.enter(ctx)?.mem_alloc(size)?;
    s.allocs.insert(dptr, Alloc { len: size, ctx, global_of: None });
    s.mem_used += size;
    Ok(DptrRep { dptr: dptr.into() })
}

pub(super) fn free<E: Executor>(s: &mut Session<E>, r: proto::MemFree) -> CuRes<()> {
    let dptr = r.dptr.get();
    let a = *s.allocs.get(&dptr).filter(|a| a.global_of.is_none()).ok_or(CuError::INVALID_VALUE)?;
    s.enter(a.ctx)?.mem_free(dptr)?;
    s.allocs.remove(&dptr);
    s.mem_used -= a.len;
    Ok(())
}

pub(super) fn info<E: Executor>(s: &mut Session<E>, r: proto::MemGetInfo) -> CuRes<MemInfoRep> {
    let (mut free, mut total) = s.enter(r.ctx.get())?.mem_get_info()?;
    if let Some(q) = s.limits.mem_quota {
        total = total.min(q);
        free = free.min(q.saturating_sub(s.mem_used));
    }
    Ok(MemInfoRep { free: free.into(), total: total.into() })
}

pub(super) fn memset<E: Executor>(s: &mut Session<E>, r: proto::Memset) -> CuRes<()> {
    let (dptr, count, elem) = (r.dptr.get(), r.count.get(), r.elem_size.get());
    let len = count.checked_mul(elem as u64).ok_or(CuError::INVALID_VALUE)?;
    if len == 0 {
        return Ok(());
    }
    if dptr % elem as u64 != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = s.range(dptr, len)?;
    let st = s.stream(r.stream.get(), ctx)?;
    s.enter(ctx)?.memset(dptr, r.value.get(), elem, count, st)
}

pub(super) fn htod<E: Executor>(s: &mut Session<E>, r: proto::MemcpyHtoD<'_>, io: &Io<'_>) -> CuRes<()> {
    let (p, len) = Session::<E>::source(&r.head.data, r.data, io.area)?;
    if len == 0 {
        return Ok(());
    }
    let dst = r.head.dst.get();
    let ctx = s.range(dst, len as u64)?;
    let st = s.stream(r.head.stream.get(), ctx)?;
    let wait = !pinned_async(r.head.flags.get(), &r.head.data);
    let c = s.enter(ctx)?;
    // SAFETY: `source` checked [p, p+len) lies in the request or the data
    // area. Without `wait` it is page-locked memory the program owns in the
    // data area, which stays mapped until the session's contexts are gone.
    unsafe { c.htod(dst, p, len, st, wait) }
}

pub(super) fn dtoh<E: Executor>(s: &mut Session<E>, r: proto::MemcpyDtoH, io: &mut Io<'_>) -> CuRes<proto::Bulk> {
    let len = usize::try_from(r.data.len.get()).map_err(|_| CuError::INVALID_VALUE)?;
    if len == 0 {
        return Ok(proto::Bulk);
    }
    let src = r.src.get();
    let ctx = s.range(src, len as u64)?;
    let st = s.stream(r.stream.get(), ctx)?;
    match r.data.location().map_err(|_| CuError::INVALID_VALUE)? {
        DataLoc::Inline => {
            io.out.resize(len, 0);
            let c = s.enter(ctx)?;
            // SAFETY: the reply buffer holds exactly `len` writable bytes.
            unsafe { c.dtoh(io.out.as_mut_ptr(), src, len, st, true)? };
        }
        DataLoc::Area { offset } => {
            let area = io.area.ok_or(CuError::INVALID_VALUE)?;
            let p = area.ptr(offset, len as u64).map_err(|_| CuError::INVALID_VALUE)?;
            let wait = !pinned_async(r.flags.get(), &r.data);
            let c = s.enter(ctx)?;
            // SAFETY: [p, p+len) was checked to lie in the data area, which
            // stays mapped until the session's contexts are gone.
            unsafe { c.dtoh(p, src, len, st, wait)? };
        }
    }
    Ok(proto::Bulk)
}

pub(super) fn dtod<E: Executor>(s: &mut Session<E>, r: proto::MemcpyDtoD) -> CuRes<()> {
    let (dst, src, len) = (r.dst.get(), r.src.get(), r.len.get());
    if len == 0 {
        return Ok(());
    }
    let ctx = s.range(dst, len)?;
    s.range(src, len)?;
    let st = s.stream(r.stream.get(), ctx)?;
    let is_async = r.flags.get() & proto::COPY_ASYNC != 0;
    s.enter(ctx)?.dtod(dst, src, len, st, is_async)
}

/// An asynchronous copy to or from page-locked memory the program owns in
/// the data area: queued without waiting for it to finish.
fn pinned_async(flags: u32, d: &DataRef) -> bool {
    flags & proto::COPY_ASYNC != 0 && flags & proto::COPY_PINNED != 0 && matches!(d.location(), Ok(DataLoc::Area { .. }))
}
