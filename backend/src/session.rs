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

use crate::exec::{CuRes, ExecContext, Executor, LaunchDims, Param};
use crate::handles::HandleTable;
use pvgpu_ring::CuResult;
use pvgpu_ring::proto::{
    self, AttrPair, CtxInfoRep, DataLoc, DataRef, DecodeError, DevicePropsRep, DptrRep, ElapsedRep, FunctionRep, GlobalRep, HandleRep,
    Header, HelloRep, I32Rep, MemInfoRep, OccupancyRep, PROTOCOL_VERSION, ParamInfo, Request, U64Rep,
};
use pvgpu_ring::region::DataArea;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zerocopy::IntoBytes;

/// Limits applied to each session.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Device memory a session may hold, in bytes.
    pub mem_quota: Option<u64>,
    /// Objects of each kind (contexts, modules, functions, streams, events,
    /// allocations) a session may hold.
    pub max_objects: usize,
    /// Largest module image accepted, in bytes.
    pub max_image: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits { mem_quota: None, max_objects: 65536, max_image: proto::MAX_PAYLOAD }
    }
}

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
    #[error("Malformed request: {0}")]
    Decode(#[from] DecodeError),
    /// A request arrived before the hello, or a second hello.
    #[error("Protocol violation: {0}")]
    Protocol(&'static str),
}

/// Rate limiter for log lines a guest can trigger.
pub struct LogLimiter {
    window: Instant,
    count: u32,
    suppressed: u32,
}

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter { window: Instant::now(), count: 0, suppressed: 0 }
    }
}

impl LogLimiter {
    const PER_WINDOW: u32 = 10;
    const WINDOW: Duration = Duration::from_secs(10);

    /// Whether to log now; counts what it suppresses and reports the count
    /// when the next window opens.
    pub fn allow(&mut self, session: u64) -> bool {
        if self.window.elapsed() >= Self::WINDOW {
            if self.suppressed > 0 {
                tracing::warn!(session, suppressed = self.suppressed, "suppressed repeated guest-triggered log lines");
            }
            self.window = Instant::now();
            self.count = 0;
            self.suppressed = 0;
        }
        if self.count < Self::PER_WINDOW {
            self.count += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

struct CtxEntry<C> {
    primary: bool,
    ctx: C,
}

struct Owned<T> {
    ctx: u64,
    value: T,
}

struct ModEntry<M> {
    ctx: u64,
    module: Option<M>,
}

struct FnEntry<F> {
    ctx: u64,
    module: u64,
    func: F,
    layout: Vec<Param>,
    param_bytes: usize,
}

#[derive(Clone, Copy)]
struct Alloc {
    len: u64,
    ctx: u64,
    /// Module whose global this is; `None` for `cuMemAlloc` memory.
    global_of: Option<u64>,
}

type Ctx<E> = <E as Executor>::Context;
type Stream<E> = <Ctx<E> as ExecContext>::Stream;

/// Per-session state. Dropping it destroys every context, which frees all
/// device memory, modules, streams and events of the session.
pub struct Session<E: Executor> {
    exec: Arc<E>,
    id: u64,
    limits: SessionLimits,
    hello: bool,
    initialized: bool,
    ctxs: HandleTable<CtxEntry<Ctx<E>>>,
    primary: HashMap<usize, (u64, u32)>,
    modules: HandleTable<ModEntry<<Ctx<E> as ExecContext>::Module>>,
    functions: HandleTable<FnEntry<<Ctx<E> as ExecContext>::Function>>,
    function_ids: HashMap<(u64, String), u64>,
    streams: HandleTable<Owned<Stream<E>>>,
    events: HandleTable<Owned<<Ctx<E> as ExecContext>::Event>>,
    allocs: BTreeMap<u64, Alloc>,
    mem_used: u64,
    pending: Option<CuResult>,
    current: Option<u64>,
    /// Context through which the data area is page-locked, if any.
    area_pinned_by: Option<u64>,
    /// Rate limit for guest-triggered log lines.
    pub log: LogLimiter,
    param_buf: Vec<u64>,
}

/// Device-side range to check.
fn end_of(ptr: u64, len: u64) -> CuRes<u64> {
    ptr.checked_add(len).ok_or(CuResult::INVALID_VALUE)
}

impl<E: Executor> Session<E> {
    /// A new session numbered `id`.
    pub fn new(exec: Arc<E>, id: u64, limits: SessionLimits) -> Self {
        let n = limits.max_objects;
        Session {
            exec,
            id,
            limits,
            hello: false,
            initialized: false,
            ctxs: HandleTable::new(n.min(256)),
            primary: HashMap::new(),
            modules: HandleTable::new(n),
            functions: HandleTable::new(n),
            function_ids: HashMap::new(),
            streams: HandleTable::new(n),
            events: HandleTable::new(n),
            allocs: BTreeMap::new(),
            mem_used: 0,
            pending: None,
            current: None,
            area_pinned_by: None,
            log: LogLimiter::default(),
            param_buf: Vec::new(),
        }
    }

    /// Session number.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Device memory held, in bytes.
    pub fn mem_used(&self) -> u64 {
        self.mem_used
    }

    /// Handles one request. `payload` is a private copy; `area` is the data
    /// area when the transport has one. The reply payload is left in `out`.
    pub fn process(&mut self, h: &Header, payload: &[u8], area: Option<&DataArea>, out: &mut Vec<u8>) -> Result<Outcome, Broken> {
        out.clear();
        let req = match Request::decode(h, payload) {
            Ok(r) => r,
            Err(DecodeError::UnknownOpcode(op)) => {
                if self.log.allow(self.id) {
                    tracing::warn!(session = self.id, opcode = op, "unknown opcode; answering CUDA_ERROR_NOT_SUPPORTED");
                }
                return Ok(self.finish(h, Err(CuResult::NOT_SUPPORTED)));
            }
            Err(e) => return Err(e.into()),
        };
        match (&req, self.hello) {
            (Request::Hello(_), true) => return Err(Broken::Protocol("second hello")),
            (Request::Hello(_), false) => {}
            (_, false) => return Err(Broken::Protocol("request before hello")),
            _ => {}
        }
        let wants = h.wants_reply();
        if wants && !matches!(req, Request::Hello(_) | Request::Goodbye | Request::Nop | Request::DriverGetVersion) {
            if let Some(e) = self.pending.take() {
                return Ok(Outcome::Reply(e));
            }
        }
        if let Request::Goodbye = req {
            return Ok(Outcome::Goodbye(CuResult::SUCCESS));
        }
        let r = self.dispatch(req, area, out);
        if r.is_err() {
            out.clear();
        }
        Ok(self.finish(h, r))
    }

    fn finish(&mut self, h: &Header, r: CuRes<()>) -> Outcome {
        let status = match r {
            Ok(()) => CuResult::SUCCESS,
            Err(e) => e,
        };
        if h.wants_reply() {
            Outcome::Reply(status)
        } else {
            if !status.is_success() && self.pending.is_none() {
                tracing::debug!(session = self.id, ?status, "error in a call without reply; reported at the next synchronising call");
                self.pending = Some(status);
            }
            Outcome::Quiet
        }
    }

    fn need_init(&self) -> CuRes<()> {
        if self.initialized { Ok(()) } else { Err(CuResult::NOT_INITIALIZED) }
    }

    fn device(&self, d: i32) -> CuRes<usize> {
        self.need_init()?;
        usize::try_from(d).ok().filter(|&d| d < self.exec.devices().len()).ok_or(CuResult::INVALID_DEVICE)
    }

    /// Makes context `id` current and returns it.
    fn enter(&mut self, id: u64) -> CuRes<&mut Ctx<E>> {
        let e = self.ctxs.get_mut(id).ok_or(CuResult::INVALID_CONTEXT)?;
        if self.current != Some(id) {
            e.ctx.make_current()?;
            self.current = Some(id);
        }
        Ok(&mut e.ctx)
    }

    fn stream(&self, id: u64, ctx: u64) -> CuRes<Option<Stream<E>>> {
        if id == 0 {
            return Ok(None);
        }
        let s = self.streams.get(id).ok_or(CuResult::INVALID_HANDLE)?;
        if s.ctx != ctx {
            return Err(CuResult::INVALID_HANDLE);
        }
        Ok(Some(s.value))
    }

    /// Checks that `[ptr, ptr+len)` lies inside one allocation of this
    /// session; returns the owning context.
    fn range(&self, ptr: u64, len: u64) -> CuRes<u64> {
        let end = end_of(ptr, len)?;
        let (&start, a) = self.allocs.range(..=ptr).next_back().ok_or(CuResult::INVALID_VALUE)?;
        if end > start + a.len {
            return Err(CuResult::INVALID_VALUE);
        }
        Ok(a.ctx)
    }

    fn new_context(&mut self, device: usize, flags: u32, primary: bool, area: Option<&DataArea>) -> CuRes<u64> {
        if self.ctxs.len() >= 64 {
            return Err(CuResult::OUT_OF_MEMORY);
        }
        let ctx = self.exec.create_context(device, flags)?;
        let id = self.ctxs.insert(CtxEntry { primary, ctx })?;
        // Creating a context makes it current on this thread.
        self.current = Some(id);
        if let (None, Some(area), Some(entry)) = (self.area_pinned_by, area, self.ctxs.get_mut(id)) {
            // SAFETY: the connection owns the data area's mapping and
            // outlives the session, so the range stays mapped longer than
            // any context of the session.
            match unsafe { entry.ctx.register_host(area.base(), area.len()) } {
                Ok(()) => self.area_pinned_by = Some(id),
                Err(e) => {
                    tracing::debug!(session = self.id, error = %e, "data area not page-locked; copies go through the driver's staging")
                }
            }
        }
        Ok(id)
    }

    fn destroy_context(&mut self, id: u64) -> CuRes<()> {
        let entry = self.ctxs.remove(id).ok_or(CuResult::INVALID_CONTEXT)?;
        self.functions.drain_where(|f| f.ctx == id);
        self.function_ids.retain(|_, f| self.functions.get(*f).is_some());
        self.modules.drain_where(|m| m.ctx == id);
        self.streams.drain_where(|s| s.ctx == id);
        self.events.drain_where(|e| e.ctx == id);
        let freed: u64 = self.allocs.values().filter(|a| a.ctx == id && a.global_of.is_none()).map(|a| a.len).sum();
        self.allocs.retain(|_, a| a.ctx != id);
        self.mem_used -= freed;
        if self.current == Some(id) {
            self.current = None;
        }
        if self.area_pinned_by == Some(id) {
            // The registration goes with the context; the next one renews it.
            self.area_pinned_by = None;
        }
        // Dropping the context frees everything made in it.
        drop(entry);
        Ok(())
    }

    /// Resolves bulk data named by a request to a pointer and length.
    fn source(&self, d: &DataRef, inline: &[u8], area: Option<&DataArea>) -> CuRes<(*const u8, usize)> {
        let len = usize::try_from(d.len.get()).map_err(|_| CuResult::INVALID_VALUE)?;
        match d.location().map_err(|_| CuResult::INVALID_VALUE)? {
            DataLoc::Inline => Ok((inline.as_ptr(), inline.len())),
            DataLoc::Area { offset } => {
                let area = area.ok_or(CuResult::INVALID_VALUE)?;
                let p = area.ptr(offset, len as u64).map_err(|_| CuResult::INVALID_VALUE)?;
                Ok((p as *const u8, len))
            }
        }
    }

    fn dispatch(&mut self, req: Request<'_>, area: Option<&DataArea>, out: &mut Vec<u8>) -> CuRes<()> {
        match req {
            Request::Hello(h) => {
                if h.min_version.get() > PROTOCOL_VERSION || h.max_version.get() < PROTOCOL_VERSION {
                    return Err(CuResult::NOT_SUPPORTED);
                }
                self.hello = true;
                let rep = HelloRep {
                    version: PROTOCOL_VERSION.into(),
                    reserved: 0.into(),
                    driver_version: self.exec.driver_version().into(),
                    session_id: self.id.into(),
                    executor: proto::fixed_str(self.exec.kind()),
                };
                out.extend_from_slice(rep.as_bytes());
            }
            Request::Goodbye | Request::Nop => {}
            Request::Init => self.initialized = true,
            Request::DriverGetVersion => out.extend_from_slice(I32Rep { value: self.exec.driver_version().into() }.as_bytes()),
            Request::DeviceGetCount => {
                self.need_init()?;
                out.extend_from_slice(I32Rep { value: (self.exec.devices().len() as i32).into() }.as_bytes());
            }
            Request::DeviceGet(r) => {
                let d = self.device(r.device.get())?;
                out.extend_from_slice(I32Rep { value: (d as i32).into() }.as_bytes());
            }
            Request::DeviceGetProperties(r) => {
                let d = self.device(r.device.get())?;
                let info = &self.exec.devices()[d];
                let rep = DevicePropsRep {
                    total_mem: info.total_mem.into(),
                    uuid: info.uuid,
                    name: proto::fixed_str(&info.name),
                    attr_count: (info.attrs.len() as u32).into(),
                    reserved: 0.into(),
                };
                out.extend_from_slice(rep.as_bytes());
                for &(a, v) in &info.attrs {
                    out.extend_from_slice(AttrPair { attr: a.into(), value: v.into() }.as_bytes());
                }
            }
            Request::DeviceGetAttribute(r) => {
                let d = self.device(r.device.get())?;
                let v = self.exec.devices()[d].attr(r.attr.get()).ok_or(CuResult::INVALID_VALUE)?;
                out.extend_from_slice(I32Rep { value: v.into() }.as_bytes());
            }
            Request::PrimaryCtxRetain(r) => {
                let d = self.device(r.device.get())?;
                let id = match self.primary.get_mut(&d) {
                    Some((id, refs)) => {
                        *refs = refs.checked_add(1).ok_or(CuResult::INVALID_VALUE)?;
                        *id
                    }
                    None => {
                        let id = self.new_context(d, 0, true, area)?;
                        self.primary.insert(d, (id, 1));
                        id
                    }
                };
                out.extend_from_slice(HandleRep { handle: id.into() }.as_bytes());
            }
            Request::PrimaryCtxRelease(r) => {
                let d = self.device(r.device.get())?;
                let (id, refs) = self.primary.get_mut(&d).ok_or(CuResult::INVALID_CONTEXT)?;
                *refs -= 1;
                if *refs == 0 {
                    let id = *id;
                    self.primary.remove(&d);
                    self.destroy_context(id)?;
                }
            }
            Request::CtxCreate(r) => {
                let d = self.device(r.device.get())?;
                let id = self.new_context(d, r.flags.get(), false, area)?;
                out.extend_from_slice(HandleRep { handle: id.into() }.as_bytes());
            }
            Request::CtxDestroy(r) => {
                let id = r.handle.get();
                match self.ctxs.get(id) {
                    None => return Err(CuResult::INVALID_CONTEXT),
                    Some(c) if c.primary => return Err(CuResult::INVALID_CONTEXT),
                    Some(_) => self.destroy_context(id)?,
                }
            }
            Request::CtxSynchronize(r) => self.enter(r.handle.get())?.synchronize()?,
            Request::ModuleLoad(r, inline) => {
                let ctx = r.ctx.get();
                self.enter(ctx)?;
                let (p, len) = self.source(&r.image, inline, area)?;
                if len == 0 || len > self.limits.max_image {
                    return Err(CuResult::INVALID_IMAGE);
                }
                // Copy out of shared memory before anything parses it, and
                // terminate it so PTX text can never be read past its end.
                let mut image = Vec::with_capacity(len + 1);
                // SAFETY: `source` checked that [p, p+len) is inside the
                // request payload or the data area, both mapped for the
                // duration of this call.
                unsafe { image.extend_from_slice(std::slice::from_raw_parts(p, len)) };
                image.push(0);
                crate::exec::image::check_bounds(&image[..len])?;
                let m = self.enter(ctx)?.module_load(&image)?;
                let id = self.modules.insert(ModEntry { ctx, module: Some(m) })?;
                out.extend_from_slice(HandleRep { handle: id.into() }.as_bytes());
            }
            Request::ModuleUnload(r) => {
                let id = r.handle.get();
                let mut m = self.modules.remove(id).ok_or(CuResult::INVALID_HANDLE)?;
                self.functions.drain_where(|f| f.module == id);
                self.function_ids.retain(|(mid, _), _| *mid != id);
                self.allocs.retain(|_, a| a.global_of != Some(id));
                if let Some(module) = m.module.take() {
                    self.enter(m.ctx)?.module_unload(module)?;
                }
            }
            Request::ModuleGetFunction { module, name } => {
                if let Some(&fid) = self.function_ids.get(&(module, name.to_string())) {
                    let f = self.functions.get(fid).ok_or(CuResult::INVALID_HANDLE)?;
                    write_function(out, fid, &f.layout, f.param_bytes);
                    return Ok(());
                }
                let ctx = self.modules.get(module).ok_or(CuResult::INVALID_HANDLE)?.ctx;
                self.enter(ctx)?;
                let entry = self.modules.get(module).ok_or(CuResult::INVALID_HANDLE)?;
                let m = entry.module.as_ref().ok_or(CuResult::INVALID_HANDLE)?;
                let ctx_entry = self.ctxs.get_mut(ctx).ok_or(CuResult::INVALID_CONTEXT)?;
                let (func, layout) = ctx_entry.ctx.function(m, name)?;
                if layout.len() > proto::MAX_PARAMS {
                    return Err(CuResult::NOT_SUPPORTED);
                }
                let mut param_bytes = 0usize;
                for p in &layout {
                    let end = p.offset as usize + p.size as usize;
                    param_bytes = param_bytes.max(end);
                }
                if param_bytes > proto::MAX_PARAM_BYTES {
                    return Err(CuResult::NOT_SUPPORTED);
                }
                let fid = self.functions.insert(FnEntry { ctx, module, func, layout: layout.clone(), param_bytes })?;
                self.function_ids.insert((module, name.to_string()), fid);
                write_function(out, fid, &layout, param_bytes);
            }
            Request::ModuleGetGlobal { module, name } => {
                let ctx = self.modules.get(module).ok_or(CuResult::INVALID_HANDLE)?.ctx;
                self.enter(ctx)?;
                let entry = self.modules.get(module).ok_or(CuResult::INVALID_HANDLE)?;
                let m = entry.module.as_ref().ok_or(CuResult::INVALID_HANDLE)?;
                let ctx_entry = self.ctxs.get_mut(ctx).ok_or(CuResult::INVALID_CONTEXT)?;
                let (dptr, size) = ctx_entry.ctx.global(m, name)?;
                if size > 0 && !self.allocs.contains_key(&dptr) {
                    if self.allocs.len() >= self.limits.max_objects {
                        return Err(CuResult::OUT_OF_MEMORY);
                    }
                    self.allocs.insert(dptr, Alloc { len: size, ctx, global_of: Some(module) });
                }
                out.extend_from_slice(GlobalRep { dptr: dptr.into(), size: size.into() }.as_bytes());
            }
            Request::MemAlloc(r) => {
                let (ctx, size) = (r.ctx.get(), r.size.get());
                if size == 0 {
                    return Err(CuResult::INVALID_VALUE);
                }
                if let Some(q) = self.limits.mem_quota {
                    if self.mem_used.saturating_add(size) > q {
                        return Err(CuResult::OUT_OF_MEMORY);
                    }
                }
                if self.allocs.len() >= self.limits.max_objects {
                    return Err(CuResult::OUT_OF_MEMORY);
                }
                let dptr = self.enter(ctx)?.mem_alloc(size)?;
                self.allocs.insert(dptr, Alloc { len: size, ctx, global_of: None });
                self.mem_used += size;
                out.extend_from_slice(DptrRep { dptr: dptr.into() }.as_bytes());
            }
            Request::MemFree(r) => {
                let dptr = r.dptr.get();
                let a = *self.allocs.get(&dptr).filter(|a| a.global_of.is_none()).ok_or(CuResult::INVALID_VALUE)?;
                self.enter(a.ctx)?.mem_free(dptr)?;
                self.allocs.remove(&dptr);
                self.mem_used -= a.len;
            }
            Request::MemGetInfo(r) => {
                let (mut free, mut total) = self.enter(r.handle.get())?.mem_get_info()?;
                if let Some(q) = self.limits.mem_quota {
                    total = total.min(q);
                    free = free.min(q.saturating_sub(self.mem_used));
                }
                out.extend_from_slice(MemInfoRep { free: free.into(), total: total.into() }.as_bytes());
            }
            Request::Memset(r) => {
                let (dptr, count, elem) = (r.dptr.get(), r.count.get(), r.elem_size.get());
                let len = count.checked_mul(elem as u64).ok_or(CuResult::INVALID_VALUE)?;
                if len == 0 {
                    return Ok(());
                }
                if dptr % elem as u64 != 0 {
                    return Err(CuResult::INVALID_VALUE);
                }
                let ctx = self.range(dptr, len)?;
                let s = self.stream(r.stream.get(), ctx)?;
                self.enter(ctx)?.memset(dptr, r.value.get(), elem, count, s)?;
            }
            Request::MemcpyHtoD(r, inline) => {
                let (p, len) = self.source(&r.data, inline, area)?;
                if len == 0 {
                    return Ok(());
                }
                let dst = r.dst.get();
                let ctx = self.range(dst, len as u64)?;
                let s = self.stream(r.stream.get(), ctx)?;
                let wait = !pinned_async(r.flags.get(), &r.data);
                let c = self.enter(ctx)?;
                // SAFETY: `source` checked [p, p+len) lies in the request or
                // the data area. Without `wait` it is page-locked memory the
                // program owns in the data area, which stays mapped until the
                // session's contexts are gone.
                unsafe { c.htod(dst, p, len, s, wait)? };
            }
            Request::MemcpyDtoH(r) => {
                let len = usize::try_from(r.data.len.get()).map_err(|_| CuResult::INVALID_VALUE)?;
                if len == 0 {
                    return Ok(());
                }
                let src = r.src.get();
                let ctx = self.range(src, len as u64)?;
                let s = self.stream(r.stream.get(), ctx)?;
                match r.data.location().map_err(|_| CuResult::INVALID_VALUE)? {
                    DataLoc::Inline => {
                        out.resize(len, 0);
                        let c = self.enter(ctx)?;
                        // SAFETY: `out` holds exactly `len` writable bytes.
                        unsafe { c.dtoh(out.as_mut_ptr(), src, len, s, true)? };
                    }
                    DataLoc::Area { offset } => {
                        let area = area.ok_or(CuResult::INVALID_VALUE)?;
                        let p = area.ptr(offset, len as u64).map_err(|_| CuResult::INVALID_VALUE)?;
                        let wait = !pinned_async(r.flags.get(), &r.data);
                        let c = self.enter(ctx)?;
                        // SAFETY: [p, p+len) was checked to lie in the data
                        // area, which stays mapped until the session's
                        // contexts are gone.
                        unsafe { c.dtoh(p, src, len, s, wait)? };
                    }
                }
            }
            Request::MemcpyDtoD(r) => {
                let (dst, src, len) = (r.dst.get(), r.src.get(), r.len.get());
                if len == 0 {
                    return Ok(());
                }
                let ctx = self.range(dst, len)?;
                self.range(src, len)?;
                let s = self.stream(r.stream.get(), ctx)?;
                let is_async = r.flags.get() & proto::COPY_ASYNC != 0;
                self.enter(ctx)?.dtod(dst, src, len, s, is_async)?;
            }
            Request::StreamCreate(r) => {
                let ctx = r.ctx.get();
                let s = self.enter(ctx)?.stream_create(r.flags.get(), r.priority.get())?;
                let id = match self.streams.insert(Owned { ctx, value: s }) {
                    Ok(id) => id,
                    Err(e) => {
                        let _ = self.enter(ctx)?.stream_destroy(s);
                        return Err(e);
                    }
                };
                out.extend_from_slice(HandleRep { handle: id.into() }.as_bytes());
            }
            Request::StreamDestroy(r) => {
                let s = self.streams.remove(r.handle.get()).ok_or(CuResult::INVALID_HANDLE)?;
                self.enter(s.ctx)?.stream_destroy(s.value)?;
            }
            Request::StreamSynchronize(r) => {
                let s = self.streams.get(r.handle.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, v) = (s.ctx, s.value);
                self.enter(ctx)?.stream_synchronize(v)?;
            }
            Request::StreamQuery(r) => {
                let s = self.streams.get(r.handle.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, v) = (s.ctx, s.value);
                if !self.enter(ctx)?.stream_query(v)? {
                    return Err(CuResult::NOT_READY);
                }
            }
            Request::EventCreate(r) => {
                let ctx = r.ctx.get();
                let e = self.enter(ctx)?.event_create(r.flags.get())?;
                let id = match self.events.insert(Owned { ctx, value: e }) {
                    Ok(id) => id,
                    Err(err) => {
                        let _ = self.enter(ctx)?.event_destroy(e);
                        return Err(err);
                    }
                };
                out.extend_from_slice(HandleRep { handle: id.into() }.as_bytes());
            }
            Request::EventRecord(r) => {
                let e = self.events.get(r.event.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, ev) = (e.ctx, e.value);
                let s = self.stream(r.stream.get(), ctx)?;
                self.enter(ctx)?.event_record(ev, s)?;
            }
            Request::EventQuery(r) => {
                let e = self.events.get(r.handle.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, ev) = (e.ctx, e.value);
                if !self.enter(ctx)?.event_query(ev)? {
                    return Err(CuResult::NOT_READY);
                }
            }
            Request::EventSynchronize(r) => {
                let e = self.events.get(r.handle.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, ev) = (e.ctx, e.value);
                self.enter(ctx)?.event_synchronize(ev)?;
            }
            Request::EventElapsedTime(r) => {
                let a = self.events.get(r.start.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let b = self.events.get(r.end.get()).ok_or(CuResult::INVALID_HANDLE)?;
                if a.ctx != b.ctx {
                    return Err(CuResult::INVALID_HANDLE);
                }
                let (ctx, ea, eb) = (a.ctx, a.value, b.value);
                let ms = self.enter(ctx)?.event_elapsed(ea, eb)?;
                out.extend_from_slice(ElapsedRep { ms: ms.into() }.as_bytes());
            }
            Request::EventDestroy(r) => {
                let e = self.events.remove(r.handle.get()).ok_or(CuResult::INVALID_HANDLE)?;
                self.enter(e.ctx)?.event_destroy(e.value)?;
            }
            Request::LaunchKernel(r, params) => {
                let f = self.functions.get(r.function.get()).ok_or(CuResult::INVALID_HANDLE)?;
                if params.len() != f.param_bytes {
                    return Err(CuResult::INVALID_VALUE);
                }
                let (ctx, func, layout) = (f.ctx, f.func, f.layout.clone());
                let s = self.stream(r.stream.get(), ctx)?;
                let dims = LaunchDims { grid: r.grid.map(|v| v.get()), block: r.block.map(|v| v.get()), shared_mem: r.shared_mem.get() };
                if dims.grid.contains(&0) || dims.block.contains(&0) {
                    return Err(CuResult::INVALID_VALUE);
                }
                // Copy the parameters into an 8-aligned buffer.
                let mut buf = std::mem::take(&mut self.param_buf);
                buf.clear();
                buf.resize(params.len().div_ceil(8), 0);
                buf.as_mut_bytes()[..params.len()].copy_from_slice(params);
                let r = self.enter(ctx).and_then(|c| c.launch(func, dims, &buf.as_bytes()[..params.len()], &layout, s));
                self.param_buf = buf;
                r?;
            }
            Request::StreamWaitEvent(r) => {
                let e = self.events.get(r.event.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, ev) = (e.ctx, e.value);
                let s = self.stream(r.stream.get(), ctx)?;
                self.enter(ctx)?.stream_wait_event(s, ev)?;
            }
            Request::FuncGetAttribute(r) => {
                let f = self.functions.get(r.function.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, func) = (f.ctx, f.func);
                let v = self.enter(ctx)?.func_get_attribute(func, r.attr.get())?;
                out.extend_from_slice(I32Rep { value: v.into() }.as_bytes());
            }
            Request::FuncSetAttribute(r) => {
                let f = self.functions.get(r.function.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, func) = (f.ctx, f.func);
                self.enter(ctx)?.func_set_attribute(func, r.attr.get(), r.value.get())?;
            }
            Request::CtxGetInfo(r) => {
                let rep: CtxInfoRep = self.enter(r.handle.get())?.info()?.into();
                out.extend_from_slice(rep.as_bytes());
            }
            Request::Occupancy(r) => {
                let f = self.functions.get(r.function.get()).ok_or(CuResult::INVALID_HANDLE)?;
                let (ctx, func) = (f.ctx, f.func);
                let (a, b) =
                    self.enter(ctx)?.occupancy(func, r.kind.get(), r.block_size.get(), r.limit.get(), r.dyn_smem.get(), r.flags.get())?;
                out.extend_from_slice(OccupancyRep { a: a.into(), b: b.into() }.as_bytes());
            }
            Request::CtxLimit(r) => {
                let c = self.enter(r.ctx.get())?;
                let value = if r.set.get() != 0 {
                    c.set_limit(r.limit.get(), r.value.get())?;
                    r.value.get()
                } else {
                    c.get_limit(r.limit.get())?
                };
                out.extend_from_slice(U64Rep { value: value.into() }.as_bytes());
            }
        }
        Ok(())
    }
}

/// An asynchronous copy to or from page-locked memory the program owns in
/// the data area: queued without waiting for it to finish.
fn pinned_async(flags: u32, d: &DataRef) -> bool {
    flags & proto::COPY_ASYNC != 0 && flags & proto::COPY_PINNED != 0 && matches!(d.location(), Ok(DataLoc::Area { .. }))
}

fn write_function(out: &mut Vec<u8>, fid: u64, layout: &[Param], param_bytes: usize) {
    let rep = FunctionRep { function: fid.into(), param_count: (layout.len() as u32).into(), param_bytes: (param_bytes as u32).into() };
    out.extend_from_slice(rep.as_bytes());
    for p in layout {
        out.extend_from_slice(ParamInfo { offset: p.offset.into(), size: p.size.into() }.as_bytes());
    }
}

impl<E: Executor> Drop for Session<E> {
    fn drop(&mut self) {
        let ctxs = self.ctxs.len();
        if ctxs > 0 || self.mem_used > 0 {
            tracing::info!(session = self.id, contexts = ctxs, bytes = self.mem_used, "freeing session resources");
        }
        // Forget handles before their contexts go: dropping a context frees
        // everything made in it.
        self.functions.drain_where(|_| true);
        self.modules.drain_where(|_| true);
        self.streams.drain_where(|_| true);
        self.events.drain_where(|_| true);
        self.ctxs.drain_where(|_| true);
    }
}
