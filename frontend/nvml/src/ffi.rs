//! The C boundary: logging, running an API body so that nothing but an
//! `nvmlReturn_t` comes out of it, and reading and writing the caller's
//! memory.

use crate::status::{NvmlError, NvmlReturn, Res};
use std::ffi::{CStr, c_char, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

static LOG: Once = Once::new();

/// Starts logging to stderr if `PVGPU_LOG` is set (`PVGPU_LOG=info`, or
/// any `tracing` filter); the library is silent otherwise.
pub fn init_log() {
    LOG.call_once(|| {
        if let Ok(filter) = std::env::var("PVGPU_LOG") {
            let filter = if filter == "1" { "info".to_string() } else { filter };
            // The drop-in libcuda may have set a subscriber in this process
            // already; then its subscriber serves both libraries.
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
    });
}

/// Runs an API body: its error becomes the status returned, and a panic
/// becomes `NVML_ERROR_UNKNOWN` instead of unwinding into C.
pub fn run(name: &'static str, f: impl FnOnce() -> Res) -> NvmlReturn {
    init_log();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NvmlReturn::SUCCESS,
        Ok(Err(e)) => {
            tracing::debug!(call = name, status = ?e, "call failed");
            e.into()
        }
        Err(_) => {
            tracing::error!(call = name, "internal error (panic) in pvgpu's libnvidia-ml");
            NvmlError::UNKNOWN.into()
        }
    }
}

/// Writes `v` through an out-pointer, refusing null.
///
/// # Safety
/// A non-null `p` must be valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> Res {
    if p.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller guarantees it is writable.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Copies `s` and a NUL into the caller's buffer of `length` bytes:
/// `NVML_ERROR_INVALID_ARGUMENT` for a null buffer,
/// `NVML_ERROR_INSUFFICIENT_SIZE` when it does not fit (nothing written).
///
/// # Safety
/// A non-null `buf` must be valid for writes of `length` bytes.
pub unsafe fn put_str(buf: *mut c_char, length: c_uint, s: &str) -> Res {
    if buf.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if bytes.len() >= length as usize {
        return Err(NvmlError::INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds `length` bytes (caller's contract), and
    // `bytes.len() + 1 <= length`; a Rust string never overlaps the
    // caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Reads the caller's NUL-terminated string: `NVML_ERROR_INVALID_ARGUMENT`
/// for null or for bytes that are not UTF-8.
///
/// # Safety
/// A non-null `p` must point to a NUL-terminated string that lives and
/// does not change during the call.
pub unsafe fn get_str<'a>(p: *const c_char) -> Res<&'a str> {
    if p.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    // SAFETY: non-null and NUL-terminated (caller's contract).
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| NvmlError::INVALID_ARGUMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_fit_or_are_refused() {
        let mut buf = [0x55 as c_char; 8];
        // SAFETY: `buf` holds 8 bytes.
        assert_eq!(unsafe { put_str(buf.as_mut_ptr(), 8, "1234567") }, Ok(()));
        // SAFETY: `put_str` wrote a NUL-terminated string.
        assert_eq!(unsafe { get_str(buf.as_ptr()) }, Ok("1234567"));
        // SAFETY: `buf` holds 8 bytes.
        assert_eq!(unsafe { put_str(buf.as_mut_ptr(), 8, "12345678") }, Err(NvmlError::INSUFFICIENT_SIZE));
        // SAFETY: null is refused before any write.
        assert_eq!(unsafe { put_str(std::ptr::null_mut(), 8, "x") }, Err(NvmlError::INVALID_ARGUMENT));
        // SAFETY: null is refused before any read.
        assert_eq!(unsafe { get_str(std::ptr::null()) }, Err(NvmlError::INVALID_ARGUMENT));
    }

    #[test]
    fn a_panic_is_a_status() {
        assert_eq!(run("test", || panic!("boom")), NvmlReturn::UNKNOWN);
        assert_eq!(run("test", || Err(NvmlError::NOT_FOUND)), NvmlReturn::NOT_FOUND);
    }
}
