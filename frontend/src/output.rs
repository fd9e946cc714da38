//! Program output from the backend: what the session's kernels printed
//! (device `printf`), and what the driver wrote to standard error for
//! them (device assertions), which the backend sends before the reply of
//! the call that waited for them. It goes to this process's standard
//! output or error, or to the handlers the program (or the drop-in
//! library) installs.

use std::io::Write;
use std::sync::OnceLock;

static HANDLER: OnceLock<fn(&[u8])> = OnceLock::new();
static ERROR_HANDLER: OnceLock<fn(&[u8])> = OnceLock::new();

/// Sends program output to `f` instead of Rust's standard output (the
/// drop-in library writes it through C's `stdout`, so that it interleaves
/// with what the program prints there as it does natively). The first
/// handler set stays.
pub fn set_output_handler(f: fn(&[u8])) {
    let _ = HANDLER.set(f);
}

/// Sends what is for the program's standard error to `f` instead of
/// Rust's standard error. The first handler set stays.
pub fn set_error_handler(f: fn(&[u8])) {
    let _ = ERROR_HANDLER.set(f);
}

/// Writes what the backend sent for standard error.
pub(crate) fn write_err(bytes: &[u8]) {
    match ERROR_HANDLER.get() {
        Some(f) => f(bytes),
        None => {
            let _ = std::io::stderr().lock().write_all(bytes);
        }
    }
}

pub(crate) fn write(bytes: &[u8]) {
    match HANDLER.get() {
        Some(f) => f(bytes),
        None => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes);
            let _ = out.flush();
        }
    }
}
