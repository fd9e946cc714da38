//! What the drop-in library knows locally: the connection, each thread's
//! context stack, and the objects it handed out (functions with their
//! parameter layouts, streams, allocations), so that it can answer many
//! calls without a round trip and tell device pointers from host pointers.

use pvgpu_frontend::{Client, Context, CuError, CuResult, Error, Function, Stream};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

/// Result of an API body.
pub type Res = Result<(), CuError>;

static CLIENT: OnceLock<Client> = OnceLock::new();
static CONNECT: Mutex<()> = Mutex::new(());
static LOG: Once = Once::new();

/// Starts logging to stderr if `PVGPU_LOG` is set (e.g. `PVGPU_LOG=info`);
/// the library is silent otherwise.
pub fn init_log() {
    LOG.call_once(|| {
        if let Ok(filter) = std::env::var("PVGPU_LOG") {
            let filter = if filter == "1" { "info".to_string() } else { filter };
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
    });
}

/// Connects to the backend named by `PVGPU_BACKEND` (once).
pub fn connect() -> Result<&'static Client, CuError> {
    init_log();
    if let Some(c) = CLIENT.get() {
        return Ok(c);
    }
    let _guard = CONNECT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = CLIENT.get() {
        return Ok(c);
    }
    match Client::from_env() {
        Ok(c) => {
            tracing::info!(info = ?c.info(), "libcuda: connected to the pvgpu backend");
            Ok(CLIENT.get_or_init(|| c))
        }
        Err(e) => {
            tracing::error!(error = %pvgpu_frontend::error::Chain(&e), "libcuda: cannot reach the pvgpu backend (PVGPU_BACKEND)");
            Err(match e {
                Error::Address(_) => CuError::INVALID_VALUE,
                _ => CuError::NO_DEVICE,
            })
        }
    }
}

/// The connection, once `cuInit` has succeeded.
pub fn client() -> Result<&'static Client, CuError> {
    match (CLIENT.get(), INITIALIZED.get()) {
        (Some(c), Some(_)) => Ok(c),
        _ => Err(CuError::NOT_INITIALIZED),
    }
}

/// Set once `cuInit` succeeded.
pub static INITIALIZED: OnceLock<()> = OnceLock::new();

/// Converts a client error to the status a caller sees.
pub fn cu(e: Error) -> CuError {
    e.code()
}

/// Runs an API body: errors become statuses, and a panic becomes
/// `CUDA_ERROR_UNKNOWN` instead of unwinding into C.
pub fn run(name: &'static str, f: impl FnOnce() -> Res) -> CuResult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CuResult::SUCCESS,
        Ok(Err(e)) => {
            tracing::debug!(call = name, status = ?e, "call failed");
            e.into()
        }
        Err(_) => {
            tracing::error!(call = name, "internal error (panic) in pvgpu's libcuda");
            CuResult::UNKNOWN
        }
    }
}

/// The body of every function pvgpu does not implement.
pub fn unsupported(name: &'static str, once: &Once) -> CuResult {
    init_log();
    once.call_once(|| tracing::warn!(call = name, "not supported by pvgpu; returning CUDA_ERROR_NOT_SUPPORTED"));
    CuError::NOT_SUPPORTED.into()
}

/// Writes `v` through an out-pointer, refusing null.
///
/// # Safety
/// A non-null `p` must be valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> Res {
    if p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: non-null, and the caller guarantees it is writable.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Opaque handle values handed to programs: our 64-bit ids as pointers.
pub fn handle(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

/// The id behind a handle.
pub fn id(h: *mut c_void) -> u64 {
    h as usize as u64
}

/// Stream id of a `CUstream` (`NULL`, `CU_STREAM_LEGACY` and
/// `CU_STREAM_PER_THREAD` are the default stream).
pub fn stream(h: *mut c_void) -> Stream {
    match h as usize {
        0..=2 => Stream::DEFAULT,
        v => Stream(v as u64),
    }
}

thread_local! {
    static CTX_STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current context.
pub fn current() -> Result<Context, CuError> {
    CTX_STACK.with(|s| s.borrow().last().copied()).map(Context).ok_or(CuError::INVALID_CONTEXT)
}

/// The calling thread's current context id, if any.
pub fn current_id() -> Option<u64> {
    CTX_STACK.with(|s| s.borrow().last().copied())
}

/// Replaces the top of the calling thread's stack (`cuCtxSetCurrent`).
pub fn set_current(ctx: Option<u64>) {
    CTX_STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if let Some(c) = ctx {
            s.push(c);
        }
    });
}

/// Pushes a context (`cuCtxPushCurrent`, `cuCtxCreate`).
pub fn push(ctx: u64) {
    CTX_STACK.with(|s| s.borrow_mut().push(ctx));
}

/// Pops the current context (`cuCtxPopCurrent`).
pub fn pop() -> Option<u64> {
    CTX_STACK.with(|s| s.borrow_mut().pop())
}

/// Forgets a destroyed context on the calling thread's stack.
pub fn forget_ctx(ctx: u64) {
    CTX_STACK.with(|s| s.borrow_mut().retain(|&c| c != ctx));
}

/// A kernel handed out by `cuModuleGetFunction`.
pub struct FnInfo {
    /// Function and layout.
    pub func: Function,
    /// Its module.
    pub module: u64,
    /// Its name, for `cuFuncGetName`.
    pub name: CString,
}

/// A stream handed out by `cuStreamCreate*`.
#[derive(Clone, Copy)]
pub struct StreamInfo {
    /// Its context.
    pub ctx: u64,
    /// Creation flags.
    pub flags: u32,
    /// Priority.
    pub priority: i32,
}

/// Host memory the library allocated or registered.
#[derive(Clone, Copy)]
pub struct HostInfo {
    /// Bytes.
    pub len: usize,
    /// `cuMemHostAlloc` flags.
    pub flags: u32,
    /// In the shared data area (else from the C heap).
    pub in_area: bool,
}

/// Everything the library tracks, behind one lock.
#[derive(Default)]
pub struct Objects {
    /// Context id to device.
    pub ctx_device: HashMap<u64, i32>,
    /// Primary context of each device: (context, retain count, flags).
    pub primary: HashMap<i32, (u64, u32, u32)>,
    /// Module id to context.
    pub modules: HashMap<u64, u64>,
    /// Function id to kernel.
    pub functions: HashMap<u64, FnInfo>,
    /// Stream id to stream.
    pub streams: HashMap<u64, StreamInfo>,
    /// Device allocations and module globals: address to (size, context,
    /// module of a global).
    pub device: BTreeMap<u64, (u64, u64, Option<u64>)>,
    /// Host allocations by address.
    pub host: BTreeMap<usize, HostInfo>,
    /// Registered host ranges by address.
    pub registered: BTreeMap<usize, usize>,
}

static OBJECTS: OnceLock<Mutex<Objects>> = OnceLock::new();

/// The tracked objects.
pub fn objects() -> MutexGuard<'static, Objects> {
    OBJECTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

impl Objects {
    /// The device allocation containing `[p, p+len)`: (start, size, context).
    pub fn device_range(&self, p: u64, len: u64) -> Option<(u64, u64, u64)> {
        let (&start, &(size, ctx, _)) = self.device.range(..=p).next_back()?;
        (p.checked_add(len)? <= start + size).then_some((start, size, ctx))
    }

    /// Forgets everything of a destroyed context.
    pub fn drop_ctx(&mut self, ctx: u64) {
        self.ctx_device.remove(&ctx);
        let modules: Vec<u64> = self.modules.iter().filter(|(_, c)| **c == ctx).map(|(m, _)| *m).collect();
        for m in modules {
            self.drop_module(m);
        }
        self.streams.retain(|_, s| s.ctx != ctx);
        self.device.retain(|_, (_, c, _)| *c != ctx);
    }

    /// Forgets a module's functions and globals.
    pub fn drop_module(&mut self, m: u64) {
        self.modules.remove(&m);
        self.functions.retain(|_, f| f.module != m);
        self.device.retain(|_, (_, _, g)| *g != Some(m));
    }
}

/// Reads a NUL-terminated name.
///
/// # Safety
/// A non-null `p` must point to a NUL-terminated string.
pub unsafe fn name<'a>(p: *const std::ffi::c_char) -> Result<&'a str, CuError> {
    if p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_str().map_err(|_| CuError::INVALID_VALUE)
}
