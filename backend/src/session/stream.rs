//! Streams and events: each belongs to one context, and a stream may only
//! be used with objects of its own context.

use super::Io;
use super::{Owned, Session};
use crate::exec::graph::ExecGraph;
use crate::exec::{CuRes, ExecContext, Executor};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::{
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
    CU_LAUNCH_ATTRIBUTE_PRIORITY, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, CU_STREAM_CAPTURE_MODE_RELAXED, CUlaunchAttributeID,
};
use pvgpu_ring::proto::{self, ElapsedRep, HandleRep};

pub(super) fn stream_create<E: Executor>(s: &mut Session<E>, r: proto::StreamCreate, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let ctx = r.ctx.get();
    let st = s.enter(ctx)?.stream_create(r.flags.get(), r.priority.get())?;
    let seq = s.next_made();
    match s.streams.insert(Owned { ctx, value: st, flags: r.flags.get(), priority: r.priority.get(), seq }) {
        Ok(id) => Ok(HandleRep { handle: id.into() }),
        Err(e) => {
            let _ = s.enter(ctx)?.stream_destroy(st);
            Err(e)
        }
    }
}

pub(super) fn stream_destroy<E: Executor>(s: &mut Session<E>, r: proto::StreamDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let st = s.streams.remove(r.stream.get()).ok_or(CuError::INVALID_HANDLE)?;
    s.enter(st.ctx)?.stream_destroy(st.value)
}

/// The stream `id` and its context.
fn owned<E: Executor>(s: &Session<E>, id: u64) -> CuRes<(u64, super::Stream<E>)> {
    s.streams.get(id).map(|st| (st.ctx, st.value)).ok_or(CuError::INVALID_HANDLE)
}

pub(super) fn stream_synchronize<E: Executor>(s: &mut Session<E>, r: proto::StreamSynchronize, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, st) = owned(s, r.stream.get())?;
    s.enter(ctx)?.stream_synchronize(st)?;
    s.synced = true;
    Ok(())
}

pub(super) fn stream_query<E: Executor>(s: &mut Session<E>, r: proto::StreamQuery, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, st) = owned(s, r.stream.get())?;
    if s.enter(ctx)?.stream_query(st)? { Ok(()) } else { Err(CuError::NOT_READY) }
}

/// A stream waits for an event of its own context, or of another of the
/// session's (a device's work waiting for another device's, as multi-GPU
/// programs do). The default stream is the event's context's.
pub(super) fn stream_wait_event<E: Executor>(s: &mut Session<E>, r: proto::StreamWaitEvent, _: &mut Io<'_>) -> CuRes<()> {
    let (ev_ctx, ev) = event(s, r.event.get())?;
    let (ctx, st) = match r.stream.get() {
        0 => (ev_ctx, None),
        id => owned(s, id).map(|(c, st)| (c, Some(st)))?,
    };
    if ctx == ev_ctx { s.enter(ctx)?.stream_wait_event(st, ev) } else { s.enter(ctx)?.stream_wait_foreign_event(st, ev) }
}

/// Attributes a stream may carry: the access-policy window (an L2 hint
/// over the session's own memory), synchronisation policy, priority and
/// memory synchronisation domains.
const STREAM_ATTRS: [CUlaunchAttributeID; 5] = [
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
    CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
    CU_LAUNCH_ATTRIBUTE_PRIORITY,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
];

pub(super) fn stream_attr<E: Executor>(s: &mut Session<E>, r: proto::StreamAttr, _: &mut Io<'_>) -> CuRes<proto::AttrValueRep> {
    let ctx = r.ctx.get();
    let st = s.stream(r.stream.get(), ctx)?;
    let mut value = [0u8; 64];
    if r.op.get() == proto::NODE_ATTR_COPY {
        let src = s.stream(r.src.get(), ctx)?;
        s.enter(ctx)?.stream_copy_attrs(st, src)?;
    } else {
        let attr = r.attr.get();
        if !STREAM_ATTRS.contains(&CUlaunchAttributeID(attr)) {
            return Err(CuError::INVALID_VALUE);
        }
        let set = (r.op.get() == proto::NODE_ATTR_SET).then_some(&r.value);
        value = s.enter(ctx)?.stream_attr(st, attr, set)?;
    }
    Ok(proto::AttrValueRep { value })
}

/// The event `id` and its context.
fn event<E: Executor>(s: &Session<E>, id: u64) -> CuRes<(u64, <super::Ctx<E> as ExecContext>::Event)> {
    s.events.get(id).map(|e| (e.ctx, e.value)).ok_or(CuError::INVALID_HANDLE)
}

pub(super) fn event_create<E: Executor>(s: &mut Session<E>, r: proto::EventCreate, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let ctx = r.ctx.get();
    let ev = s.enter(ctx)?.event_create(r.flags.get())?;
    let seq = s.next_made();
    match s.events.insert(Owned { ctx, value: ev, flags: r.flags.get(), priority: 0, seq }) {
        Ok(id) => {
            super::ipc::event_made(s, id, r.flags.get());
            Ok(HandleRep { handle: id.into() })
        }
        Err(e) => {
            let _ = s.enter(ctx)?.event_destroy(ev);
            Err(e)
        }
    }
}

pub(super) fn event_record<E: Executor>(s: &mut Session<E>, r: proto::EventRecord, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, ev) = event(s, r.event.get())?;
    let st = s.stream(r.stream.get(), ctx)?;
    s.enter(ctx)?.event_record(ev, st)
}

pub(super) fn event_query<E: Executor>(s: &mut Session<E>, r: proto::EventQuery, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, ev) = event(s, r.event.get())?;
    if s.enter(ctx)?.event_query(ev)? { Ok(()) } else { Err(CuError::NOT_READY) }
}

/// The library's own query or destroy of the event it waits on to run a
/// host function (`cuLaunchHostFunc`), from its own thread while the
/// program may be capturing on another. The session's calls all run on
/// this thread, where a query or destroy in the program's capture mode
/// would invalidate a global capture the driver's own host-function thread
/// never disturbs; so it runs in relaxed mode, and the mode is put back.
pub(super) fn host_fn_event<E: Executor>(s: &mut Session<E>, r: proto::HostFnEvent, io: &mut Io<'_>) -> CuRes<()> {
    let (ctx, _) = event(s, r.event.get())?;
    let old = s.enter(ctx)?.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED.0)?;
    let done = if r.destroy.get() == 1 {
        event_destroy(s, proto::EventDestroy { event: r.event }, io)
    } else {
        event_query(s, proto::EventQuery { event: r.event }, io)
    };
    s.enter(ctx)?.exchange_capture_mode(old)?;
    done
}

pub(super) fn event_synchronize<E: Executor>(s: &mut Session<E>, r: proto::EventSynchronize, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, ev) = event(s, r.event.get())?;
    s.enter(ctx)?.event_synchronize(ev)
}

pub(super) fn event_elapsed_time<E: Executor>(s: &mut Session<E>, r: proto::EventElapsedTime, _: &mut Io<'_>) -> CuRes<ElapsedRep> {
    let (ctx, a) = event(s, r.start.get())?;
    let (ctx_b, b) = event(s, r.end.get())?;
    if ctx != ctx_b {
        return Err(CuError::INVALID_HANDLE);
    }
    let ms = s.enter(ctx)?.event_elapsed(a, b)?;
    Ok(ElapsedRep { ms: ms.into() })
}

pub(super) fn event_destroy<E: Executor>(s: &mut Session<E>, r: proto::EventDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let ev = s.events.remove(r.event.get()).ok_or(CuError::INVALID_HANDLE)?;
    super::ipc::event_gone(s, r.event.get());
    s.enter(ev.ctx)?.event_destroy(ev.value)
}

pub(super) fn stream_mem_ops<E: Executor>(s: &mut Session<E>, r: proto::StreamMemOps<'_>, _: &mut Io<'_>) -> CuRes<()> {
    let stream = r.head.stream.get();
    let (ctx, ops) = super::memop::checked(s, r.ops, stream)?;
    let ctx = match (ctx, stream) {
        (Some(c), _) => c,
        (None, 0) => s.current.ok_or(CuError::INVALID_CONTEXT)?,
        (None, id) => owned(s, id)?.0,
    };
    let st = s.stream(stream, ctx)?;
    s.enter(ctx)?.stream_mem_ops(&ops, st)
}
