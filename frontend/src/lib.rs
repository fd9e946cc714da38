//! # pvgpu-frontend
//!
//! The guest side of pvgpu: a typed client of the CUDA driver API whose
//! calls run on a pvgpu backend, over the local shared-memory ring or TCP.
//!
//! ```no_run
//! use pvgpu_frontend::{Client, Stream};
//! # fn main() -> pvgpu_frontend::Result<()> {
//! // PVGPU_BACKEND=local:/run/pvgpu/pvgpu.sock or tcp:HOST:PORT
//! let gpu = Client::from_env()?;
//! gpu.init()?;
//! let ctx = gpu.primary_ctx_retain(0)?;
//! let buf = gpu.mem_alloc(ctx, 4096)?;
//! gpu.memcpy_htod(buf, &[1u8; 4096])?;
//! let mut back = vec![0u8; 4096];
//! gpu.memcpy_dtoh(&mut back, buf)?;
//! gpu.mem_free(buf)?;
//! # Ok(()) }
//! ```
//!
//! Calls whose result the program does not need at once (launches, async
//! copies of data already captured, memsets, event records, frees and
//! destroys) are sent without waiting; an error they cause is returned by
//! the next call that waits for the backend, as CUDA reports asynchronous
//! errors. Set `PVGPU_SYNC=1` to make every call wait (for debugging).
//!
//! When the backend goes away, every call fails with
//! [`TransportError::BackendGone`] (`CUDA_ERROR_DEVICE_UNAVAILABLE` through
//! [`Error::code`]) instead of blocking.

pub mod error;
pub mod transport;

pub use error::{Error, Result, TransportError};
pub use pvgpu_ring::CuResult;

use pvgpu_ring::layout::Geometry;
use pvgpu_ring::proto::{
    self, AttrPair, COPY_ASYNC, COPY_PINNED, CtxCreateReq, CtxInfoRep, CtxLimitReq, DeviceAttrReq, DevicePropsRep, DeviceReq, DptrRep,
    DtoDReq, DtoHReq, ElapsedRep, ElapsedReq, EventCreateReq, EventRecordReq, FLAG_REPLY, FuncAttrReq, FunctionRep, GlobalRep, HandleRep,
    HandleReq, Header, HelloRep, HelloReq, HtoDReq, I32Rep, LaunchReq, MemAllocReq, MemFreeReq, MemInfoRep, MemsetReq, ModuleLoadReq,
    OccupancyRep, OccupancyReq, Opcode, PROTOCOL_VERSION, ParamInfo, StreamCreateReq, StreamWaitReq, SymbolReq, U64Rep,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use transport::ring::RingTransport;
use transport::tcp::TcpTransport;
use transport::{Staged, Transport};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Where the backend is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendAddr {
    /// Local shared-memory transport through the backend's Unix socket.
    Local(PathBuf),
    /// TCP, `host:port`.
    Tcp(String),
    /// The Xen transport over a vgpu device of this guest (a given device
    /// id, or the first free one).
    Xen(Option<u32>),
}

/// Default local socket of a backend.
pub const DEFAULT_SOCKET: &str = "/run/pvgpu/pvgpu.sock";

impl std::str::FromStr for BackendAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if let Some(p) = s.strip_prefix("local:") {
            if !p.is_empty() {
                return Ok(BackendAddr::Local(PathBuf::from(p)));
            }
        } else if let Some(a) = s.strip_prefix("tcp:") {
            if a.contains(':') {
                return Ok(BackendAddr::Tcp(a.to_string()));
            }
        } else if s == "xen" {
            return Ok(BackendAddr::Xen(None));
        } else if let Some(d) = s.strip_prefix("xen:") {
            if let Ok(d) = d.parse() {
                return Ok(BackendAddr::Xen(Some(d)));
            }
        }
        Err(Error::Address(s.to_string()))
    }
}

impl std::fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendAddr::Local(p) => write!(f, "local:{}", p.display()),
            BackendAddr::Tcp(a) => write!(f, "tcp:{a}"),
            BackendAddr::Xen(None) => write!(f, "xen"),
            BackendAddr::Xen(Some(d)) => write!(f, "xen:{d}"),
        }
    }
}

impl BackendAddr {
    /// `PVGPU_BACKEND`; without it, Xen when this is a Xen guest with a
    /// vgpu device, else the default local socket.
    pub fn from_env() -> Result<Self> {
        match std::env::var("PVGPU_BACKEND") {
            Ok(s) if !s.is_empty() => s.parse(),
            _ if transport::xen::available() => Ok(BackendAddr::Xen(None)),
            _ => Ok(BackendAddr::Local(PathBuf::from(DEFAULT_SOCKET))),
        }
    }
}

/// Connection options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes of shared data area that stage copies (ring transports).
    pub data_area: u64,
    /// Bytes of shared data area for page-locked host allocations
    /// ([`Client::host_alloc`], `cuMemAllocHost`) on ring transports.
    pub pinned: u64,
    /// Staging part of the data area on Xen, where every page is a grant
    /// (the guest's `xen-gntalloc` allows 1024 by default).
    pub xen_data_area: u64,
    /// Page-locked part of the data area on Xen.
    pub xen_pinned: u64,
    /// How long to spin for a reply before sleeping.
    pub spin: Duration,
    /// Longest wait for any one reply; `None` waits as long as the backend
    /// lives.
    pub timeout: Option<Duration>,
    /// Make every call wait for its reply (debugging).
    pub sync_calls: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            data_area: 64 << 20,
            pinned: 256 << 20,
            xen_data_area: 2 << 20,
            xen_pinned: 1 << 20,
            spin: Duration::from_micros(100),
            timeout: None,
            sync_calls: false,
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Options {
    /// Defaults, overridden by `PVGPU_DATA_AREA_MB`, `PVGPU_PINNED_MB`,
    /// `PVGPU_SPIN_US`, `PVGPU_TIMEOUT_MS` and `PVGPU_SYNC`.
    pub fn from_env() -> Self {
        let mut o = Options::default();
        if let Some(mb) = env_u64("PVGPU_DATA_AREA_MB") {
            o.data_area = mb.clamp(1, 4096) << 20;
        }
        if let Some(mb) = env_u64("PVGPU_PINNED_MB") {
            o.pinned = mb.min(16384) << 20;
        }
        if let Some(kb) = env_u64("PVGPU_XEN_DATA_AREA_KB") {
            o.xen_data_area = kb.clamp(64, 1 << 22) << 10;
        }
        if let Some(kb) = env_u64("PVGPU_XEN_PINNED_KB") {
            o.xen_pinned = kb.min(1 << 22) << 10;
        }
        if let Some(us) = env_u64("PVGPU_SPIN_US") {
            o.spin = Duration::from_micros(us);
        }
        if let Some(ms) = env_u64("PVGPU_TIMEOUT_MS") {
            o.timeout = Some(Duration::from_millis(ms));
        }
        o.sync_calls = std::env::var("PVGPU_SYNC").is_ok_and(|v| v == "1");
        o
    }
}

/// A context id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Context(pub u64);
/// A module id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Module(pub u64);
/// A stream id; [`Stream::DEFAULT`] is the context's default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream(pub u64);
/// An event id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Event(pub u64);

impl Stream {
    /// The default (null) stream.
    pub const DEFAULT: Stream = Stream(0);
}

/// Offset and size of a kernel parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Byte offset in the packed buffer.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A kernel and its parameter layout (learned at lookup).
#[derive(Debug, Clone)]
pub struct Function {
    /// The function id.
    pub id: u64,
    /// Parameters in order.
    pub params: Arc<[Param]>,
    /// Size of the packed parameter buffer.
    pub param_bytes: usize,
}

/// Facts about a context.
pub use pvgpu_ring::proto::CtxInfo;

/// What the backend said about itself at connection.
#[derive(Debug, Clone)]
pub struct BackendInfo {
    /// Session number (also in the backend's log).
    pub session_id: u64,
    /// `cuda` or `host` (the test double).
    pub executor: String,
    /// `cuDriverGetVersion` of the backend's driver.
    pub driver_version: i32,
    /// Transport in use.
    pub transport: &'static str,
}

/// Device attributes reported as 0: features of the local driver that pvgpu
/// does not provide across the connection (managed and mapped host memory,
/// memory pools, virtual memory management, IPC and interop handles,
/// cooperative and cluster launches, stream memory operations, multicast).
pub const MASKED_ATTRS: &[i32] = &[
    19, 83, 88, 89, 91, 92, 93, 94, 95, 96, 98, 100, 101, 102, 103, 104, 105, 107, 110, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121,
    122, 123, 124, 125, 127, 128, 132, 135, 138, 141, 142, 143, 144, 145, 146,
];

/// Properties of a device, fetched once and cached.
#[derive(Debug, Clone)]
pub struct DeviceProps {
    /// Name.
    pub name: String,
    /// UUID.
    pub uuid: [u8; 16],
    /// Total memory in bytes.
    pub total_mem: u64,
    /// Attributes by number.
    pub attrs: HashMap<i32, i32>,
}

struct Conn {
    t: Box<dyn Transport>,
    next_id: u64,
    dead: bool,
    buf: Vec<u8>,
}

impl Conn {
    fn fail<T>(&mut self, e: TransportError) -> Result<T> {
        tracing::error!(error = %e, "pvgpu connection lost");
        self.dead = true;
        Err(e.into())
    }

    fn check(&mut self) -> Result<()> {
        if self.dead { Err(TransportError::BackendGone.into()) } else { Ok(()) }
    }

    fn send(&mut self, op: Opcode, flags: u32, parts: &[&[u8]]) -> Result<u64> {
        self.check()?;
        self.next_id += 1;
        let len = parts.iter().map(|p| p.len()).sum();
        let h = Header::request(op, self.next_id, flags, len);
        match self.t.send(&h, parts) {
            Ok(()) => Ok(self.next_id),
            Err(e) => self.fail(e),
        }
    }

    /// Waits for the reply to request `id`; returns its status and leaves
    /// the payload in `self.buf`.
    fn reply(&mut self, op: Opcode, id: u64) -> Result<CuResult> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.t.recv(&mut buf);
        self.buf = buf;
        let h = match r {
            Ok(h) => h,
            Err(e) => return self.fail(e),
        };
        if h.request_id.get() != id || h.opcode.get() != op as u16 {
            return self.fail(TransportError::Protocol(format!(
                "reply to request {} ({}) while waiting for {id} ({op:?})",
                h.request_id.get(),
                h.opcode.get()
            )));
        }
        Ok(CuResult(h.status.get()))
    }

    fn call(&mut self, op: Opcode, parts: &[&[u8]]) -> Result<&[u8]> {
        let id = self.send(op, FLAG_REPLY, parts)?;
        self.reply(op, id)?.result()?;
        Ok(&self.buf)
    }
}

fn decode<T: FromBytes + KnownLayout + Immutable + Unaligned>(op: Opcode, p: &[u8]) -> Result<T> {
    proto::decode_reply(op, p).map_err(|e| Error::Transport(TransportError::Decode(e)))
}

/// A connection to a pvgpu backend: one session, with its own contexts,
/// memory and handles. Cheap to share between threads (calls are
/// serialised on the connection).
pub struct Client {
    conn: Mutex<Conn>,
    info: BackendInfo,
    devices: Mutex<HashMap<i32, Arc<DeviceProps>>>,
    sync_calls: bool,
}

impl Client {
    /// Connects to the backend named by `PVGPU_BACKEND`, with options from
    /// the environment.
    pub fn from_env() -> Result<Client> {
        Client::connect(&BackendAddr::from_env()?, &Options::from_env())
    }

    /// Connects to `addr`.
    pub fn connect(addr: &BackendAddr, opts: &Options) -> Result<Client> {
        let t: Box<dyn Transport> = match addr {
            BackendAddr::Tcp(a) => Box::new(TcpTransport::connect(a, opts.timeout)?),
            BackendAddr::Local(p) => Box::new(connect_local(p, opts)?),
            BackendAddr::Xen(d) => Box::new(transport::xen::connect(*d, opts)?),
        };
        Client::over(t, opts)
    }

    /// Runs the protocol over an established transport.
    pub fn over(t: Box<dyn Transport>, opts: &Options) -> Result<Client> {
        let transport = t.kind();
        let mut conn = Conn { t, next_id: 0, dead: false, buf: Vec::new() };
        let hello = HelloReq { min_version: PROTOCOL_VERSION.into(), max_version: PROTOCOL_VERSION.into(), reserved: 0.into() };
        let rep: HelloRep = decode(Opcode::Hello, conn.call(Opcode::Hello, &[hello.as_bytes()])?)?;
        let info = BackendInfo {
            session_id: rep.session_id.get(),
            executor: proto::str_from_fixed(&rep.executor),
            driver_version: rep.driver_version.get(),
            transport,
        };
        tracing::debug!(?info, "connected to pvgpu backend");
        Ok(Client { conn: Mutex::new(conn), info, devices: Mutex::new(HashMap::new()), sync_calls: opts.sync_calls })
    }

    /// What the backend said about itself.
    pub fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn conn(&self) -> MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn call_into<T: FromBytes + KnownLayout + Immutable + Unaligned>(&self, op: Opcode, parts: &[&[u8]]) -> Result<T> {
        let mut c = self.conn();
        decode(op, c.call(op, parts)?)
    }

    fn call0(&self, op: Opcode, parts: &[&[u8]]) -> Result<()> {
        let mut c = self.conn();
        let p = c.call(op, parts)?;
        if !p.is_empty() {
            return Err(Error::Transport(TransportError::Protocol(format!("unexpected payload in {op:?} reply"))));
        }
        Ok(())
    }

    /// Sends without waiting (or waits, with `PVGPU_SYNC=1`).
    fn post(&self, op: Opcode, parts: &[&[u8]]) -> Result<()> {
        if self.sync_calls {
            return self.call0(op, parts);
        }
        self.conn().send(op, 0, parts).map(|_| ())
    }

    /// Round trip that does nothing (latency measurement).
    pub fn nop(&self) -> Result<()> {
        self.call0(Opcode::Nop, &[])
    }

    /// `cuInit`.
    pub fn init(&self) -> Result<()> {
        self.call0(Opcode::Init, &[])
    }

    /// `cuDriverGetVersion` (of the backend's driver).
    pub fn driver_version(&self) -> Result<i32> {
        Ok(self.call_into::<I32Rep>(Opcode::DriverGetVersion, &[])?.value.get())
    }

    /// `cuDeviceGetCount`.
    pub fn device_count(&self) -> Result<i32> {
        Ok(self.call_into::<I32Rep>(Opcode::DeviceGetCount, &[])?.value.get())
    }

    /// `cuDeviceGet`.
    pub fn device_get(&self, ordinal: i32) -> Result<i32> {
        let r = DeviceReq { device: ordinal.into() };
        Ok(self.call_into::<I32Rep>(Opcode::DeviceGet, &[r.as_bytes()])?.value.get())
    }

    /// Name, UUID, memory and attributes of a device (one round trip, then
    /// cached).
    pub fn device_props(&self, dev: i32) -> Result<Arc<DeviceProps>> {
        if let Some(p) = self.devices.lock().unwrap_or_else(|p| p.into_inner()).get(&dev) {
            return Ok(p.clone());
        }
        let r = DeviceReq { device: dev.into() };
        let props = {
            let mut c = self.conn();
            let p = c.call(Opcode::DeviceGetProperties, &[r.as_bytes()])?;
            let (h, attrs): (DevicePropsRep, Vec<AttrPair>) =
                proto::decode_reply_list(Opcode::DeviceGetProperties, p, |h: &DevicePropsRep| h.attr_count.get() as usize, 4096)
                    .map_err(TransportError::Decode)?;
            DeviceProps {
                name: proto::str_from_fixed(&h.name),
                uuid: h.uuid,
                total_mem: h.total_mem.get(),
                attrs: attrs.iter().map(|a| (a.attr.get(), if MASKED_ATTRS.contains(&a.attr.get()) { 0 } else { a.value.get() })).collect(),
            }
        };
        let props = Arc::new(props);
        self.devices.lock().unwrap_or_else(|p| p.into_inner()).insert(dev, props.clone());
        Ok(props)
    }

    /// `cuDeviceGetName`.
    pub fn device_name(&self, dev: i32) -> Result<String> {
        Ok(self.device_props(dev)?.name.clone())
    }

    /// `cuDeviceGetUuid`.
    pub fn device_uuid(&self, dev: i32) -> Result<[u8; 16]> {
        Ok(self.device_props(dev)?.uuid)
    }

    /// `cuDeviceTotalMem`.
    pub fn device_total_mem(&self, dev: i32) -> Result<u64> {
        Ok(self.device_props(dev)?.total_mem)
    }

    /// `cuDeviceGetAttribute`, answered from the cache ([`MASKED_ATTRS`]
    /// read 0).
    pub fn device_attribute(&self, dev: i32, attr: i32) -> Result<i32> {
        let props = self.device_props(dev)?;
        match props.attrs.get(&attr) {
            Some(v) => Ok(*v),
            None if MASKED_ATTRS.contains(&attr) => Ok(0),
            None => Err(Error::Cuda(CuResult::INVALID_VALUE)),
        }
    }

    /// `cuDeviceGetAttribute`, asked of the backend (unmasked).
    pub fn device_attribute_uncached(&self, dev: i32, attr: i32) -> Result<i32> {
        let r = DeviceAttrReq { device: dev.into(), attr: attr.into() };
        Ok(self.call_into::<I32Rep>(Opcode::DeviceGetAttribute, &[r.as_bytes()])?.value.get())
    }

    /// `cuDevicePrimaryCtxRetain`.
    pub fn primary_ctx_retain(&self, dev: i32) -> Result<Context> {
        let r = DeviceReq { device: dev.into() };
        Ok(Context(self.call_into::<HandleRep>(Opcode::PrimaryCtxRetain, &[r.as_bytes()])?.handle.get()))
    }

    /// `cuDevicePrimaryCtxRelease`.
    pub fn primary_ctx_release(&self, dev: i32) -> Result<()> {
        let r = DeviceReq { device: dev.into() };
        self.call0(Opcode::PrimaryCtxRelease, &[r.as_bytes()])
    }

    /// `cuCtxCreate`.
    pub fn ctx_create(&self, dev: i32, flags: u32) -> Result<Context> {
        let r = CtxCreateReq { device: dev.into(), flags: flags.into() };
        Ok(Context(self.call_into::<HandleRep>(Opcode::CtxCreate, &[r.as_bytes()])?.handle.get()))
    }

    /// `cuCtxDestroy`.
    pub fn ctx_destroy(&self, ctx: Context) -> Result<()> {
        self.call0(Opcode::CtxDestroy, &[HandleReq { handle: ctx.0.into() }.as_bytes()])
    }

    /// `cuCtxSynchronize`.
    pub fn ctx_synchronize(&self, ctx: Context) -> Result<()> {
        self.call0(Opcode::CtxSynchronize, &[HandleReq { handle: ctx.0.into() }.as_bytes()])
    }

    /// `cuModuleLoadData`: PTX (compiled by the backend's driver), cubin or
    /// fatbin bytes.
    pub fn module_load(&self, ctx: Context, image: &[u8]) -> Result<Module> {
        let mut c = self.conn();
        let staged = c.t.stage(image);
        let staged = match staged {
            Ok(s) => s,
            Err(e) => return c.fail(e),
        };
        let r = ModuleLoadReq { ctx: ctx.0.into(), image: staged.dref };
        let tail: &[u8] = if staged.inline { image } else { &[] };
        let p = c.call(Opcode::ModuleLoad, &[r.as_bytes(), tail])?;
        Ok(Module(decode::<HandleRep>(Opcode::ModuleLoad, p)?.handle.get()))
    }

    /// `cuModuleUnload` (sent without waiting).
    pub fn module_unload(&self, m: Module) -> Result<()> {
        self.post(Opcode::ModuleUnload, &[HandleReq { handle: m.0.into() }.as_bytes()])
    }

    fn symbol(&self, op: Opcode, m: Module, name: &str) -> Result<Vec<u8>> {
        proto::check_name(name.as_bytes()).map_err(|_| Error::Cuda(CuResult::INVALID_VALUE))?;
        let r = SymbolReq { module: m.0.into(), name_len: (name.len() as u32).into(), reserved: 0.into() };
        let mut c = self.conn();
        Ok(c.call(op, &[r.as_bytes(), name.as_bytes()])?.to_vec())
    }

    /// `cuModuleGetFunction`, with the kernel's parameter layout.
    pub fn module_get_function(&self, m: Module, name: &str) -> Result<Function> {
        let p = self.symbol(Opcode::ModuleGetFunction, m, name)?;
        let (h, params): (FunctionRep, Vec<ParamInfo>) =
            proto::decode_reply_list(Opcode::ModuleGetFunction, &p, |h: &FunctionRep| h.param_count.get() as usize, proto::MAX_PARAMS)
                .map_err(TransportError::Decode)?;
        let params: Arc<[Param]> = params.iter().map(|p| Param { offset: p.offset.get(), size: p.size.get() }).collect();
        let param_bytes = h.param_bytes.get() as usize;
        if params.iter().any(|p| p.offset as usize + p.size as usize > param_bytes) || param_bytes > proto::MAX_PARAM_BYTES {
            return Err(TransportError::Protocol("function reply with an impossible parameter layout".into()).into());
        }
        Ok(Function { id: h.function.get(), params, param_bytes })
    }

    /// `cuModuleGetGlobal`: (device address, size).
    pub fn module_get_global(&self, m: Module, name: &str) -> Result<(u64, u64)> {
        let p = self.symbol(Opcode::ModuleGetGlobal, m, name)?;
        let g: GlobalRep = decode(Opcode::ModuleGetGlobal, &p)?;
        Ok((g.dptr.get(), g.size.get()))
    }

    /// `cuMemAlloc`.
    pub fn mem_alloc(&self, ctx: Context, size: u64) -> Result<u64> {
        let r = MemAllocReq { ctx: ctx.0.into(), size: size.into() };
        Ok(self.call_into::<DptrRep>(Opcode::MemAlloc, &[r.as_bytes()])?.dptr.get())
    }

    /// `cuMemFree` (sent without waiting).
    pub fn mem_free(&self, dptr: u64) -> Result<()> {
        self.post(Opcode::MemFree, &[MemFreeReq { dptr: dptr.into() }.as_bytes()])
    }

    /// `cuMemGetInfo`: (free, total), within the session's quota.
    pub fn mem_get_info(&self, ctx: Context) -> Result<(u64, u64)> {
        let r: MemInfoRep = self.call_into(Opcode::MemGetInfo, &[HandleReq { handle: ctx.0.into() }.as_bytes()])?;
        Ok((r.free.get(), r.total.get()))
    }

    /// `cuMemsetD8/D16/D32[Async]`: `count` elements of `elem_size` bytes
    /// (1, 2 or 4). Sent without waiting.
    pub fn memset(&self, dptr: u64, value: u32, elem_size: u32, count: u64, stream: Stream) -> Result<()> {
        if !matches!(elem_size, 1 | 2 | 4) {
            return Err(CuResult::INVALID_VALUE.into());
        }
        let r =
            MemsetReq { dptr: dptr.into(), count: count.into(), value: value.into(), elem_size: elem_size.into(), stream: stream.0.into() };
        self.post(Opcode::Memset, &[r.as_bytes()])
    }

    /// Host-to-device copy from raw memory. With `is_async` it is ordered on
    /// `stream` and sent without waiting.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes. Pageable memory is captured
    /// before this returns; memory from [`Client::host_alloc`] copied with
    /// `is_async` is read later, and must stay valid and unchanged until the
    /// stream is synchronised (as with CUDA's own page-locked memory).
    pub unsafe fn memcpy_htod_raw(&self, dst: u64, src: *const u8, len: usize, stream: Stream, is_async: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let mut c = self.conn();
        if let Some(dref) = c.t.pinned(src, len) {
            let flags = COPY_PINNED | if is_async { COPY_ASYNC } else { 0 };
            let r = HtoDReq { dst: dst.into(), stream: stream.0.into(), flags: flags.into(), reserved: 0.into(), data: dref };
            if is_async && !self.sync_calls {
                c.send(Opcode::MemcpyHtoD, 0, &[r.as_bytes()])?;
            } else {
                c.call(Opcode::MemcpyHtoD, &[r.as_bytes()])?;
            }
            return Ok(());
        }
        // SAFETY: the caller guarantees `src` is readable for `len` bytes.
        let src = unsafe { std::slice::from_raw_parts(src, len) };
        let chunk = c.t.max_chunk();
        let n = src.len().div_ceil(chunk);
        for (i, part) in src.chunks(chunk).enumerate() {
            let last = i + 1 == n;
            let staged = match c.t.stage(part) {
                Ok(s) => s,
                Err(e) => return c.fail(e),
            };
            let flags = if is_async { COPY_ASYNC } else { 0 };
            let r = HtoDReq {
                dst: (dst + (i * chunk) as u64).into(),
                stream: stream.0.into(),
                flags: flags.into(),
                reserved: 0.into(),
                data: staged.dref,
            };
            let tail: &[u8] = if staged.inline { part } else { &[] };
            if last && (!is_async || self.sync_calls) {
                c.call(Opcode::MemcpyHtoD, &[r.as_bytes(), tail])?;
            } else {
                c.send(Opcode::MemcpyHtoD, 0, &[r.as_bytes(), tail])?;
            }
        }
        Ok(())
    }

    /// `cuMemcpyHtoD`: complete (or failed) when it returns.
    pub fn memcpy_htod(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: a live slice, read before this returns (synchronous copy).
        unsafe { self.memcpy_htod_raw(dst, src.as_ptr(), src.len(), Stream::DEFAULT, false) }
    }

    /// `cuMemcpyHtoDAsync`: the bytes are captured before it returns, so
    /// `src` may be reused at once; the copy is ordered on `stream` and sent
    /// without waiting.
    pub fn memcpy_htod_async(&self, dst: u64, src: &[u8], stream: Stream) -> Result<()> {
        // Always staged: a slice's borrow ends at return, so nothing may read
        // it later (use memcpy_htod_raw for zero-copy page-locked sources).
        let staged: Vec<u8>;
        let src = if self.conn().t.pinned(src.as_ptr(), src.len()).is_some() {
            staged = src.to_vec();
            &staged[..]
        } else {
            src
        };
        // SAFETY: a live slice of pageable memory, captured before return.
        unsafe { self.memcpy_htod_raw(dst, src.as_ptr(), src.len(), stream, true) }
    }

    /// Device-to-host copy into raw memory.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes. The copy is complete when this
    /// returns, except into memory from [`Client::host_alloc`] with
    /// `is_async`: then it is ordered on `stream`, sent without waiting, and
    /// `dst` must stay valid until the stream is synchronised.
    pub unsafe fn memcpy_dtoh_raw(&self, dst: *mut u8, len: usize, src: u64, stream: Stream, is_async: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let mut c = self.conn();
        if let Some(dref) = c.t.pinned(dst, len) {
            let flags = COPY_PINNED | if is_async { COPY_ASYNC } else { 0 };
            let r = DtoHReq { src: src.into(), stream: stream.0.into(), flags: flags.into(), reserved: 0.into(), data: dref };
            if is_async && !self.sync_calls {
                c.send(Opcode::MemcpyDtoH, 0, &[r.as_bytes()])?;
            } else {
                c.call(Opcode::MemcpyDtoH, &[r.as_bytes()])?;
            }
            return Ok(());
        }
        // SAFETY: the caller guarantees `dst` is writable for `len` bytes,
        // and nothing else touches it during this synchronous copy.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        let chunk = c.t.max_chunk();
        let depth = c.t.pipeline_depth();
        let mut inflight: std::collections::VecDeque<(u64, Staged, usize, usize)> = std::collections::VecDeque::new();
        let mut first_err: Option<Error> = None;
        let total = dst.len();
        let mut next = 0usize;
        while next < total || !inflight.is_empty() {
            if next < total && inflight.len() < depth {
                let len = chunk.min(total - next);
                let staged = match c.t.reserve(len) {
                    Ok(s) => s,
                    Err(e) => return c.fail(e),
                };
                let flags = if is_async { COPY_ASYNC } else { 0 };
                let r = DtoHReq {
                    src: (src + next as u64).into(),
                    stream: stream.0.into(),
                    flags: flags.into(),
                    reserved: 0.into(),
                    data: staged.dref,
                };
                let id = c.send(Opcode::MemcpyDtoH, FLAG_REPLY, &[r.as_bytes()])?;
                inflight.push_back((id, staged, next, len));
                next += len;
                continue;
            }
            let Some((id, staged, at, len)) = inflight.pop_front() else { break };
            let status = c.reply(Opcode::MemcpyDtoH, id)?;
            let Conn { t, buf, .. } = &mut *c;
            if status.is_success() && first_err.is_none() {
                if let Err(e) = t.fetch(&staged, buf, &mut dst[at..at + len]) {
                    return c.fail(e);
                }
            } else {
                t.discard(&staged);
                first_err.get_or_insert(Error::Cuda(if status.is_success() { CuResult::UNKNOWN } else { status }));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// `cuMemcpyDtoH`.
    pub fn memcpy_dtoh(&self, dst: &mut [u8], src: u64) -> Result<()> {
        // SAFETY: a live, exclusively borrowed slice; synchronous copy.
        unsafe { self.memcpy_dtoh_raw(dst.as_mut_ptr(), dst.len(), src, Stream::DEFAULT, false) }
    }

    /// `cuMemcpyDtoHAsync` into a slice: ordered on `stream`, complete when
    /// it returns (as CUDA does for pageable destinations).
    pub fn memcpy_dtoh_async(&self, dst: &mut [u8], src: u64, stream: Stream) -> Result<()> {
        if self.conn().t.pinned(dst.as_ptr(), dst.len()).is_some() {
            // Complete on return, as the borrow promises: wait for the stream.
            // SAFETY: as for memcpy_dtoh.
            unsafe { self.memcpy_dtoh_raw(dst.as_mut_ptr(), dst.len(), src, stream, false) }
        } else {
            // SAFETY: a live, exclusively borrowed slice; the copy completes
            // before return for pageable memory.
            unsafe { self.memcpy_dtoh_raw(dst.as_mut_ptr(), dst.len(), src, stream, true) }
        }
    }

    /// Allocates `len` bytes of page-locked host memory in the shared data
    /// area (`cuMemAllocHost`): copies from and to it need no staging copy,
    /// and asynchronous ones are truly asynchronous. `None` when the
    /// transport has no data area (TCP) or it is full.
    pub fn host_alloc(&self, len: usize) -> Option<*mut u8> {
        self.conn().t.host_alloc(len)
    }

    /// Frees memory from [`Client::host_alloc`]; false if `ptr` is not one.
    pub fn host_free(&self, ptr: *mut u8) -> bool {
        self.conn().t.host_free(ptr)
    }

    /// Whether `[ptr, ptr+len)` lies inside one [`Client::host_alloc`]
    /// allocation.
    pub fn is_pinned(&self, ptr: *const u8, len: usize) -> bool {
        self.conn().t.pinned(ptr, len).is_some()
    }

    /// `cuMemcpyDtoD`.
    pub fn memcpy_dtod(&self, dst: u64, src: u64, len: u64) -> Result<()> {
        let r = DtoDReq { dst: dst.into(), src: src.into(), len: len.into(), stream: 0.into(), flags: 0.into(), reserved: 0.into() };
        self.call0(Opcode::MemcpyDtoD, &[r.as_bytes()])
    }

    /// `cuMemcpyDtoDAsync` (sent without waiting).
    pub fn memcpy_dtod_async(&self, dst: u64, src: u64, len: u64, stream: Stream) -> Result<()> {
        let r = DtoDReq {
            dst: dst.into(),
            src: src.into(),
            len: len.into(),
            stream: stream.0.into(),
            flags: COPY_ASYNC.into(),
            reserved: 0.into(),
        };
        self.post(Opcode::MemcpyDtoD, &[r.as_bytes()])
    }

    /// `cuStreamCreateWithPriority`.
    pub fn stream_create(&self, ctx: Context, flags: u32, priority: i32) -> Result<Stream> {
        let r = StreamCreateReq { ctx: ctx.0.into(), flags: flags.into(), priority: priority.into() };
        Ok(Stream(self.call_into::<HandleRep>(Opcode::StreamCreate, &[r.as_bytes()])?.handle.get()))
    }

    /// `cuStreamDestroy` (sent without waiting).
    pub fn stream_destroy(&self, s: Stream) -> Result<()> {
        self.post(Opcode::StreamDestroy, &[HandleReq { handle: s.0.into() }.as_bytes()])
    }

    /// `cuStreamSynchronize`.
    pub fn stream_synchronize(&self, s: Stream) -> Result<()> {
        self.call0(Opcode::StreamSynchronize, &[HandleReq { handle: s.0.into() }.as_bytes()])
    }

    /// `cuStreamQuery`: `Ok(true)` when idle, `Ok(false)` for
    /// `CUDA_ERROR_NOT_READY`.
    pub fn stream_query(&self, s: Stream) -> Result<bool> {
        match self.call0(Opcode::StreamQuery, &[HandleReq { handle: s.0.into() }.as_bytes()]) {
            Ok(()) => Ok(true),
            Err(Error::Cuda(CuResult::NOT_READY)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `cuEventCreate`.
    pub fn event_create(&self, ctx: Context, flags: u32) -> Result<Event> {
        let r = EventCreateReq { ctx: ctx.0.into(), flags: flags.into(), reserved: 0.into() };
        Ok(Event(self.call_into::<HandleRep>(Opcode::EventCreate, &[r.as_bytes()])?.handle.get()))
    }

    /// `cuEventRecord` (sent without waiting).
    pub fn event_record(&self, e: Event, s: Stream) -> Result<()> {
        let r = EventRecordReq { event: e.0.into(), stream: s.0.into() };
        self.post(Opcode::EventRecord, &[r.as_bytes()])
    }

    /// `cuEventQuery`: `Ok(true)` when complete.
    pub fn event_query(&self, e: Event) -> Result<bool> {
        match self.call0(Opcode::EventQuery, &[HandleReq { handle: e.0.into() }.as_bytes()]) {
            Ok(()) => Ok(true),
            Err(Error::Cuda(CuResult::NOT_READY)) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// `cuEventSynchronize`.
    pub fn event_synchronize(&self, e: Event) -> Result<()> {
        self.call0(Opcode::EventSynchronize, &[HandleReq { handle: e.0.into() }.as_bytes()])
    }

    /// `cuEventElapsedTime`, in milliseconds.
    pub fn event_elapsed(&self, start: Event, end: Event) -> Result<f32> {
        let r = ElapsedReq { start: start.0.into(), end: end.0.into() };
        Ok(self.call_into::<ElapsedRep>(Opcode::EventElapsedTime, &[r.as_bytes()])?.ms.get())
    }

    /// `cuEventDestroy` (sent without waiting).
    pub fn event_destroy(&self, e: Event) -> Result<()> {
        self.post(Opcode::EventDestroy, &[HandleReq { handle: e.0.into() }.as_bytes()])
    }

    /// `cuStreamWaitEvent` (sent without waiting).
    pub fn stream_wait_event(&self, s: Stream, e: Event) -> Result<()> {
        let r = StreamWaitReq { stream: s.0.into(), event: e.0.into(), flags: 0.into(), reserved: 0.into() };
        self.post(Opcode::StreamWaitEvent, &[r.as_bytes()])
    }

    /// `cuFuncGetAttribute`.
    pub fn func_get_attribute(&self, f: &Function, attr: i32) -> Result<i32> {
        let r = FuncAttrReq { function: f.id.into(), attr: attr.into(), value: 0.into() };
        Ok(self.call_into::<I32Rep>(Opcode::FuncGetAttribute, &[r.as_bytes()])?.value.get())
    }

    /// `cuFuncSetAttribute`.
    pub fn func_set_attribute(&self, f: &Function, attr: i32, value: i32) -> Result<()> {
        let r = FuncAttrReq { function: f.id.into(), attr: attr.into(), value: value.into() };
        self.call0(Opcode::FuncSetAttribute, &[r.as_bytes()])
    }

    /// API version, flags and stream priority range of a context.
    pub fn ctx_info(&self, ctx: Context) -> Result<CtxInfo> {
        let r: CtxInfoRep = self.call_into(Opcode::CtxGetInfo, &[HandleReq { handle: ctx.0.into() }.as_bytes()])?;
        Ok(r.into())
    }

    /// `cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`.
    pub fn occupancy_max_active_blocks(&self, f: &Function, block_size: i32, dyn_smem: u64, flags: u32) -> Result<i32> {
        Ok(self.occupancy(f, 0, block_size, 0, dyn_smem, flags)?.0 as i32)
    }

    /// `cuOccupancyMaxPotentialBlockSizeWithFlags` without a block-size to
    /// shared-memory callback: (minimum grid size, block size).
    pub fn occupancy_max_potential_block_size(&self, f: &Function, dyn_smem: u64, limit: i32, flags: u32) -> Result<(i32, i32)> {
        let (a, b) = self.occupancy(f, 1, 0, limit, dyn_smem, flags)?;
        Ok((a as i32, b as i32))
    }

    /// `cuOccupancyAvailableDynamicSMemPerBlock`.
    pub fn occupancy_available_dynamic_smem(&self, f: &Function, num_blocks: i32, block_size: i32) -> Result<u64> {
        Ok(self.occupancy(f, 2, block_size, num_blocks, 0, 0)?.0 as u64)
    }

    fn occupancy(&self, f: &Function, kind: u32, block_size: i32, limit: i32, dyn_smem: u64, flags: u32) -> Result<(i64, i64)> {
        let r = OccupancyReq {
            function: f.id.into(),
            kind: kind.into(),
            flags: flags.into(),
            block_size: block_size.into(),
            limit: limit.into(),
            dyn_smem: dyn_smem.into(),
        };
        let rep: OccupancyRep = self.call_into(Opcode::Occupancy, &[r.as_bytes()])?;
        Ok((rep.a.get(), rep.b.get()))
    }

    /// `cuCtxGetLimit`.
    pub fn ctx_get_limit(&self, ctx: Context, limit: u32) -> Result<u64> {
        let r = CtxLimitReq { ctx: ctx.0.into(), limit: limit.into(), set: 0.into(), value: 0.into() };
        Ok(self.call_into::<U64Rep>(Opcode::CtxLimit, &[r.as_bytes()])?.value.get())
    }

    /// `cuCtxSetLimit`.
    pub fn ctx_set_limit(&self, ctx: Context, limit: u32, value: u64) -> Result<()> {
        let r = CtxLimitReq { ctx: ctx.0.into(), limit: limit.into(), set: 1.into(), value: value.into() };
        self.call_into::<U64Rep>(Opcode::CtxLimit, &[r.as_bytes()]).map(|_| ())
    }

    /// `cuLaunchKernel` with one byte slice per parameter (the values the
    /// `kernelParams` pointers point to). Sizes must match the layout.
    pub fn launch(&self, f: &Function, grid: [u32; 3], block: [u32; 3], shared_mem: u32, stream: Stream, args: &[&[u8]]) -> Result<()> {
        if args.len() != f.params.len() {
            return Err(CuResult::INVALID_VALUE.into());
        }
        let mut packed = vec![0u8; f.param_bytes];
        for (a, p) in args.iter().zip(f.params.iter()) {
            if a.len() != p.size as usize {
                return Err(CuResult::INVALID_VALUE.into());
            }
            packed[p.offset as usize..p.offset as usize + a.len()].copy_from_slice(a);
        }
        self.launch_packed(f, grid, block, shared_mem, stream, &packed)
    }

    /// `cuLaunchKernel` with an already packed parameter buffer (the `extra`
    /// form). Sent without waiting.
    pub fn launch_packed(
        &self,
        f: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: Stream,
        params: &[u8],
    ) -> Result<()> {
        if params.len() != f.param_bytes {
            return Err(CuResult::INVALID_VALUE.into());
        }
        let r = LaunchReq {
            function: f.id.into(),
            grid: grid.map(Into::into),
            block: block.map(Into::into),
            shared_mem: shared_mem.into(),
            param_len: (params.len() as u32).into(),
            stream: stream.0.into(),
        };
        self.post(Opcode::LaunchKernel, &[r.as_bytes(), params])
    }

    /// Sends raw bytes as a request with `opcode` and waits for the reply
    /// status (protocol tests).
    pub fn raw_call(&self, opcode: u16, payload: &[u8]) -> Result<CuResult> {
        let mut c = self.conn();
        c.check()?;
        c.next_id += 1;
        let id = c.next_id;
        let mut h = Header::request(Opcode::Nop, id, FLAG_REPLY, payload.len());
        h.opcode = opcode.into();
        if let Err(e) = c.t.send(&h, &[payload]) {
            return c.fail(e);
        }
        let mut buf = std::mem::take(&mut c.buf);
        let r = c.t.recv(&mut buf);
        c.buf = buf;
        match r {
            Ok(h) if h.request_id.get() == id => Ok(CuResult(h.status.get())),
            Ok(_) => c.fail(TransportError::Protocol("reply id mismatch".into())),
            Err(e) => c.fail(e),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut c = self.conn();
        if !c.dead {
            let _ = c.send(Opcode::Goodbye, 0, &[]);
        }
    }
}

/// Bytes of a plain value, for [`Client::launch`] arguments.
pub fn arg<T: IntoBytes + Immutable>(v: &T) -> &[u8] {
    v.as_bytes()
}

fn connect_local(path: &std::path::Path, opts: &Options) -> Result<RingTransport> {
    let staging = (opts.data_area.max(1 << 20) + 4095) & !4095;
    let mut pinned = (opts.pinned + 4095) & !4095;
    for _ in 0..2 {
        let sock = std::os::unix::net::UnixStream::connect(path)
            .map_err(|e| TransportError::Connect { addr: format!("local:{}", path.display()), reason: e.to_string() })?;
        let g = Geometry { data_size: staging + pinned, ..Geometry::default() };
        match pvgpu_ring::local::client_handshake(sock, &g) {
            Ok(side) => {
                let t =
                    RingTransport::new(side.region, &side.geometry, staging, Box::new(side.notifier), opts.spin, opts.timeout, "local")?;
                return Ok(t);
            }
            Err(pvgpu_ring::local::LocalError::Refused { reason: pvgpu_ring::local::Refusal::Geometry, max_data })
                if max_data >= staging && max_data < staging + pinned =>
            {
                tracing::info!(
                    asked = staging + pinned,
                    max = max_data,
                    "backend limits the data area; reconnecting with less page-locked memory"
                );
                pinned = (max_data - staging) & !4095;
            }
            Err(e) => return Err(TransportError::Local(e).into()),
        }
    }
    Err(TransportError::Connect { addr: format!("local:{}", path.display()), reason: "data area negotiation failed".into() }.into())
}
