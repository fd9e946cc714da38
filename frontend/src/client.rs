//! The client: one session with a backend, and a typed method per driver
//! call. Each method builds its command from the protocol's table and
//! either waits for the typed reply ([`Client::call`]) or posts it
//! ([`Client::post`]); copies are in [`crate::copy`].

use crate::error::{ProtocolError, Result, TransportError};
use crate::handles::*;
use crate::options::{BackendAddr, Options, backend_from_env};
use crate::rpc::Conn;
use crate::transport::{self, Transport};
use pvgpu_ring::cuda::api::CUdevice_attribute;
use pvgpu_ring::proto::{self, *};
use pvgpu_ring::{CuError, CuResult};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A connection to a pvgpu backend: one session, with its own contexts,
/// memory and handles. Cheap to share between threads (calls are
/// serialised on the connection).
pub struct Client {
    /// The connection, shared with the thread that keeps mirrored memory
    /// coherent while the program makes no call ([`crate::mirror_keeper`]).
    conn: std::sync::Arc<Mutex<Conn>>,
    /// That thread, once memory is mirrored.
    keeper: std::sync::OnceLock<()>,
    info: BackendInfo,
    devices: Mutex<HashMap<i32, Arc<DeviceProps>>>,
    /// Answers that hold until the session changes them.
    pub(crate) memo: Mutex<crate::memo::Memo>,
    sync_calls: bool,
    /// [`Options::sync_spin`], kept for [`Client::set_blocking_sync`].
    sync_spin: std::time::Duration,
    /// Captures begun and not yet ended: while any is under way, every
    /// call waits, so that a call capture refuses fails itself (as the
    /// driver's do) instead of a later one.
    captures: AtomicU32,
    /// Interprocess events, made here or opened: recording one waits until
    /// the backend has it, because another process may wait for it as soon
    /// as this one's call returns.
    pub(crate) interprocess: Mutex<std::collections::HashSet<u64>>,
}

/// Images at least this long are first named by their hash, in case the
/// backend holds them (smaller ones cost less to send than to look up).
pub const CACHED_IMAGE_MIN: usize = 16 << 10;

impl Client {
    /// Connects to the backend named by `PVGPU_BACKEND`, with options from
    /// the environment.
    pub fn from_env() -> Result<Client> {
        let addr = backend_from_env()?;
        Client::connect(&addr, &Options::for_backend(&addr)?)
    }

    /// Connects to `addr`.
    pub fn connect(addr: &BackendAddr, opts: &Options) -> Result<Client> {
        let c = Client::over(open_transport(addr, opts)?, opts)?;
        c.conn().reattach = Some(crate::reattach::Reattach { addr: addr.clone(), opts: opts.clone() });
        Ok(c)
    }

    /// Whether calls that may synchronise with the device block soon
    /// (`CU_CTX_SCHED_BLOCKING_SYNC`) rather than spin for their reply as
    /// the driver would ([`Options::sync_spin`]).
    pub fn set_blocking_sync(&self, blocking: bool) {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).sync_spin = (!blocking).then_some(self.sync_spin);
    }

    /// Runs the protocol over an established transport.
    pub fn over(t: Box<dyn Transport>, opts: &Options) -> Result<Client> {
        let transport = t.kind();
        let mut conn = Conn::new(t);
        if opts.stats {
            conn.stats = Some(Box::default());
        }
        conn.sync_spin = Some(opts.sync_spin);
        let hello = Hello {
            min_version: PROTOCOL_VERSION.into(),
            max_version: PROTOCOL_VERSION.into(),
            space: opts.space.into(),
            features: FEATURE_LEAVE_FRAMES.into(),
        };
        let rep = conn.call(&hello)?;
        if rep.space.get() != opts.space {
            let e = crate::error::ProtocolError::SpaceIgnored { asked: opts.space, got: rep.space.get() };
            return Err(crate::error::TransportError::from(e).into());
        }
        conn.token = rep.resume_token;
        if let Some(staging) = conn.t.area_staging() {
            // The backend page-locks the data area's parts when they are
            // first needed, not all of it with the first context (an older
            // backend answers NOT_SUPPORTED and does that).
            match conn.call(&proto::AreaPinOnDemand { staging: staging.into() }) {
                Ok(()) => conn.pool_unannounced = true,
                Err(crate::Error::Cuda(e)) => tracing::debug!(error = ?e, "the backend page-locks the whole data area"),
                Err(e) => return Err(e),
            }
        }
        let info = BackendInfo {
            session_id: rep.session_id.get(),
            executor: proto::str_from_fixed(&rep.executor),
            driver_version: rep.driver_version.get(),
            transport,
        };
        tracing::debug!(?info, "connected to pvgpu backend");
        let askable = conn.t.can_be_asked_to_leave();
        let conn = std::sync::Arc::new(Mutex::new(conn));
        if askable {
            crate::leave_keeper::start(std::sync::Arc::downgrade(&conn));
        }
        Ok(Client {
            conn,
            keeper: std::sync::OnceLock::new(),
            info,
            devices: Mutex::new(HashMap::new()),
            memo: Mutex::default(),
            sync_spin: opts.sync_spin,
            sync_calls: opts.sync_calls,
            captures: AtomicU32::new(0),
            interprocess: Mutex::default(),
        })
    }

    /// Whether the backend checkpointed this session and it left the
    /// connection: the next call first waits for it to come back (a
    /// restore, [`Options::resume_timeout`]).
    pub fn detached(&self) -> bool {
        self.conn_as_is().detached
    }

    /// What the backend said about itself.
    pub fn info(&self) -> &BackendInfo {
        &self.info
    }

    pub(crate) fn memo(&self) -> MutexGuard<'_, crate::memo::Memo> {
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection, for a call: a session that left is taken back
    /// first ([`Conn::take_back_before_a_call`]).
    pub(crate) fn conn(&self) -> MutexGuard<'_, Conn> {
        let mut c = self.conn_as_is();
        c.take_back_before_a_call();
        c
    }

    /// The connection as it is, for a look that makes no call.
    pub(crate) fn conn_as_is(&self) -> MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the thread that keeps mirrored memory coherent between calls
    /// (once).
    pub(crate) fn keep_mirrors(&self) {
        self.keeper.get_or_init(|| crate::mirror_keeper::start(std::sync::Arc::downgrade(&self.conn)));
    }

    /// Whether commands that may be posted wait instead: with
    /// `PVGPU_SYNC=1`, and while a stream capture is under way.
    pub(crate) fn waits(&self) -> bool {
        // Relaxed: a counter of this client's own calls, read and written
        // under no other ordering than the calls' (the connection's lock).
        self.sync_calls || self.captures.load(Ordering::Relaxed) > 0
    }

    /// Whether a stream capture this client began is under way (if not,
    /// no stream is capturing, and capture queries need no round trip).
    pub fn capturing(&self) -> bool {
        // Relaxed, as in `waits`.
        self.captures.load(Ordering::Relaxed) > 0
    }

    /// Counts a capture begun (`true`) or ended (`false`).
    pub(crate) fn count_capture(&self, begun: bool) {
        if begun {
            self.captures.fetch_add(1, Ordering::Relaxed);
        } else {
            // Relaxed, as in `waits`; never below zero.
            let _ = self.captures.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// Sends a command and waits for its typed reply.
    pub fn call<'a, C: Command<'a>>(&self, req: &C) -> Result<C::Reply> {
        self.conn().call(req)
    }

    /// Sends a command without waiting (or waits, with `PVGPU_SYNC=1`); an
    /// error it causes comes back at the next call that waits. Only a
    /// command the table marks `posted` compiles here.
    pub fn post<'a, C: Command<'a, Reply = ()>>(&self, req: &C) -> Result<()> {
        const { assert!(C::POSTED, "the command table does not let this command be posted") };
        if self.waits() {
            return self.call(req);
        }
        self.conn().send(req, 0).map(drop)
    }

    /// What the session sent so far, command by command; `None` unless
    /// [`Options::stats`] was set.
    pub fn call_stats(&self) -> Option<crate::CallStats> {
        self.conn_as_is().stats.as_deref().cloned()
    }

    /// Round trip that does nothing (latency measurement).
    pub fn nop(&self) -> Result<()> {
        self.call(&Nop {})
    }

    /// `cuInit`.
    pub fn init(&self) -> Result<()> {
        self.call(&Init {})
    }

    /// `cuDriverGetVersion` (of the backend's driver).
    pub fn driver_version(&self) -> Result<i32> {
        Ok(self.call(&DriverGetVersion {})?.value.get())
    }

    /// `cuDeviceGetCount`.
    pub fn device_count(&self) -> Result<i32> {
        Ok(self.call(&DeviceGetCount {})?.value.get())
    }

    /// `cuDeviceGet`.
    pub fn device_get(&self, ordinal: i32) -> Result<i32> {
        if let Some(d) = self.memo().device(ordinal) {
            return Ok(d);
        }
        let d = self.call(&DeviceGet { device: ordinal.into() })?.value.get();
        self.memo().set_device(ordinal, d);
        Ok(d)
    }

    /// Name, UUID, memory and attributes of a device (one round trip, then
    /// cached).
    pub fn device_props(&self, dev: i32) -> Result<Arc<DeviceProps>> {
        if let Some(p) = self.devices.lock().unwrap_or_else(|p| p.into_inner()).get(&dev) {
            return Ok(p.clone());
        }
        let rep = self.call(&DeviceGetProperties { device: dev.into() })?;
        let masked = |a: &AttrPair| if MASKED_ATTRS.contains(&CUdevice_attribute(a.attr.get() as u32)) { 0 } else { a.value.get() };
        let props = Arc::new(DeviceProps {
            name: proto::str_from_fixed(&rep.head.name),
            uuid: rep.head.uuid,
            total_mem: rep.head.total_mem.get(),
            attrs: rep.attrs.iter().map(|a| (a.attr.get(), masked(a))).collect(),
        });
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
    pub fn device_attribute(&self, dev: i32, attr: CUdevice_attribute) -> Result<i32> {
        let props = self.device_props(dev)?;
        match props.attrs.get(&(attr.0 as i32)) {
            Some(v) => Ok(*v),
            None if MASKED_ATTRS.contains(&attr) => Ok(0),
            None => Err(CuError::INVALID_VALUE.into()),
        }
    }

    /// Memory and gauges of a device, asked each time (they change).
    pub fn device_status(&self, dev: i32) -> Result<crate::handles::DeviceStatus> {
        Ok((&self.call(&proto::DeviceStatus { device: dev.into(), reserved: 0.into() })?).into())
    }

    /// `cuDeviceGetAttribute`, asked of the backend (unmasked).
    pub fn device_attribute_uncached(&self, dev: i32, attr: CUdevice_attribute) -> Result<i32> {
        Ok(self.call(&DeviceGetAttribute { device: dev.into(), attr: (attr.0 as i32).into() })?.value.get())
    }

    /// `cuDevicePrimaryCtxRetain`.
    pub fn primary_ctx_retain(&self, dev: i32) -> Result<Context> {
        Ok(Context(self.call(&PrimaryCtxRetain { device: dev.into() })?.handle.get()))
    }

    /// `cuDevicePrimaryCtxRelease`.
    pub fn primary_ctx_release(&self, dev: i32) -> Result<()> {
        // The context may go with its last reference; its id cannot be
        // told from here, so every kept limit goes.
        self.memo().forget_all_limits();
        self.call(&PrimaryCtxRelease { device: dev.into() })
    }

    /// `cuCtxCreate`.
    pub fn ctx_create(&self, dev: i32, flags: u32) -> Result<Context> {
        Ok(Context(self.call(&CtxCreate { device: dev.into(), flags: flags.into() })?.handle.get()))
    }

    /// `cuCtxDestroy`.
    pub fn ctx_destroy(&self, ctx: Context) -> Result<()> {
        self.memo().forget_limits(ctx.0);
        self.call(&CtxDestroy { ctx: ctx.0.into() })
    }

    /// `cuCtxSynchronize`.
    pub fn ctx_synchronize(&self, ctx: Context) -> Result<()> {
        self.call(&CtxSynchronize { ctx: ctx.0.into() })
    }

    /// `cuCtxResetPersistingL2Cache`.
    pub fn ctx_reset_persisting_l2(&self, ctx: Context) -> Result<()> {
        self.call(&CtxResetL2 { ctx: ctx.0.into() })
    }

    /// API version, flags and stream priority range of a context.
    pub fn ctx_info(&self, ctx: Context) -> Result<CtxInfo> {
        Ok(self.call(&CtxGetInfo { ctx: ctx.0.into() })?.into())
    }

    /// `cuCtxGetLimit`.
    pub fn ctx_get_limit(&self, ctx: Context, limit: u32) -> Result<u64> {
        if let Some(v) = self.memo().limit(ctx.0, limit) {
            return Ok(v);
        }
        let v = self.call(&CtxLimit { ctx: ctx.0.into(), limit: limit.into(), set: 0.into(), value: 0.into() })?.value.get();
        self.memo().set_limit(ctx.0, limit, v);
        Ok(v)
    }

    /// `cuCtxSetLimit`.
    pub fn ctx_set_limit(&self, ctx: Context, limit: u32, value: u64) -> Result<()> {
        self.memo().forget_limits(ctx.0);
        self.call(&CtxLimit { ctx: ctx.0.into(), limit: limit.into(), set: 1.into(), value: value.into() }).map(drop)
    }

    /// `cuModuleLoadData`: PTX (compiled by the backend's driver), cubin or
    /// fatbin bytes. An image of [`CACHED_IMAGE_MIN`] bytes or more is
    /// first named by its hash, and sent only if the backend does not hold
    /// it for this guest already.
    pub fn module_load(&self, ctx: Context, image: &[u8]) -> Result<Module> {
        if image.len() >= CACHED_IMAGE_MIN {
            if let Some(m) = self.module_load_cached(ctx, image)? {
                tracing::debug!(bytes = image.len(), "module image: named by hash, held by the backend");
                return Ok(m);
            }
        }
        tracing::debug!(bytes = image.len(), "module image: sent");
        self.module_load_sent(ctx, image)
    }

    /// Loads `image` from the backend's image cache: `None` when the
    /// backend does not hold it for this guest (or keeps no cache).
    pub fn module_load_cached(&self, ctx: Context, image: &[u8]) -> Result<Option<Module>> {
        use sha2::Digest;
        let r = ModuleLoadCached { ctx: ctx.0.into(), len: (image.len() as u64).into(), sha256: sha2::Sha256::digest(image).into() };
        match self.call(&r) {
            Ok(rep) => Ok(Some(Module(rep.handle.get()))),
            // NOT_SUPPORTED: a backend that predates the cache.
            Err(e) if matches!(e.code(), CuError::NOT_FOUND | CuError::NOT_SUPPORTED) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `cuModuleLoadData` with the image sent.
    pub fn module_load_sent(&self, ctx: Context, image: &[u8]) -> Result<Module> {
        let mut c = self.conn();
        let staged = match c.t.stage(image) {
            Ok(s) => s,
            Err(e) => return c.fail(e),
        };
        let req =
            ModuleLoad { head: ModuleLoadHead { ctx: ctx.0.into(), image: staged.dref }, image: if staged.inline { image } else { &[] } };
        Ok(Module(c.call(&req)?.handle.get()))
    }

    /// `cuModuleUnload` (sent without waiting).
    pub fn module_unload(&self, m: Module) -> Result<()> {
        self.post(&ModuleUnload { module: m.0.into() })
    }

    /// `cuModuleGetFunction`, with the kernel's parameter layout.
    pub fn module_get_function(&self, m: Module, name: &str) -> Result<Function> {
        proto::check_name(name.as_bytes()).map_err(|_| CuError::INVALID_VALUE)?;
        let rep = self.call(&ModuleGetFunction::new(m.0, name))?;
        let params: Arc<[Param]> = rep.params.iter().map(|p| Param { offset: p.offset.get(), size: p.size.get() }).collect();
        let param_bytes = rep.head.param_bytes.get() as usize;
        if params.iter().any(|p| p.offset as usize + p.size as usize > param_bytes) || param_bytes > MAX_PARAM_BYTES {
            return Err(TransportError::Protocol(ProtocolError::ParamLayout).into());
        }
        Ok(Function { id: rep.head.function.get(), params, param_bytes })
    }

    /// The names of a module's kernels.
    pub fn module_function_names(&self, m: Module) -> Result<Vec<String>> {
        // Pages small enough for any reply channel (a Xen ring's is 32 KiB).
        const PAGE: u32 = 16 << 10;
        let mut names = Vec::new();
        loop {
            let rep = self.call(&ModuleFunctionNames { module: m.0.into(), first: (names.len() as u32).into(), max_bytes: PAGE.into() })?;
            let got = rep.names.len();
            names.extend(rep.names);
            if names.len() >= rep.total as usize {
                return Ok(names);
            }
            if got == 0 {
                return Err(TransportError::Protocol(ProtocolError::NamesPage).into());
            }
        }
    }

    /// `cuModuleGetGlobal`: (device address, size).
    pub fn module_get_global(&self, m: Module, name: &str) -> Result<(u64, u64)> {
        self.module_global(m, name).map(|(p, size, _)| (p, size))
    }

    /// `cuModuleGetGlobal`, and whether the global is a `__managed__`
    /// variable.
    pub fn module_global(&self, m: Module, name: &str) -> Result<(u64, u64, bool)> {
        proto::check_name(name.as_bytes()).map_err(|_| CuError::INVALID_VALUE)?;
        let g = self.call(&ModuleGetGlobal::new(m.0, name))?;
        Ok((g.dptr.get(), g.size.get(), g.flags.get() & proto::GLOBAL_MANAGED != 0))
    }

    /// Sends raw bytes as a request with `opcode` and waits for the reply
    /// status (protocol tests).
    pub fn raw_call(&self, opcode: u16, payload: &[u8]) -> Result<CuResult> {
        let mut c = self.conn();
        let id = c.send_raw(opcode, FLAG_REPLY, &[payload])?;
        c.reply(opcode, id)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut c = self.conn_as_is();
        // A session that left with a checkpoint is not brought back only to
        // say goodbye.
        if !c.is_dead() && !c.detached {
            let _ = c.send(&Goodbye {}, 0);
        }
    }
}

/// A new connection to `addr`.
pub(crate) fn open_transport(addr: &BackendAddr, opts: &Options) -> Result<Box<dyn Transport>> {
    Ok(match addr {
        BackendAddr::Tcp(a) => Box::new(transport::tcp::TcpTransport::connect(a, None, opts.tcp_key.as_deref(), opts.timeout)?),
        BackendAddr::Tls(a) => {
            let ca = opts.tls_ca.as_deref().ok_or(TransportError::Tls { why: "no CA: set PVGPU_TLS_CA".into() })?;
            let tls = transport::tcp::TlsClient::from_ca_file(ca)?;
            Box::new(transport::tcp::TcpTransport::connect(a, Some(&tls), opts.tcp_key.as_deref(), opts.timeout)?)
        }
        BackendAddr::Rdma(a) => Box::new(transport::tcp::TcpTransport::connect_rdma(a, opts.tcp_key.as_deref(), opts.timeout)?),
        BackendAddr::Local(p) => Box::new(transport::local::connect(p, opts)?),
        BackendAddr::Xen(d) => Box::new(transport::xen::connect(*d, opts)?),
    })
}
