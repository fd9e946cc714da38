//! The library calls are forwarded to.

use crate::stubs::{NAMES, SYMBOLS};
use crate::trampoline::TARGET;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

/// Where NVIDIA's driver usually is.
const DEFAULT_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
];

struct Driver(*mut c_void);

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Driver {}
// SAFETY: as above; it is only passed to dlsym.
unsafe impl Sync for Driver {}

fn driver() -> Option<&'static Driver> {
    static D: OnceLock<Option<Driver>> = OnceLock::new();
    D.get_or_init(|| {
        let candidates: Vec<String> = match std::env::var("PVGPU_TRACE_DRIVER") {
            Ok(p) => vec![p],
            Err(_) => DEFAULT_PATHS.iter().map(|s| s.to_string()).collect(),
        };
        for p in candidates {
            let Ok(c) = CString::new(p.clone()) else { continue };
            // SAFETY: a NUL-terminated path; the library's initialisers run
            // as they would for the program.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if !h.is_null() {
                crate::report::note(&format!("TRACE forwarding to {p}"));
                return Some(Driver(h));
            }
        }
        crate::report::note("TRACE no driver library to forward to (set PVGPU_TRACE_DRIVER)");
        None
    })
    .as_ref()
}

/// The forwarded library's `name`, if it has it.
pub fn symbol(name: &str) -> Option<usize> {
    let d = driver()?;
    let c = CString::new(name).ok()?;
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(d.0, c.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// Resolves symbol trampoline `i` (table slots are set when patched).
pub fn resolve(i: usize) -> Option<usize> {
    let f = symbol(NAMES.get(i)?)?;
    TARGET[i].store(f, Ordering::Release);
    Some(f)
}

/// The trampoline index of each function the forwarded library exports.
pub fn by_address() -> &'static HashMap<usize, usize> {
    static M: OnceLock<HashMap<usize, usize>> = OnceLock::new();
    M.get_or_init(|| (0..SYMBOLS).filter_map(|i| symbol(NAMES[i]).map(|f| (f, i))).collect())
}
