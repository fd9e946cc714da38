//! Stream capture: begin and end, the capture status of a stream, and the
//! thread's capture mode. The backend's driver records what the program
//! issues on a capturing stream; while no capture this process began is
//! under way, status queries (which allocators make at every allocation)
//! are answered here without a round trip.

use super::exec::stream_info;
use crate::state::{self, Res, handle, put, run, stream};
use pvgpu_frontend::Stream;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::collections::HashMap;
use std::sync::Mutex;

fn begin(s: CUstream, mode: CUstreamCaptureMode) -> Res {
    state::client()?.stream_begin_capture(state::ordered(s), mode.0).map_err(state::cu)
}

/// `cuStreamBeginCapture` (CUDA 10.0's form): a global-mode capture.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamBeginCapture(s: CUstream) -> CuResult {
    run("cuStreamBeginCapture", || begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL))
}

/// `cuStreamBeginCapture_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamBeginCapture_v2(s: CUstream, mode: CUstreamCaptureMode) -> CuResult {
    run("cuStreamBeginCapture_v2", || begin(s, mode))
}

/// `cuStreamEndCapture`: the captured graph.
///
/// # Safety
/// `ph` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamEndCapture(s: CUstream, ph: *mut CUgraph) -> CuResult {
    run("cuStreamEndCapture", || {
        let g = state::client()?.stream_end_capture(stream(s)).map_err(state::cu)?;
        if ph.is_null() {
            // A capture into an existing graph needs no answer (NVIDIA's
            // samples pass none).
            return Ok(());
        }
        // SAFETY: non-null and writable per the API.
        unsafe { put(ph, handle(g.0)) }
    })
}

/// `cuThreadExchangeStreamCaptureMode`: each thread's mode is kept by the
/// client, which works out before each call whether the calling thread may
/// make calls unsafe during capture, and sets the mode of the backend's
/// one thread to say so (`pvgpu_frontend`'s `capture_mode`).
///
/// # Safety
/// `mode` must be readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut CUstreamCaptureMode) -> CuResult {
    run("cuThreadExchangeStreamCaptureMode", || {
        if mode.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: non-null and readable per the API.
        let new = unsafe { mode.read_unaligned() };
        if !matches!(new, CU_STREAM_CAPTURE_MODE_GLOBAL | CU_STREAM_CAPTURE_MODE_THREAD_LOCAL | CU_STREAM_CAPTURE_MODE_RELAXED) {
            return Err(CuError::INVALID_VALUE);
        }
        let old = state::client()?.capture_mode_exchange(new.0).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(mode, CUstreamCaptureMode(old)) }
    })
}

/// The node arrays `cuStreamGetCaptureInfo` hands out, by stream: each
/// stays valid until the next query of its stream, as the driver's do.
/// Held as addresses (`CUgraphNode` is a pointer, which is not `Send`).
static DEPS: Mutex<Option<HashMap<u64, Box<[usize]>>>> = Mutex::new(None);

/// What `cuStreamGetCaptureInfo` answers for stream `s`; the dependency
/// array (if `deps`) is kept in [`DEPS`].
struct Info {
    status: CUstreamCaptureStatus,
    id: u64,
    graph: CUgraph,
    deps: *const CUgraphNode,
    count: usize,
}

fn info(s: CUstream, with_deps: bool) -> Result<Info, CuError> {
    stream_info(s)?;
    let c = state::client()?;
    let none = Info { status: CU_STREAM_CAPTURE_STATUS_NONE, id: 0, graph: std::ptr::null_mut(), deps: std::ptr::null(), count: 0 };
    if !c.capturing() {
        return Ok(none);
    }
    let st = stream(s);
    let i = c.stream_capture_info(st).map_err(state::cu)?;
    let mut info =
        Info { status: CUstreamCaptureStatus(i.status), id: i.id, graph: i.graph.map_or(std::ptr::null_mut(), |g| handle(g.0)), ..none };
    if with_deps {
        let nodes: Box<[usize]> = i.deps.iter().map(|n| handle(n.0) as usize).collect();
        info.count = nodes.len();
        let mut kept = DEPS.lock().unwrap_or_else(|p| p.into_inner());
        let map = kept.get_or_insert_with(HashMap::new);
        // The boxed slice does not move when the map does; an address and
        // a pointer have one size and layout.
        info.deps = if nodes.is_empty() { std::ptr::null() } else { nodes.as_ptr().cast::<CUgraphNode>() };
        map.insert(st.0, nodes);
    }
    Ok(info)
}

/// Writes `v` where `p` points, if it is not null.
///
/// # Safety
/// A non-null `p` must be writable.
unsafe fn out<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null and writable, per the caller.
        unsafe { p.write_unaligned(v) };
    }
}

/// `cuStreamIsCapturing`.
///
/// # Safety
/// `status` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamIsCapturing(s: CUstream, status: *mut CUstreamCaptureStatus) -> CuResult {
    run("cuStreamIsCapturing", || {
        let i = info(s, false)?;
        // SAFETY: writable per the API.
        unsafe { put(status, i.status) }
    })
}

/// `cuStreamGetCaptureInfo` (CUDA 10.1's form).
///
/// # Safety
/// Each pointer must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(s: CUstream, status: *mut CUstreamCaptureStatus, capture_id: *mut u64) -> CuResult {
    run("cuStreamGetCaptureInfo", || {
        let i = info(s, false)?;
        // SAFETY: per the caller.
        unsafe {
            out(status, i.status);
            out(capture_id, i.id);
        }
        Ok(())
    })
}

/// `cuStreamGetCaptureInfo_v2`.
///
/// # Safety
/// Each pointer must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    s: CUstream,
    status: *mut CUstreamCaptureStatus,
    capture_id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    n: *mut usize,
) -> CuResult {
    // SAFETY: the same contract; no edge data asked for.
    unsafe { cuStreamGetCaptureInfo_v3(s, status, capture_id, graph, deps, std::ptr::null_mut(), n) }
}

/// `cuStreamGetCaptureInfo_v3`: dependencies carry no edge data (pvgpu's
/// edges are the default kind), so a non-null `edges` gets null.
///
/// # Safety
/// Each pointer must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    s: CUstream,
    status: *mut CUstreamCaptureStatus,
    capture_id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    n: *mut usize,
) -> CuResult {
    run("cuStreamGetCaptureInfo_v3", || {
        let i = info(s, !deps.is_null())?;
        let active = i.status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
        // SAFETY: per the caller. The driver writes the other outputs only
        // for an active capture.
        unsafe {
            out(status, i.status);
            if active {
                out(capture_id, i.id);
                out(graph, i.graph);
                out(deps, i.deps);
                out(edges, std::ptr::null());
                out(n, i.count);
            }
        }
        Ok(())
    })
}

/// Whether stream `s` is capturing (without a round trip when no capture
/// is under way).
pub(crate) fn is_capturing(s: Stream) -> Result<bool, CuError> {
    let c = state::client()?;
    if !c.capturing() {
        return Ok(false);
    }
    Ok(c.stream_capture_info(s).map_err(state::cu)?.status != CU_STREAM_CAPTURE_STATUS_NONE.0)
}
