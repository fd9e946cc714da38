//! What the drop-in library knows locally: the connection, each thread's
//! context stack and the contexts' local storage ([`ctx`]), and the objects
//! it handed out ([`objects`]: functions with their parameter layouts,
//! libraries and kernels, streams, allocations), so that it can answer many
//! calls without a round trip and tell device pointers from host pointers.

pub mod backends;
pub mod ctx;
pub mod objects;

pub use ctx::{current, current_handle};
pub use objects::{FnInfo, HostInfo, Objects, StreamInfo, objects};

use pvgpu_frontend::{Client, CuError, CuResult, Error, Stream};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Once, OnceLock};

/// Result of an API body.
pub type Res = Result<(), CuError>;

/// Starts logging to stderr if `PVGPU_LOG` is set (e.g. `PVGPU_LOG=info`);
/// the library is silent otherwise.
pub fn init_log() {
    pvgpu_frontend::log::init_dropin();
}

/// Connects to the backends named by `PVGPU_BACKEND` (once).
pub fn connect() -> Result<&'static [Client], CuError> {
    init_log();
    backends::connect(|first| {
        pvgpu_frontend::set_output_handler(c_stdout);
        pvgpu_frontend::set_error_handler(c_stderr);
        if first.call_stats().is_some() {
            // SAFETY: registers a plain `extern "C"` function with no
            // arguments, which only reads the clients' counters.
            unsafe { libc::atexit(print_stats) };
        }
    })
}

/// Prints what the session sent, command by command, at exit
/// (`PVGPU_STATS=1`).
extern "C" fn print_stats() {
    let _ = catch_unwind(|| {
        for s in backends::connected().unwrap_or_default().iter().filter_map(Client::call_stats) {
            eprint!("{}", s.table());
        }
    });
}

unsafe extern "C" {
    /// C's standard output stream.
    static stdout: *mut libc::FILE;
    /// C's standard error stream.
    static stderr: *mut libc::FILE;
}

/// Writes kernel output through C's `stdout`, in order with what the
/// program prints there, as the driver does.
fn c_stdout(bytes: &[u8]) {
    // SAFETY: `stdout` is the C library's stream, valid for the life of the
    // process; fwrite copies `bytes` into it.
    unsafe { libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), stdout) };
}

/// Writes what the driver wrote to standard error for the program's
/// kernels (device assertions) through C's `stderr`, as the driver does.
fn c_stderr(bytes: &[u8]) {
    // SAFETY: `stderr` is the C library's stream, valid for the life of the
    // process; fwrite copies `bytes` into it.
    unsafe { libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), stderr) };
}

/// The connection to the backend of the calling thread's current context
/// (the first backend without one), once `cuInit` has succeeded.
pub fn client() -> Result<&'static Client, CuError> {
    INITIALIZED.get().ok_or(CuError::NOT_INITIALIZED)?;
    backends::at(backends::current_backend())
}

/// The connection to the backend that made handle `id` (a context,
/// stream, event, module, function or graph of a backend's).
pub fn client_of(id: u64) -> Result<&'static Client, CuError> {
    INITIALIZED.get().ok_or(CuError::NOT_INITIALIZED)?;
    backends::at(backends::backend_of_handle(id))
}

/// Where `c` is in `PVGPU_BACKEND`'s list (0 for a client not of it).
pub fn place_of(c: &Client) -> usize {
    backends::connected().and_then(|all| all.iter().position(|x| std::ptr::eq(x, c))).unwrap_or(0)
}

/// The connection to the backend of context handle `h`.
pub fn client_of_ctx(h: u64) -> Result<&'static Client, CuError> {
    INITIALIZED.get().ok_or(CuError::NOT_INITIALIZED)?;
    backends::at(backends::backend_of_ctx(h))
}

/// The connection to the backend of stream handle `h`: the current
/// context's for a default stream.
pub fn client_of_stream(h: *mut c_void) -> Result<&'static Client, CuError> {
    match stream(h) {
        Stream::DEFAULT => client(),
        Stream(id) => client_of(id),
    }
}

/// The connection to the backend of device memory at `p`, if the library
/// knows it, else the current context's.
pub fn client_of_pointer(p: u64) -> Result<&'static Client, CuError> {
    INITIALIZED.get().ok_or(CuError::NOT_INITIALIZED)?;
    backends::at(backends::backend_of_pointer(p).unwrap_or_else(backends::current_backend))
}

/// The connection for work on device memory at `p` on stream `s`: the
/// stream's backend, or for a default stream the backend of the memory
/// (a program may name any device's memory there, as with unified
/// addressing natively).
pub fn client_for(p: u64, s: Stream) -> Result<&'static Client, CuError> {
    match s {
        Stream::DEFAULT => client_of_pointer(p),
        Stream(id) => client_of(id),
    }
}

/// Device `dev`'s properties (`CUDA_ERROR_INVALID_DEVICE` for no such
/// device).
pub fn device_props(dev: i32) -> Result<std::sync::Arc<pvgpu_frontend::DeviceProps>, CuError> {
    let (c, local) = device(dev)?;
    c.device_props(local).map_err(cu)
}

/// Attribute `attr` of device `dev`.
pub fn device_attribute(dev: i32, attr: pvgpu_ring::cuda::api::CUdevice_attribute) -> Result<i32, CuError> {
    let (c, local) = device(dev)?;
    c.device_attribute(local, attr).map_err(cu)
}

/// The backend serving device `dev`, and the device's ordinal there.
pub fn device(dev: i32) -> Result<(&'static Client, i32), CuError> {
    INITIALIZED.get().ok_or(CuError::NOT_INITIALIZED)?;
    backends::on_device(dev)
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
