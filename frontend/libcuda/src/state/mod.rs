//! What the drop-in library knows locally: the connection, each thread's
//! context stack and the contexts' local storage ([`ctx`]), and the objects
//! it handed out ([`objects`]: functions with their parameter layouts,
//! libraries and kernels, streams, allocations), so that it can answer many
//! calls without a round trip and tell device pointers from host pointers.

pub mod ctx;
pub mod objects;

pub use ctx::{current, current_handle};
pub use objects::{FnInfo, HostInfo, Objects, StreamInfo, objects};

use pvgpu_frontend::{Client, CuError, CuResult, Error, Stream};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, Once, OnceLock};

/// Result of an API body.
pub type Res = Result<(), CuError>;

static CLIENT: OnceLock<Client> = OnceLock::new();
static CONNECT: Mutex<()> = Mutex::new(());
/// Starts logging to stderr if `PVGPU_LOG` is set (e.g. `PVGPU_LOG=info`);
/// the library is silent otherwise.
pub fn init_log() {
    pvgpu_frontend::log::init_dropin();
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
    pvgpu_frontend::set_output_handler(c_stdout);
    match Client::from_env() {
        Ok(c) => {
            tracing::info!(info = ?c.info(), "libcuda: connected to the pvgpu backend");
            let counting = c.call_stats().is_some();
            let c = CLIENT.get_or_init(|| c);
            if counting {
                // SAFETY: registers a plain `extern "C"` function with no
                // arguments, which only reads the client's counters.
                unsafe { libc::atexit(print_stats) };
            }
            Ok(c)
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

/// Prints what the session sent, command by command, at exit
/// (`PVGPU_STATS=1`).
extern "C" fn print_stats() {
    let _ = catch_unwind(|| {
        if let Some(s) = CLIENT.get().and_then(Client::call_stats) {
            eprint!("{}", s.table());
        }
    });
}

unsafe extern "C" {
    /// C's standard output stream.
    static stdout: *mut libc::FILE;
}

/// Writes kernel output through C's `stdout`, in order with what the
/// program prints there, as the driver does.
fn c_stdout(bytes: &[u8]) {
    // SAFETY: `stdout` is the C library's stream, valid for the life of the
    // process; fwrite copies `bytes` into it.
    unsafe { libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), stdout) };
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
    tracing::trace!(call = name, "call");
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

/// Runs a body that fails as part of normal use (lookups that miss): errors
/// become statuses without a log line, and a panic becomes
/// `CUDA_ERROR_UNKNOWN` instead of unwinding into C.
pub fn quiet(f: impl FnOnce() -> Res) -> CuResult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.into(),
        Err(_) => {
            tracing::error!("internal error (panic) in pvgpu's libcuda");
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

/// Tag of handles the library makes itself (libraries, kernels, memory
/// pools), so they never collide with the backend's ids, whose high bits
/// are a small generation count.
pub const LOCAL_TAG: u64 = 0x8000_0000_0000_0000;

/// A fresh handle of the library's own.
pub fn local_handle() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    LOCAL_TAG | NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
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

/// [`stream`] for work submitted to it: first waits for the host functions
/// the work must follow ([`crate::callback::gate`]).
pub fn ordered(h: *mut c_void) -> Stream {
    let s = stream(h);
    crate::callback::gate(s);
    s
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
