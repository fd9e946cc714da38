//! The three entry points that hand out function pointers, forwarded with
//! bodies of their own so that what they hand out is traced in turn.

use crate::stubs::SYMBOL_STUBS;
use std::ffi::{CStr, c_char, c_int, c_void};

type GetProcV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;
type GetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> u32;
type GetExportTable = unsafe extern "C" fn(*mut *const c_void, *const [u8; 16]) -> u32;

const NOT_FOUND: u32 = 500;

/// Replaces a forwarded function pointer by its trampoline (or by this
/// library's own body, for the three below).
///
/// # Safety
/// `pfn` must be null or writable.
unsafe fn substitute(pfn: *mut *mut c_void) {
    if pfn.is_null() {
        return;
    }
    // SAFETY: non-null and writable, per the caller.
    let f = unsafe { pfn.read() } as usize;
    let own = [
        (crate::driver::symbol("cuGetProcAddress_v2"), cuGetProcAddress_v2 as *const () as usize),
        (crate::driver::symbol("cuGetProcAddress"), cuGetProcAddress as *const () as usize),
        (crate::driver::symbol("cuGetExportTable"), cuGetExportTable as *const () as usize),
    ];
    let replacement = match own.iter().find(|(real, _)| *real == Some(f)) {
        Some((_, mine)) => Some(*mine),
        None => crate::driver::by_address().get(&f).and_then(|&i| SYMBOL_STUBS[i]).map(|s| s as usize),
    };
    if let Some(r) = replacement {
        // SAFETY: as above.
        unsafe { pfn.write(r as *mut c_void) };
    }
}

/// The name of a lookup, for the report.
///
/// # Safety
/// `symbol` must be null or NUL-terminated.
unsafe fn lookup_name(symbol: *const c_char) -> String {
    if symbol.is_null() {
        return "(null)".into();
    }
    // SAFETY: NUL-terminated, per the caller.
    unsafe { CStr::from_ptr(symbol) }.to_string_lossy().into_owned()
}

/// Traces `cuGetProcAddress_v2`.
///
/// # Safety
/// The driver API's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> u32 {
    let Some(real) = crate::driver::symbol("cuGetProcAddress_v2") else { return NOT_FOUND };
    // SAFETY: the symbol's C signature; the caller's arguments, unchanged.
    let r = unsafe { std::mem::transmute::<usize, GetProcV2>(real)(symbol, pfn, version, flags, status) };
    // SAFETY: the caller's pointers, as the API defines them.
    let (name, st) = unsafe { (lookup_name(symbol), if status.is_null() { -1 } else { status.read() }) };
    crate::report::note(&format!("GPA {name} {version} {flags} {r} {st}"));
    // SAFETY: as above.
    unsafe { substitute(pfn) };
    r
}

/// Traces `cuGetProcAddress`.
///
/// # Safety
/// The driver API's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> u32 {
    let Some(real) = crate::driver::symbol("cuGetProcAddress") else { return NOT_FOUND };
    // SAFETY: the symbol's C signature; the caller's arguments, unchanged.
    let r = unsafe { std::mem::transmute::<usize, GetProc>(real)(symbol, pfn, version, flags) };
    // SAFETY: the caller's symbol, as the API defines it.
    crate::report::note(&format!("GPA {} {version} {flags} {r} -", unsafe { lookup_name(symbol) }));
    // SAFETY: as above.
    unsafe { substitute(pfn) };
    r
}

/// Traces `cuGetExportTable`, patching the table it returns.
///
/// # Safety
/// The driver API's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetExportTable(table: *mut *const c_void, id: *const [u8; 16]) -> u32 {
    let Some(real) = crate::driver::symbol("cuGetExportTable") else { return NOT_FOUND };
    // SAFETY: the symbol's C signature; the caller's arguments, unchanged.
    let r = unsafe { std::mem::transmute::<usize, GetExportTable>(real)(table, id) };
    if id.is_null() || table.is_null() {
        return r;
    }
    // SAFETY: 16 readable bytes and a written table pointer, per the API.
    let (uuid, t) = unsafe { (id.read_unaligned(), table.read()) };
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    crate::report::note(&format!("ET {hex} {r}"));
    if r == 0 && !t.is_null() && std::env::var("PVGPU_TRACE_TABLES").map_or(true, |v| v != "0") {
        // SAFETY: the table the driver returned for this UUID.
        unsafe { crate::tables::patch(uuid, t as *mut usize) };
    }
    r
}
