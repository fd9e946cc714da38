//! `cuGetExportTable`: the driver's private tables.
//!
//! NVIDIA's runtime (static `libcudart_static.a` or `libcudart.so.13`, and
//! every library that embeds it) asks the driver for tables of functions
//! identified by UUIDs, and stops at its first call if they are missing.
//! They hold pointers into this process and take its callbacks, so they
//! are implemented here, not forwarded. What each slot does was measured on
//! an H100 with driver 580 and CUDA 13.0's runtime (a logging `libcuda.so.1`
//! in front of the real one, and calls made directly against the real
//! tables), and compared with what the open reimplementations describe; the
//! file of each table says so slot by slot.
//!
//! Rules every table follows, as the real ones do: slot 0 is the table's
//! size in bytes (except the context-local storage table, which has none);
//! each table is a `static` with one address for the life of the process
//! (every copy of the runtime hashes the address it got); a slot whose
//! meaning is unknown answers `CUDA_ERROR_NOT_SUPPORTED` and writes
//! nothing. An unknown UUID is `CUDA_ERROR_INVALID_VALUE` with a null
//! table, as the driver answers, logged once per UUID.

mod checks;
mod cls;
mod cluster;
mod cudart;
mod ids;
mod integrity;
mod modules;
mod tools;

use pvgpu_ring::{CuError, CuResult};
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

/// A table as the runtime reads it: an array of pointer-sized slots.
#[repr(C)]
pub struct Table<const N: usize>(pub [*const c_void; N]);

// SAFETY: a table is never written after it is built; it holds only its
// size and the addresses of functions of this library.
unsafe impl<const N: usize> Sync for Table<N> {}

impl<const N: usize> Table<N> {
    /// The table's address, as the runtime receives it.
    pub fn addr(&'static self) -> *const c_void {
        self as *const Self as *const c_void
    }
}

/// Slot 0 of a table: its size in bytes.
pub const fn size_slot(slots: usize) -> *const c_void {
    std::ptr::without_provenance(slots * 8)
}

/// A slot whose meaning is unknown: answers `CUDA_ERROR_NOT_SUPPORTED`
/// whatever it is passed (the caller cleans up its arguments).
pub extern "C" fn unknown_slot() -> CuResult {
    CuResult::NOT_SUPPORTED
}

/// A table's UUID, in the byte order `CUuuid` holds it.
type Uuid = [u8; 16];

/// Asked for by the runtime before `cuInit`; its slots are never called by
/// CUDA 13.0's runtime, which goes on when the driver answers that it has
/// no such table (measured: NOT_FOUND, INVALID_VALUE and NOT_SUPPORTED all
/// work).
const UNUSED_F8CFF951: Uuid = [0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9];

/// The table for `id`, if this library implements it.
fn table(id: &Uuid) -> Option<*const c_void> {
    Some(match *id {
        cudart::UUID => cudart::TABLE.addr(),
        tools::HOOKS_UUID => tools::HOOKS.addr(),
        tools::TLS_UUID => tools::TLS.addr(),
        cls::UUID => cls::TABLE.addr(),
        checks::UUID => checks::TABLE.addr(),
        integrity::UUID => integrity::TABLE.addr(),
        ids::UUID => ids::TABLE.addr(),
        cluster::UUID => cluster::TABLE.addr(),
        modules::UUID => modules::TABLE.addr(),
        _ => return None,
    })
}

/// Answers `cuGetExportTable(ppExportTable, pExportTableId)`.
///
/// # Safety
/// `out` must be null or writable; `id` null or 16 readable bytes.
pub unsafe fn get(out: *mut *const c_void, id: *const Uuid) -> Result<(), CuError> {
    if out.is_null() || id.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: 16 readable bytes, per the caller.
    let id = unsafe { id.read_unaligned() };
    let found = table(&id);
    // SAFETY: writable, per the caller.
    unsafe { out.write(found.unwrap_or(std::ptr::null())) };
    match found {
        Some(_) => {
            tracing::trace!(table = %hex(&id), "cuGetExportTable");
            Ok(())
        }
        None if id == UNUSED_F8CFF951 => Err(CuError::NOT_FOUND),
        None => {
            static SEEN: Mutex<Option<HashSet<Uuid>>> = Mutex::new(None);
            let first = SEEN.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashSet::new).insert(id);
            if first {
                tracing::warn!(table = %hex(&id), "cuGetExportTable: unknown private driver table; answering CUDA_ERROR_INVALID_VALUE");
            }
            Err(CuError::INVALID_VALUE)
        }
    }
}

/// A UUID as the traces print it: its bytes in order, in hex.
fn hex(id: &Uuid) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Logs a slot call at trace level (`PVGPU_LOG=pvgpu_cuda::export=trace`).
fn traced(table: &'static str, slot: usize, r: CuResult) -> CuResult {
    tracing::trace!(table, slot, status = ?r, "export table slot");
    r
}
