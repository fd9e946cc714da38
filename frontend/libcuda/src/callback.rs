//! Host functions on streams (`cuLaunchHostFunc`, `cuStreamAddCallback`):
//! they run in the guest, in stream order, as the driver runs them.
//!
//! The backend cannot call a function of this process, so the library
//! keeps the order itself: a host function records an event on its stream
//! (after the work before it), and a thread of this library waits for the
//! event and then runs the function, one at a time, in the order they were
//! enqueued (the driver also runs them on one thread). Work enqueued on the
//! same stream afterwards must wait for the function: every submission to
//! a stream first waits here until no host function of that stream is
//! pending ([`gate`]); the legacy default stream waits for all of them, and
//! every stream waits for those of the legacy default stream.
//!
//! That thread's queries and destroys of the events run in relaxed capture
//! mode in the backend: the program may be capturing on another thread in
//! global mode, and the driver would take them for the program's own
//! unsafe calls and invalidate its capture.

use crate::state::{self, Res};
use pvgpu_frontend::{Context, CuError, Event, Stream};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// `CUhostFn`.
pub type HostFn = unsafe extern "C" fn(*mut c_void);
/// `CUstreamCallback`: (stream, status, user data).
pub type StreamCallback = unsafe extern "C" fn(*mut c_void, pvgpu_ring::CuResult, *mut c_void);

/// What to call.
#[derive(Clone, Copy)]
pub enum Call {
    /// `cuLaunchHostFunc`.
    Host(HostFn, usize),
    /// `cuStreamAddCallback`, with the stream handle the program passed.
    Stream(StreamCallback, usize, usize),
}

struct Pending {
    stream: Stream,
    event: Event,
    call: Call,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Pending>,
    worker: bool,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue { pending: VecDeque::new(), worker: false });
static CHANGED: Condvar = Condvar::new();

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: u32 = pvgpu_ring::cuda::api::CU_EVENT_DISABLE_TIMING.0;

/// Enqueues `call` on `stream` of context `ctx`. On a capturing stream a
/// host function becomes a host node of the captured graph, run at every
/// launch (`pvgpu_frontend`'s host calls); a stream callback is refused
/// there and invalidates the capture, as the driver does.
pub fn enqueue(ctx: Context, stream: Stream, call: Call) -> Res {
    let c = state::client()?;
    if crate::api::capture::is_capturing(stream)? {
        return match call {
            // SAFETY: the program gave `f` as a host function taking
            // `data`, to run once per launch of the captured graph.
            Call::Host(f, data) => unsafe { c.launch_host_func_captured(stream, f, data as *mut c_void) }.map_err(state::cu),
            Call::Stream(..) => c.stream_callback_captured(stream).map_err(state::cu),
        };
    }
    let event = c.event_create(ctx, DISABLE_TIMING).map_err(state::cu)?;
    c.event_record(event, stream).map_err(state::cu)?;
    let mut q = queue();
    q.pending.push_back(Pending { stream, event, call });
    if !q.worker {
        std::thread::Builder::new().name("pvgpu-host-fn".into()).spawn(worker).map_err(|_| CuError::OUT_OF_MEMORY)?;
        q.worker = true;
    }
    CHANGED.notify_all();
    Ok(())
}

/// Whether `pending` must run before work on `stream`.
fn blocks(pending: &Pending, stream: Stream) -> bool {
    stream == Stream::DEFAULT || pending.stream == Stream::DEFAULT || pending.stream == stream
}

/// Waits until no host function that work on `stream` must follow is
/// pending.
pub fn gate(stream: Stream) {
    crate::managed::before_device_work(stream);
    let mut q = queue();
    while q.pending.iter().any(|p| blocks(p, stream)) {
        q = CHANGED.wait(q).unwrap_or_else(|p| p.into_inner());
    }
}

/// Whether a host function of `stream` is still pending (`cuStreamQuery`).
pub fn busy(stream: Stream) -> bool {
    queue().pending.iter().any(|p| blocks(p, stream))
}

/// Waits for every pending host function (`cuCtxSynchronize`).
pub fn wait_all() -> Res {
    gate(Stream::DEFAULT);
    Ok(())
}

/// Runs the queue: waits for each host function's event, runs it, and lets
/// the submissions waiting on it go.
fn worker() {
    crate::managed::on_host_fn_thread();
    loop {
        let next = {
            let mut q = queue();
            loop {
                match q.pending.front() {
                    Some(p) => break (p.event, p.call, p.stream),
                    None => q = CHANGED.wait(q).unwrap_or_else(|p| p.into_inner()),
                }
            }
        };
        let (event, call, _) = next;
        let status = wait_for(event);
        // SAFETY: the program passed this function and its data to
        // cuLaunchHostFunc/cuStreamAddCallback, to be called once, on a
        // thread of the driver, after the work before it on its stream.
        unsafe {
            match call {
                Call::Host(f, data) => f(data as *mut c_void),
                Call::Stream(f, stream, data) => f(stream as *mut c_void, pvgpu_ring::CuResult(status), data as *mut c_void),
            }
        }
        if let Ok(c) = state::client() {
            let _ = c.host_fn_event_destroy(event);
        }
        queue().pending.pop_front();
        CHANGED.notify_all();
    }
}

/// Polls `event` until it completes; returns the status the stream reached
/// it with.
fn wait_for(event: Event) -> u32 {
    let Ok(c) = state::client() else { return CuError::DEVICE_UNAVAILABLE.code() };
    let mut pause = Duration::from_micros(20);
    loop {
        match c.host_fn_event_query(event) {
            Ok(true) => return 0,
            Ok(false) => {}
            Err(e) => return state::cu(e).code(),
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// Whether host functions of launched graphs may be due (the flag the
/// host-node thread sleeps on).
static HOST_NODES: Mutex<bool> = Mutex::new(false);
static HOST_NODES_DUE: Condvar = Condvar::new();

/// A graph with host nodes was launched: a thread of this library waits
/// for its host functions and runs them, so that they run even while the
/// program makes no further call (the connection would run them before
/// its next command otherwise).
pub fn host_nodes_launched() {
    static THREAD: std::sync::Once = std::sync::Once::new();
    THREAD.call_once(|| {
        if let Err(e) = std::thread::Builder::new().name("pvgpu-host-node".into()).spawn(host_node_worker) {
            tracing::warn!(error = %e, "no thread for host nodes; they run at the program's next call");
        }
    });
    *HOST_NODES.lock().unwrap_or_else(|p| p.into_inner()) = true;
    HOST_NODES_DUE.notify_one();
}

fn host_node_worker() {
    crate::managed::on_host_fn_thread();
    loop {
        {
            let mut due = HOST_NODES.lock().unwrap_or_else(|p| p.into_inner());
            while !*due {
                due = HOST_NODES_DUE.wait(due).unwrap_or_else(|p| p.into_inner());
            }
            *due = false;
        }
        if let Ok(c) = state::client() {
            if let Err(e) = c.run_host_calls() {
                tracing::debug!(error = %e, "waiting for host nodes failed");
            }
        }
    }
}
