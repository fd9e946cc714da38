//! Stream capture: begin, end, status and the capture mode. The driver
//! (or the host double) records what the session issues on a capturing
//! stream; here capture's results become session handles.

use super::{Owner, handle};
use crate::exec::graph::ExecGraph;
use crate::exec::{CuRes, Executor};
use crate::session::{Io, Session};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::CU_STREAM_CAPTURE_STATUS_NONE;
use pvgpu_ring::proto::{self, CaptureInfoHead, CaptureInfoRep, HandleRep, I32Rep};

/// The context and executor stream of stream `id` (not the default
/// stream: the legacy stream cannot be captured).
fn capture_stream<E: Executor>(s: &Session<E>, id: u64) -> CuRes<(u64, crate::session::Stream<E>)> {
    if id == 0 {
        return Err(CuError::STREAM_CAPTURE_UNSUPPORTED);
    }
    s.streams.get(id).map(|st| (st.ctx, st.value)).ok_or(CuError::INVALID_HANDLE)
}

pub(in crate::session) fn stream_begin_capture<E: Executor>(s: &mut Session<E>, r: proto::StreamBeginCapture, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, st) = capture_stream(s, r.stream.get())?;
    s.enter(ctx)?.begin_capture(st, r.mode.get())
}

pub(in crate::session) fn stream_begin_capture_to_graph<E: Executor>(
    s: &mut Session<E>,
    r: proto::StreamBeginCaptureToGraph<'_>,
    _: &mut Io<'_>,
) -> CuRes<()> {
    let mode = proto::capture_mode(r.head.mode.get()).map_err(|_| CuError::INVALID_VALUE)?;
    let (ctx, st) = capture_stream(s, r.head.stream.get())?;
    let gid = r.head.graph.get();
    let entry = s.graph.graphs.get(gid).ok_or(CuError::INVALID_VALUE)?;
    if entry.ctx != ctx || !matches!(entry.owner, Owner::Guest | Owner::Body { .. }) {
        return Err(CuError::INVALID_VALUE);
    }
    let g = entry.graph;
    let deps = s.graph.nodes_of(gid, r.deps.iter().map(|d| d.get()))?;
    s.enter(ctx)?.begin_capture_to_graph(st, g, &deps, mode)
}

pub(in crate::session) fn stream_update_capture_deps<E: Executor>(
    s: &mut Session<E>,
    r: proto::StreamUpdateCaptureDeps<'_>,
    _: &mut Io<'_>,
) -> CuRes<()> {
    let flags = r.head.flags.get();
    if flags > 1 {
        return Err(CuError::INVALID_VALUE);
    }
    let (ctx, st) = capture_stream(s, r.head.stream.get())?;
    // The nodes must be of the graph the stream captures into, as named.
    let deps = if r.deps.is_empty() {
        Vec::new()
    } else {
        let graph = s.enter(ctx)?.capture_info(Some(st))?.graph.ok_or(CuError::ILLEGAL_STATE)?;
        let gid = s.graph.graph_ids_get(ctx, graph).ok_or(CuError::INVALID_VALUE)?;
        s.graph.nodes_of(gid, r.deps.iter().map(|d| d.get()))?
    };
    s.enter(ctx)?.update_capture_deps(st, &deps, flags)
}

pub(in crate::session) fn stream_end_capture<E: Executor>(
    s: &mut Session<E>,
    r: proto::StreamEndCapture,
    _: &mut Io<'_>,
) -> CuRes<HandleRep> {
    let (ctx, st) = capture_stream(s, r.stream.get())?;
    // A graph the capture made and the session has named already (a status
    // query names it): forgotten if the capture fails.
    let made = s.enter(ctx)?.capture_info(Some(st))?.graph.and_then(|g| s.graph.graph_ids_get(ctx, g));
    let known = made.filter(|id| s.graph.graphs.get(*id).is_some_and(|g| g.owner == Owner::Capture));
    match s.enter(ctx)?.end_capture(st) {
        Ok(g) => {
            let id = s.graph.graph_id(ctx, g, Owner::Guest)?;
            if let Some(e) = s.graph.graphs.get_mut(id).filter(|e| e.owner == Owner::Capture) {
                e.owner = Owner::Guest;
            }
            Ok(handle(id))
        }
        Err(e) => {
            // A failed capture's graph is gone with it.
            if let Some(id) = known {
                s.graph.forget_graph(id);
            }
            Err(e)
        }
    }
}

pub(in crate::session) fn stream_capture_info<E: Executor>(
    s: &mut Session<E>,
    r: proto::StreamCaptureInfo,
    _: &mut Io<'_>,
) -> CuRes<CaptureInfoRep> {
    let id = r.stream.get();
    let (ctx, st) =
        if id == 0 { (s.current.ok_or(CuError::INVALID_CONTEXT)?, None) } else { capture_stream(s, id).map(|(c, st)| (c, Some(st)))? };
    let info = s.enter(ctx)?.capture_info(st)?;
    if info.status == CU_STREAM_CAPTURE_STATUS_NONE.0 {
        return Ok(CaptureInfoRep::default());
    }
    let graph = match info.graph {
        Some(g) => s.graph.graph_id(ctx, g, Owner::Capture)?,
        None => 0,
    };
    let deps = s.graph.ids_rep(graph, info.deps)?.ids;
    let head = CaptureInfoHead { status: info.status.into(), dep_count: 0.into(), id: info.id.into(), graph: graph.into() };
    Ok(CaptureInfoRep { head, deps })
}

pub(in crate::session) fn capture_mode_exchange<E: Executor>(
    s: &mut Session<E>,
    r: proto::CaptureModeExchange,
    _: &mut Io<'_>,
) -> CuRes<I32Rep> {
    let ctx = s.current.ok_or(CuError::INVALID_CONTEXT)?;
    let old = s.enter(ctx)?.exchange_capture_mode(r.mode.get())?;
    Ok(I32Rep { value: (old as i32).into() })
}

/// Refuses a call on stream `st` while it is capturing, unless `allowed`:
/// a copy whose host side lives only as long as its request (inline bytes,
/// the reply buffer, a staging slot of the data area), which the graph
/// would read or write at every replay, long after it is gone (page-locked
/// memory of the program is allowed); and stream-ordered allocation, whose
/// graph memory nodes would hold memory outside the session's quota.
/// Refused, the call invalidates the capture, as the driver's refusals do.
pub(in crate::session) fn refuse_during_capture<E: Executor>(
    s: &mut Session<E>,
    ctx: u64,
    st: Option<crate::session::Stream<E>>,
    allowed: bool,
) -> CuRes<()> {
    let Some(st) = st.filter(|_| !allowed) else { return Ok(()) };
    if capturing(s, ctx, st)? {
        s.enter(ctx)?.invalidate_capture(st);
        return Err(CuError::STREAM_CAPTURE_UNSUPPORTED);
    }
    Ok(())
}

/// Whether stream `st` of context `ctx` is capturing (an invalidated
/// capture counts).
pub(in crate::session) fn capturing<E: Executor>(s: &mut Session<E>, ctx: u64, st: crate::session::Stream<E>) -> CuRes<bool> {
    Ok(s.enter(ctx)?.capture_info(Some(st))?.status != CU_STREAM_CAPTURE_STATUS_NONE.0)
}
