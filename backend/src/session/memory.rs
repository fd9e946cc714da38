//! Device memory: allocations against the quota, and copies and memsets
//! whose every device range must lie inside the session's own allocations.

use super::{Alloc, AllocKind, Io, Session};
use crate::exec::{CuRes, ExecContext, Executor};
use crate::meter::Direction;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, DataLoc, DataRef, DptrRep, I32Rep, MemInfoRep, U64Rep};

/// Allocates `size` bytes in context `ctx` (on `stream` from the default
/// pool, or plainly), within the quota and the object limit. On a
/// capturing stream the allocation is graph memory (an allocation node),
/// where the session's footprint is measured
/// ([`super::graph::graph_memory_allowed`]).
fn allocate<E: Executor>(s: &mut Session<E>, ctx: u64, size: u64, stream: Option<u64>) -> CuRes<DptrRep> {
    if size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    if s.over_quota(size) || s.allocs.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let (dptr, kind) = match stream {
        None => (s.enter(ctx)?.mem_alloc(size)?, AllocKind::Memory),
        Some(id) => {
            let st = s.stream(id, ctx)?;
            let in_graph = in_capture(s, ctx, st)?;
            // Graph memory is counted through the measured footprint.
            super::graph::refuse_during_capture(s, ctx, st, super::graph::graph_memory_allowed(s))?;
            let kind = if in_graph { AllocKind::Graph } else { AllocKind::Memory };
            (s.enter(ctx)?.mem_alloc_async(size, st)?, kind)
        }
    };
    s.allocs.insert(dptr, Alloc { len: size, ctx, kind });
    if kind == AllocKind::Memory {
        s.mem_used += size;
    }
    Ok(DptrRep { dptr: dptr.into() })
}

/// Whether `st` (of context `ctx`) is capturing.
fn in_capture<E: Executor>(s: &mut Session<E>, ctx: u64, st: Option<super::Stream<E>>) -> CuRes<bool> {
    match st {
        Some(st) => super::graph::capturing(s, ctx, st),
        None => Ok(false),
    }
}

/// Frees an allocation of the session (on `stream`, or plainly). Graph
/// memory freed on a capturing stream is a free node; freed outside a
/// graph, it is unmapped; either way the address stays the graph's.
fn release<E: Executor>(s: &mut Session<E>, dptr: u64, stream: Option<u64>) -> CuRes<()> {
    let a = *s
        .allocs
        .get(&dptr)
        .filter(|a| matches!(a.kind, AllocKind::Memory | AllocKind::Pooled(_) | AllocKind::PoolImported | AllocKind::Graph))
        .ok_or(CuError::INVALID_VALUE)?;
    // A stream of another context than the allocating one.
    let other_ctx = match stream {
        Some(id) if id != 0 => Some(s.streams.get(id).ok_or(CuError::INVALID_HANDLE)?.ctx).filter(|&c| c != a.ctx),
        _ => None,
    };
    match (stream, other_ctx) {
        (None, _) => s.enter(a.ctx)?.mem_free(dptr)?,
        (Some(id), Some(ctx)) => free_after_other_context(s, dptr, a.ctx, id, ctx)?,
        (Some(id), None) => {
            let st = s.stream(id, a.ctx)?;
            let graph_free = a.kind == AllocKind::Graph && in_capture(s, a.ctx, st)?;
            super::graph::refuse_during_capture(s, a.ctx, st, graph_free)?;
            s.enter(a.ctx)?.mem_free_async(dptr, st)?;
            if graph_free {
                return Ok(());
            }
        }
    }
    if matches!(a.kind, AllocKind::Memory | AllocKind::Pooled(_)) {
        s.allocs.remove(&dptr);
        s.mem_used -= a.len;
        super::ipc::withdraw(s, pvgpu_ring::proto::IPC_MEMORY, dptr);
        super::ipc::withdraw(s, pvgpu_ring::proto::IPC_POOL_POINTER, dptr);
    } else if a.kind == AllocKind::PoolImported {
        // The exporter's memory: not counted here.
        s.allocs.remove(&dptr);
    } else {
        // The address stays the graph's: its next launch maps it again.
        s.remeasure();
    }
    Ok(())
}

/// Whether an operation on memory of context `ctx` queued on stream
/// `stream` names a stream of another context of the session (a stream of
/// one device copying to or from another device's memory, as unified
/// addressing allows natively; cuFFT's multi-GPU copies do). Then that
/// stream's earlier work is waited for here, and the operation runs in the
/// memory's context, complete when it returns, so the stream's later work
/// follows it. Refused on a capturing stream.
pub(super) fn after_foreign_stream<E: Executor>(s: &mut Session<E>, ctx: u64, stream: u64) -> CuRes<bool> {
    let other = match stream {
        0 => return Ok(false),
        id => s.streams.get(id).map(|st| (st.ctx, st.value)).ok_or(CuError::INVALID_HANDLE)?,
    };
    let (other_ctx, st) = other;
    if other_ctx == ctx {
        return Ok(false);
    }
    if super::graph::capturing(s, other_ctx, st)? {
        return Err(CuError::STREAM_CAPTURE_UNSUPPORTED);
    }
    s.enter(other_ctx)?.stream_synchronize(st)?;
    Ok(true)
}

/// `cuMemFreeAsync` on a stream of another context than the one that
/// allocated (device 1's stream freeing what device 0's pool gave, as
/// streamOrderedAllocationP2P does): the allocating context frees it once
/// the work so far of `stream` (of context `ctx`) is done, ordered through
/// an event.
fn free_after_other_context<E: Executor>(s: &mut Session<E>, dptr: u64, owner: u64, stream: u64, ctx: u64) -> CuRes<()> {
    let st = s.stream(stream, ctx)?;
    if in_capture(s, ctx, st)? {
        return Err(CuError::STREAM_CAPTURE_UNSUPPORTED);
    }
    let c = s.enter(ctx)?;
    let ev = c.event_create(pvgpu_ring::cuda::api::CU_EVENT_DISABLE_TIMING.0)?;
    let recorded = c.event_record(ev, st);
    let freed = recorded.and_then(|()| {
        let o = s.enter(owner)?;
        o.stream_wait_foreign_event(None, ev)?;
        o.mem_free_async(dptr, None)
    });
    // The wait holds what it needs: the event can go at once.
    s.enter(ctx)?.event_destroy(ev)?;
    freed
}

pub(super) fn mem_alloc<E: Executor>(s: &mut Session<E>, r: proto::MemAlloc, _: &mut Io<'_>) -> CuRes<DptrRep> {
    allocate(s, r.ctx.get(), r.size.get(), None)
}

pub(super) fn mem_alloc_async<E: Executor>(s: &mut Session<E>, r: proto::MemAllocAsync, _: &mut Io<'_>) -> CuRes<DptrRep> {
    allocate(s, r.ctx.get(), r.size.get(), Some(r.stream.get()))
}

pub(super) fn mem_free<E: Executor>(s: &mut Session<E>, r: proto::MemFree, _: &mut Io<'_>) -> CuRes<()> {
    release(s, r.dptr.get(), None)
}

pub(super) fn mem_free_async<E: Executor>(s: &mut Session<E>, r: proto::MemFreeAsync, _: &mut Io<'_>) -> CuRes<()> {
    release(s, r.dptr.get(), Some(r.stream.get()))
}

/// A pool access request's flags to set (`None`: asked): none, read, or
/// read and write (the driver checks the pair).
pub(super) fn access_flags(set: u32, flags: u32) -> CuRes<Option<u32>> {
    match (set, flags) {
        (0, _) => Ok(None),
        (1, f @ (0 | 1 | 3)) => Ok(Some(f)),
        _ => Err(CuError::INVALID_VALUE),
    }
}

/// Whether a session may read (`set` `None`) or set pool attribute
/// `attr`: see [`mem_pool_attribute`].
pub(super) fn pool_attribute_allowed(attr: u32, set: Option<u64>) -> bool {
    match set {
        None => (1..=8).contains(&attr),
        Some(v) => (1..=4).contains(&attr) || (matches!(attr, 6 | 8) && v == 0),
    }
}

/// Attributes of the default pool a session may read: the reuse policies
/// (1-3), the release threshold (4), and the reserved and used amounts and
/// their high-water marks (5-8). It may set the reuse policies and the
/// release threshold, and reset the high-water marks to 0.
pub(super) fn mem_pool_attribute<E: Executor>(s: &mut Session<E>, r: proto::MemPoolAttribute, _: &mut Io<'_>) -> CuRes<U64Rep> {
    let (attr, value) = (r.attr.get(), r.value.get());
    let set = (r.set.get() != 0).then_some(value);
    if !pool_attribute_allowed(attr, set) {
        return Err(CuError::INVALID_VALUE);
    }
    let v = s.enter(r.ctx.get())?.mem_pool_attribute(attr, set)?;
    Ok(U64Rep { value: v.into() })
}

/// Another device's access to the default pool of a context's device
/// (`flags` none, read, or read and write; the driver checks the pair).
pub(super) fn mem_pool_access<E: Executor>(s: &mut Session<E>, r: proto::MemPoolAccess, _: &mut Io<'_>) -> CuRes<I32Rep> {
    let peer = s.device(r.dev.get())?;
    let set = access_flags(r.set.get(), r.flags.get())?;
    let ctx = r.ctx.get();
    let device = s.ctxs.get(ctx).ok_or(CuError::INVALID_CONTEXT)?.device;
    s.enter(ctx)?;
    let flags = s.exec.mem_pool_access(device, peer, set)?;
    Ok(I32Rep { value: (flags as i32).into() })
}

pub(super) fn mem_get_info<E: Executor>(s: &mut Session<E>, r: proto::MemGetInfo, _: &mut Io<'_>) -> CuRes<MemInfoRep> {
    let (mut free, mut total) = s.enter(r.ctx.get())?.mem_get_info()?;
    if let Some(q) = s.limits.mem_quota {
        total = total.min(q);
        free = free.min(q.saturating_sub(s.charged()));
    }
    Ok(MemInfoRep { free: free.into(), total: total.into() })
}

pub(super) fn memset<E: Executor>(s: &mut Session<E>, r: proto::Memset, _: &mut Io<'_>) -> CuRes<()> {
    let (dptr, count, elem) = (r.dptr.get(), r.count.get(), r.elem_size.get());
    let len = count.checked_mul(elem as u64).ok_or(CuError::INVALID_VALUE)?;
    if len == 0 {
        return Ok(());
    }
    if dptr % elem as u64 != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = s.device_ranges(&[(dptr, len)], r.stream.get())?;
    let st = if after_foreign_stream(s, ctx, r.stream.get())? { None } else { s.stream(r.stream.get(), ctx)? };
    s.enter(ctx)?.memset(dptr, r.value.get(), elem, count, st)
}

pub(super) fn memcpy_htod<E: Executor>(s: &mut Session<E>, r: proto::MemcpyHtoD<'_>, io: &mut Io<'_>) -> CuRes<()> {
    let (p, len) = Session::<E>::source(&r.head.data, r.data, io.area)?;
    if len == 0 {
        return Ok(());
    }
    let dst = r.head.dst.get();
    let ctx = s.range(dst, len as u64)?;
    let foreign = after_foreign_stream(s, ctx, r.head.stream.get())?;
    let st = if foreign { None } else { s.stream(r.head.stream.get(), ctx)? };
    let wait = foreign || !pinned_async(r.head.flags.get(), &r.head.data);
    super::graph::refuse_during_capture(s, ctx, st, !wait)?;
    match r.head.data.location() {
        Ok(DataLoc::Inline) => super::pinning::ensure(s, ctx, len),
        Ok(DataLoc::Area { offset }) => super::area_pin::before_copy(s, ctx, offset, len),
        Err(_) => {}
    }
    let c = s.enter(ctx)?;
    // SAFETY: `source` checked [p, p+len) lies in the request or the data
    // area. Without `wait` it is page-locked memory the program owns in the
    // data area, which stays mapped until the session's contexts are gone.
    unsafe { c.htod(dst, p, len, st, wait) }?;
    s.count_copy(Direction::HostToDevice, len as u64);
    Ok(())
}

pub(super) fn memcpy_dtoh<E: Executor>(s: &mut Session<E>, r: proto::MemcpyDtoH, io: &mut Io<'_>) -> CuRes<proto::Bulk> {
    let len = usize::try_from(r.data.len.get()).map_err(|_| CuError::INVALID_VALUE)?;
    if len == 0 {
        return Ok(proto::Bulk);
    }
    let src = r.src.get();
    let ctx = s.range(src, len as u64)?;
    let foreign = after_foreign_stream(s, ctx, r.stream.get())?;
    let st = if foreign { None } else { s.stream(r.stream.get(), ctx)? };
    super::graph::refuse_during_capture(s, ctx, st, pinned_async(r.flags.get(), &r.data))?;
    match r.data.location().map_err(|_| CuError::INVALID_VALUE)? {
        DataLoc::Inline => match io.reply_room.and_then(|r| r.take(len)) {
            Some(p) => {
                super::pinning::ensure(s, ctx, len);
                let c = s.enter(ctx)?;
                // SAFETY: the connection's staging holds `len` writable
                // bytes at `p` (`take`), which nothing else touches until
                // the reply is sent.
                unsafe { c.dtoh(p, src, len, st, true)? };
                io.staged = len;
            }
            None => {
                io.out.resize(len, 0);
                let c = s.enter(ctx)?;
                // SAFETY: the reply buffer holds exactly `len` writable bytes.
                unsafe { c.dtoh(io.out.as_mut_ptr(), src, len, st, true)? };
            }
        },
        DataLoc::Area { offset } => {
            let area = io.area.ok_or(CuError::INVALID_VALUE)?;
            let p = area.ptr(offset, len as u64).map_err(|_| CuError::INVALID_VALUE)?;
            super::area_pin::before_copy(s, ctx, offset, len);
            let wait = foreign || !pinned_async(r.flags.get(), &r.data);
            let c = s.enter(ctx)?;
            // SAFETY: [p, p+len) was checked to lie in the data area, which
            // stays mapped until the session's contexts are gone.
            unsafe { c.dtoh(p, src, len, st, wait)? };
        }
    }
    s.count_copy(Direction::DeviceToHost, len as u64);
    Ok(proto::Bulk)
}

pub(super) fn memcpy_dtod<E: Executor>(s: &mut Session<E>, r: proto::MemcpyDtoD, _: &mut Io<'_>) -> CuRes<()> {
    let (dst, src, len) = (r.dst.get(), r.src.get(), r.len.get());
    if len == 0 {
        return Ok(());
    }
    let ranges = s.device_ranges(&[(dst, len), (src, len)], r.stream.get())?;
    // A copy between the memory of two contexts (`cuMemcpyPeerAsync`) may
    // run on a stream of either, or of a third: the stream's context runs
    // it (the backend's address space holds every side).
    let ctx = s.run_context(ranges, r.stream.get())?;
    let st = s.stream(r.stream.get(), ctx)?;
    let is_async = r.flags.get() & proto::COPY_ASYNC != 0;
    let n = usize::try_from(len).map_err(|_| CuError::INVALID_VALUE)?;
    let dir = match (s.mirrors.pageable(dst, len), s.mirrors.pageable(src, len)) {
        (false, false) => {
            s.enter(ctx)?.dtod(dst, src, len, st, is_async)?;
            Direction::DeviceToDevice
        }
        // A mirror of ordinary memory is copied as host memory (a graph
        // records it so when the copy is captured).
        (false, true) => {
            let c = s.enter(ctx)?;
            // SAFETY: the mirror is mapped until the program unmaps it; a
            // copy still running then faults this session's worker only.
            unsafe { c.htod(dst, src as usize as *const u8, n, st, !is_async) }?;
            Direction::HostToDevice
        }
        (true, false) => {
            let c = s.enter(ctx)?;
            // SAFETY: as above.
            unsafe { c.dtoh(dst as usize as *mut u8, src, n, st, !is_async) }?;
            Direction::DeviceToHost
        }
        (true, true) => return Err(CuError::INVALID_VALUE),
    };
    s.count_copy(dir, len);
    Ok(())
}

/// An asynchronous copy to or from page-locked memory the program owns in
/// the data area: queued without waiting for it to finish.
pub(super) fn pinned_async(flags: u32, d: &DataRef) -> bool {
    flags & proto::COPY_ASYNC != 0 && flags & proto::COPY_PINNED != 0 && matches!(d.location(), Ok(DataLoc::Area { .. }))
}
