//! One client's session: decodes its requests, checks every handle and
//! device range against the session's own tables, runs the command on the
//! executor, and builds the reply.
//!
//! Isolation rules enforced here:
//! - every id a request names must be in this session's tables (contexts,
//!   modules, functions, streams, events); anything else is
//!   `CUDA_ERROR_INVALID_HANDLE` / `CUDA_ERROR_INVALID_CONTEXT`;
//! - every device range a copy or memset touches must lie inside one of this
//!   session's allocations (or a module global it looked up);
//! - device memory is capped by the session's quota;
//! - object counts are capped, so a guest cannot exhaust the backend's
//!   memory with handles;
//! - bulk data named by a [`DataRef`] must lie inside the data area; module
//!   images are copied out of shared memory and bounds-checked before the
//!   driver parses them.
//!
//! A request that cannot be decoded (other than an unknown opcode, which is
//! answered with `CUDA_ERROR_NOT_SUPPORTED`) ends the session: the peer is
//! broken or hostile. Dropping the session frees everything it made.
//!
//! The handlers live by family: [`device`] (devices and contexts),
//! [`module`], [`memory`], [`pitched`] (2D copies and memsets), [`vmm`]
//! (virtual memory management), [`stream`] (streams and events) and
//! [`launch`] (launches and function queries); [`handler`] ties each command of the
//! protocol's table to one of them.

mod area_pin;
mod array;
mod array_moves;
mod checkpoint;
mod chunks;
mod device;
mod entries;
mod global_moves;
mod graph;
mod hand_over;
mod handler;
mod ipc;
mod launch;
mod link;
mod memop;
mod memory;
mod mirror;
mod module;
mod peer_copy;
mod pinning;
mod pitched;
mod policy;
mod pool;
mod pool_ipc;
mod premade;
mod quota;
mod restore;
mod restore_error;
mod small_reads;
#[cfg(test)]
mod snapshot_fixture;
mod stream;
mod turns;
mod vmm;

pub use checkpoint::{CheckpointError, Taken};
pub use peer_copy::reserve as reserve_copy_buffer;
pub use premade::{Premade, prepare};
pub use restore::{Rebuilt, RestoreError};

use crate::config::SessionLimits;
use crate::exec::graph::ExecGraph;
use crate::exec::host_call::HostCalls;
use crate::exec::{CuRes, ExecContext, Executor};
use crate::handles::HandleTable;
use crate::image_cache::{ImageCache, Owner};
use crate::log_limit::LogLimiter;
use entries::{Alloc, AllocKind, CtxEntry, FnEntry, ModEntry, Owned};
use pvgpu_ring::proto::{DataLoc, DataRef, DecodeError, Header, Request};
use pvgpu_ring::region::DataArea;
use pvgpu_ring::{CuError, CuResult};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What the caller should do after a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Send a reply with this status and the payload left in `out`.
    Reply(CuResult),
    /// Nothing to send.
    Quiet,
    /// Send the reply, then end the session (orderly goodbye).
    Goodbye(CuResult),
}

/// The peer broke the protocol; the session must end.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    /// A message did not decode.
    #[error("Malformed request")]
    Decode(#[from] DecodeError),
    /// A request arrived before the hello, or a second hello.
    #[error("Protocol violation: {0}")]
    Protocol(&'static str),
}

/// What one request's handler may touch besides the session: the data area
/// of the connection, if it has one, and the reply buffer (written only by
/// handlers whose reply is bulk data).
pub struct Io<'a> {
    area: Option<&'a DataArea>,
    out: &'a mut Vec<u8>,
    /// Where a stream connection's copy writes its reply data, page-locked.
    reply_room: Option<crate::staging::ReplyRoom>,
    /// Bytes written there: the reply's payload after `out`.
    staged: usize,
}

impl<'a> Io<'a> {
    /// For a command the backend makes itself (a restore's, as the guest's
    /// was): no data area, and replies only into `out`.
    pub(super) fn internal(out: &'a mut Vec<u8>) -> Self {
        Io { area: None, out, reply_room: None, staged: 0 }
    }
}

type Ctx<E> = <E as Executor>::Context;
type Stream<E> = <Ctx<E> as ExecContext>::Stream;

/// Per-session state. Dropping it destroys every context, which frees all
/// device memory, modules, streams and events of the session.
pub struct Session<E: Executor> {
    exec: Arc<E>,
    id: u64,
    limits: SessionLimits,
    /// The executor's devices the guest sees, by the guest's ordinal.
    gpus: Vec<usize>,
    hello: bool,
    /// What the frontend's hello announced besides its versions
    /// (`Hello::features`).
    features: u16,
    /// The program's address space at this backend (the hello's
    /// `space`): in every id the session makes, and where it places
    /// contexts' memory.
    space: u16,
    initialized: bool,
    ctxs: HandleTable<CtxEntry<Ctx<E>>>,
    primary: HashMap<usize, (u64, u32)>,
    modules: HandleTable<ModEntry<<Ctx<E> as ExecContext>::Module>>,
    functions: HandleTable<FnEntry<<Ctx<E> as ExecContext>::Function>>,
    function_ids: HashMap<(u64, String), u64>,
    streams: HandleTable<Owned<Stream<E>>>,
    events: HandleTable<Owned<<Ctx<E> as ExecContext>::Event>>,
    /// Memory pools of the program's own.
    pools: HandleTable<pool::PoolEntry>,
    /// Graphs, their nodes and executable graphs.
    graph: graph::Graphs<E>,
    /// Mirrored host memory.
    mirrors: mirror::Mirrors,
    /// Linked images the program has not read yet.
    links: link::Links,
    allocs: BTreeMap<u64, Alloc>,
    vmm: vmm::Vmm,
    /// CUDA arrays, texture and surface objects.
    arrays: array::Arrays,
    /// What the session exported to, and opened from, other processes.
    ipc: ipc::Ipc,
    /// Copies to and from another backend's session, under way.
    copies: peer_copy::PeerCopies,
    mem_used: u64,
    /// Device memory the session holds besides its allocations (what the
    /// driver reserved for its contexts, limits and modules), as last
    /// measured; see [`SessionLimits::footprint`].
    overhead: u64,
    /// What the process held besides allocations once the session's first
    /// context was made: the cost of having a context at all, which the
    /// quota does not count.
    baseline: Option<u64>,
    pending: Option<CuError>,
    current: Option<u64>,
    /// Modules, streams, events and arrays made so far: each is numbered in turn,
    /// so that a restore makes them again in the same order (where the
    /// driver places a module's globals depends on what it made before).
    made: u64,
    /// The device whose GPU turn this request holds ([`turns`]).
    turn: Option<usize>,
    /// This request waited for all the session queued in a context or on
    /// a stream: the turn may go back without a drain ([`turns`]).
    synced: bool,
    /// Context through which the data area is page-locked, if any.
    area_pinned_by: Option<u64>,
    /// The data area's device address, when the device can reach it.
    area_device: Option<u64>,
    /// The data area's parts, page-locked on demand, when the frontend
    /// asked for that ([`area_pin`]).
    on_demand: Option<area_pin::OnDemand>,
    /// A stream connection's staging ([`Session::set_staging`]).
    staging: Option<pinning::Pinned>,
    /// Reply bytes the last request left in the staging.
    staged: usize,
    /// Module images kept between sessions, and who this session's guest
    /// is to it.
    images: Option<(Arc<ImageCache>, Owner)>,
    /// Rate limit for guest-triggered log lines.
    pub log: LogLimiter,
    param_buf: Vec<u64>,
    /// Host functions of the session's graphs, due in the program.
    host_calls: Arc<HostCalls>,
    /// Largest reply payload the connection carries.
    max_reply: usize,
    /// What a new connection presents to take this session back after a
    /// checkpoint (all zero: the kernel gave no random bytes, and the
    /// session cannot be checkpointed).
    token: [u8; 16],
    /// What kernels of destroyed contexts printed, not yet sent.
    output_left: crate::exec::Printed,
    /// A session made ahead from the skeleton of the session this one
    /// may be asked to take back ([`premade`]).
    premade: Option<Box<Premade<E>>>,
}

/// Device-side range to check.
fn end_of(ptr: u64, len: u64) -> CuRes<u64> {
    ptr.checked_add(len).ok_or(CuError::INVALID_VALUE)
}

impl<E: Executor> Session<E> {
    /// A new session numbered `id`.
    pub fn new(exec: Arc<E>, id: u64, limits: SessionLimits) -> Self {
        let n = limits.max_objects;
        let have = exec.devices().len();
        let gpus = match &limits.gpus {
            Some(list) => list.iter().copied().filter(|&d| d < have).collect(),
            None => (0..have).collect(),
        };
        Session {
            gpus,
            exec,
            id,
            limits,
            hello: false,
            features: 0,
            space: 0,
            initialized: false,
            ctxs: HandleTable::new(n.min(256)),
            primary: HashMap::new(),
            modules: HandleTable::new(n),
            functions: HandleTable::new(n),
            function_ids: HashMap::new(),
            streams: HandleTable::new(n),
            events: HandleTable::new(n),
            pools: HandleTable::new(n),
            graph: graph::Graphs::new(n),
            mirrors: mirror::Mirrors::default(),
            links: link::Links::default(),
            allocs: BTreeMap::new(),
            vmm: vmm::Vmm::new(n),
            arrays: array::Arrays::new(n),
            ipc: ipc::Ipc::default(),
            copies: Default::default(),
            mem_used: 0,
            overhead: 0,
            baseline: None,
            pending: None,
            current: None,
            made: 0,
            turn: None,
            synced: false,
            area_pinned_by: None,
            area_device: None,
            on_demand: None,
            staging: None,
            staged: 0,
            images: None,
            log: LogLimiter::default(),
            param_buf: Vec::new(),
            host_calls: Arc::default(),
            max_reply: pvgpu_ring::proto::MAX_PAYLOAD,
            token: crate::ipc::random_token().unwrap_or_default(),
            output_left: Default::default(),
            premade: None,
        }
    }

    /// Makes every id from now on, and every context's memory where the
    /// executor places it, those of address space `space`.
    pub(crate) fn set_space(&mut self, space: u16) {
        self.space = space;
        self.ctxs.set_space(space);
        self.modules.set_space(space);
        self.functions.set_space(space);
        self.streams.set_space(space);
        self.events.set_space(space);
        self.pools.set_space(space);
        self.graph.set_space(space);
        self.vmm.set_space(space);
        self.arrays.set_space(space);
    }

    /// Serves module images from `cache` to this session's guest, `owner`,
    /// and keeps those it sends there.
    pub fn with_image_cache(mut self, cache: Arc<ImageCache>, owner: Owner) -> Self {
        self.images = Some((cache, owner));
        self
    }

    /// Tells the session the largest reply payload its connection carries
    /// (replies built to fit, such as mirror changes, stay within it).
    pub fn set_max_reply(&mut self, bytes: usize) {
        self.max_reply = bytes.min(pvgpu_ring::proto::MAX_PAYLOAD);
    }

    /// Reply bytes the last request processed left in the connection's
    /// staging, to be sent after its reply payload.
    pub fn staged_reply(&self) -> usize {
        self.staged
    }

    /// The queue of host calls due in the program.
    pub fn host_calls(&self) -> &Arc<HostCalls> {
        &self.host_calls
    }

    /// Whether launches that run host nodes are still under way in any
    /// context (an error ends the wait; the program's next call reports
    /// it).
    pub fn host_work_pending(&mut self) -> bool {
        let ids: Vec<u64> = self.ctxs.iter().map(|(id, _)| id).collect();
        let mut pending = false;
        for id in ids {
            pending |= self.enter(id).and_then(|c| c.host_work_pending()).unwrap_or(false);
        }
        pending
    }

    /// Whether the connection opened (hello or resume).
    pub fn greeted(&self) -> bool {
        self.hello
    }

    /// Whether the frontend's hello said that it reads
    /// [`pvgpu_ring::proto::FLAG_LEAVE_WANTED`] messages.
    pub fn reads_leave_frames(&self) -> bool {
        self.features & pvgpu_ring::proto::FEATURE_LEAVE_FRAMES != 0
    }

    /// Session number.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The token its guest presents to take it back after a checkpoint.
    pub fn token(&self) -> [u8; 16] {
        self.token
    }

    /// Whether this process serves this session alone (a worker): what it
    /// holds on the device, and its own addresses, are the session's.
    fn own_process(&self) -> bool {
        self.limits.footprint
    }

    /// Device memory held, in bytes.
    pub fn mem_used(&self) -> u64 {
        self.mem_used
    }

    /// The session's meter, where it counts what it does.
    pub(crate) fn meter(&self) -> Option<&crate::meter::MeterView> {
        self.limits.meter.as_ref()
    }

    /// Counts `bytes` copied `dir`.
    pub(crate) fn count_copy(&self, dir: crate::meter::Direction, bytes: u64) {
        if let Some(m) = &self.limits.meter {
            m.copied(dir, bytes);
        }
    }

    /// Moves what the session's kernels printed since the last call into
    /// `out`, for the program's standard output and error.
    pub fn take_output(&mut self, out: &mut crate::exec::Printed) {
        out.append(&mut self.output_left);
        for c in self.ctxs.iter_mut() {
            c.ctx.take_output(out);
        }
    }

    /// Handles one request. `payload` is a private copy; `area` is the data
    /// area when the transport has one. The reply payload is left in `out`.
    pub fn process(&mut self, h: &Header, payload: &[u8], area: Option<&DataArea>, out: &mut Vec<u8>) -> Result<Outcome, Broken> {
        out.clear();
        self.staged = 0;
        let req = match Request::decode(h, payload) {
            Ok(r) => r,
            Err(DecodeError::UnknownOpcode(op)) => {
                if self.log.allow(self.id) {
                    tracing::warn!(session = self.id, opcode = op, "unknown opcode; answering CUDA_ERROR_NOT_SUPPORTED");
                }
                return Ok(self.finish(h, Err(CuError::NOT_SUPPORTED)));
            }
            Err(e) => return Err(e.into()),
        };
        match (&req, self.hello) {
            (Request::Hello(_), true) => return Err(Broken::Protocol("second hello")),
            (Request::Hello(_), false) => {}
            (_, false) => return Err(Broken::Protocol("request before hello")),
            _ => {}
        }
        if h.wants_reply() && req.opcode().reports_pending() {
            if let Some(e) = self.pending.take() {
                return Ok(Outcome::Reply(e.into()));
            }
        }
        if let Request::Goodbye(_) = req {
            return Ok(Outcome::Goodbye(CuResult::SUCCESS));
        }
        // What a failed request asked, for `RUST_LOG=pvgpu_backend::session=trace`.
        let asked = tracing::enabled!(tracing::Level::TRACE).then(|| format!("{req:?}"));
        tracing::trace!(session = self.id, opcode = ?req.opcode(), "request");
        let mut io = Io { area, out, reply_room: self.staging.as_ref().map(|p| p.reply), staged: 0 };
        let r = req.dispatch(self, &mut io);
        self.staged = if r.is_ok() { io.staged } else { 0 };
        self.settle();
        if let Err(e) = r {
            if let Some(asked) = asked {
                tracing::trace!(session = self.id, request = %asked, status = ?e, "request failed");
            }
            out.clear();
        }
        Ok(self.finish(h, r))
    }

    fn finish(&mut self, h: &Header, r: CuRes<()>) -> Outcome {
        if h.wants_reply() {
            if let Err(e) = r {
                tracing::trace!(session = self.id, opcode = h.opcode.get(), status = ?e, "call failed");
            }
            return Outcome::Reply(r.into());
        }
        if let Err(e) = r {
            if self.pending.is_none() {
                tracing::debug!(session = self.id, status = ?e, "error in a call without reply; reported at the next synchronising call");
                self.pending = Some(e);
            }
        }
        Outcome::Quiet
    }

    fn need_init(&self) -> CuRes<()> {
        if self.initialized { Ok(()) } else { Err(CuError::NOT_INITIALIZED) }
    }

    /// The executor's device behind the guest's ordinal `d`.
    fn device(&self, d: i32) -> CuRes<usize> {
        self.need_init()?;
        usize::try_from(d).ok().and_then(|d| self.gpus.get(d).copied()).ok_or(CuError::INVALID_DEVICE)
    }

    /// The next number in the order modules, streams, events and arrays
    /// are made.
    fn next_made(&mut self) -> u64 {
        self.made += 1;
        self.made
    }

    /// Makes context `id` current and returns it.
    fn enter(&mut self, id: u64) -> CuRes<&mut Ctx<E>> {
        if self.limits.gpu_turns && self.turn.is_none() {
            let device = self.ctxs.get(id).ok_or(CuError::INVALID_CONTEXT)?.device;
            self.take_turn(device);
        }
        let e = self.ctxs.get_mut(id).ok_or(CuError::INVALID_CONTEXT)?;
        if self.current != Some(id) {
            e.ctx.make_current()?;
            self.current = Some(id);
        }
        Ok(&mut e.ctx)
    }

    /// The context that runs a device-to-device copy of memory of context
    /// `mem_ctx` queued on stream `stream`: the stream's own (the backend's
    /// address space holds every side), or `mem_ctx` for the default
    /// stream.
    fn run_context(&self, mem_ctx: u64, stream: u64) -> CuRes<u64> {
        match stream {
            0 => Ok(mem_ctx),
            id => self.streams.get(id).map(|st| st.ctx).ok_or(CuError::INVALID_HANDLE),
        }
    }

    /// The stream `id` (0: the default stream) of context `ctx`.
    fn stream(&self, id: u64, ctx: u64) -> CuRes<Option<Stream<E>>> {
        if id == 0 {
            return Ok(None);
        }
        let s = self.streams.get(id).ok_or(CuError::INVALID_HANDLE)?;
        if s.ctx != ctx {
            return Err(CuError::INVALID_HANDLE);
        }
        Ok(Some(s.value))
    }

    /// The context of the first of the device ranges an operation on
    /// stream `stream` names (each `(ptr, len)`): each checked against the session's
    /// allocations, except while that stream is capturing. The driver
    /// records such an operation without looking at its addresses
    /// (frameworks capture with placeholders and set the real ones in the
    /// executable graph), and a graph runs in the session's own context,
    /// where a bad address faults that context only, as any kernel's would.
    fn device_ranges(&mut self, ranges: &[(u64, u64)], stream: u64) -> CuRes<u64> {
        let checked = ranges.iter().map(|&(p, l)| self.range(p, l)).collect::<CuRes<Vec<u64>>>();
        match checked {
            Ok(ctxs) => ctxs.first().copied().ok_or(CuError::INVALID_VALUE),
            Err(e) => {
                let Some((ctx, st)) = self.streams.get(stream).filter(|_| stream != 0).map(|st| (st.ctx, st.value)) else { return Err(e) };
                let capturing = graph::capturing(self, ctx, st)?;
                if capturing { Ok(ctx) } else { Err(e) }
            }
        }
    }

    /// Checks that `[ptr, ptr+len)` lies inside one allocation of this
    /// session; returns the owning context.
    fn range(&self, ptr: u64, len: u64) -> CuRes<u64> {
        let end = end_of(ptr, len)?;
        let (&start, a) = self.allocs.range(..=ptr).next_back().ok_or(CuError::INVALID_VALUE)?;
        if end > start + a.len {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(a.ctx)
    }

    /// Resolves bulk data named by a request to a pointer and length.
    fn source(d: &DataRef, inline: &[u8], area: Option<&DataArea>) -> CuRes<(*const u8, usize)> {
        let len = usize::try_from(d.len.get()).map_err(|_| CuError::INVALID_VALUE)?;
        match d.location().map_err(|_| CuError::INVALID_VALUE)? {
            DataLoc::Inline => Ok((inline.as_ptr(), inline.len())),
            DataLoc::Area { offset } => {
                let area = area.ok_or(CuError::INVALID_VALUE)?;
                let p = area.ptr(offset, len as u64).map_err(|_| CuError::INVALID_VALUE)?;
                Ok((p as *const u8, len))
            }
        }
    }
}

impl<E: Executor> Drop for Session<E> {
    fn drop(&mut self) {
        // Host nodes still waiting for the program go on without it.
        self.host_calls.close();
        let ctxs = self.ctxs.len();
        if ctxs > 0 || self.mem_used > 0 {
            tracing::info!(session = self.id, contexts = ctxs, bytes = self.mem_used, "freeing session resources");
        }
        // Virtual memory is the driver's past a context: give it back while
        // the contexts exist; graphs go first (they may hold memory).
        graph::forget(self, None);
        vmm::forget(self, None);
        array::forget(self, None);
        ipc::forget(self, None);
        pool::forget(self, None);
        mirror::forget(self);
        pinning::release(self);
        // Forget handles before their contexts go: dropping a context frees
        // everything made in it.
        self.functions.drain_where(|_| true);
        self.modules.drain_where(|_| true);
        self.streams.drain_where(|_| true);
        self.events.drain_where(|_| true);
        self.ctxs.drain_where(|_| true);
    }
}
