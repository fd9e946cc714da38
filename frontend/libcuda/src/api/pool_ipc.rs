//! Memory pools shared between processes of the guest, as natively with
//! file descriptors: `cuMemPoolCreate` with
//! `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`, then
//! `cuMemPoolExportToShareableHandle` (a descriptor the program passes to
//! another process, over a Unix socket), `cuMemPoolImportFromShareableHandle`
//! there, and each allocation's `cuMemPoolExportPointer` data, which the
//! other process hands to `cuMemPoolImportPointer`.
//!
//! The descriptor is a sealed memfd holding the 64 bytes the backend made
//! for the pool ([`super::shareable`]); the export data holds the 64 bytes
//! it made for the allocation. Both are tokens the backend looks up, and
//! gives only to a session of the same guest. An imported allocation is
//! freed with `cuMemFree` or `cuMemFreeAsync`, before its exporter frees it,
//! as natively.

use super::pool::{Pool, device_ctx, own};
use super::shareable::{read_file, sealed_file};
use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, ctx, objects, put, run};
use pvgpu_ring::cuda::api::{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CUmemAllocationHandleType, CUmemPoolPtrExportData};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_void};

/// `cuMemPoolExportToShareableHandle` (file descriptors).
///
/// # Safety
/// `out` must be writable as an `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolExportToShareableHandle(
    out: *mut c_void,
    pool: *mut c_void,
    kind: CUmemAllocationHandleType,
    flags: u64,
) -> CuResult {
    run("cuMemPoolExportToShareableHandle", || {
        if out.is_null() || flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        if kind != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CuError::NOT_SUPPORTED);
        }
        // A default pool has no shareable handle type.
        let Pool::Own(p, dev) = Pool::of(pool)? else { return Err(CuError::INVALID_VALUE) };
        let bytes = state::device(dev)?.0.mem_pool_export(p).map_err(state::cu)?;
        let fd = sealed_file(&bytes)?;
        // SAFETY: non-null and writable as an int per the API; the
        // descriptor is the program's from now on.
        unsafe { put(out.cast::<c_int>(), std::os::fd::IntoRawFd::into_raw_fd(fd)) }
    })
}

/// `cuMemPoolImportFromShareableHandle` (file descriptors): a pool of the
/// current context's device.
///
/// # Safety
/// `out` must be writable; `os_handle` is a descriptor as a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolImportFromShareableHandle(
    out: *mut *mut c_void,
    os_handle: *mut c_void,
    kind: CUmemAllocationHandleType,
    flags: u64,
) -> CuResult {
    run("cuMemPoolImportFromShareableHandle", || {
        if out.is_null() || flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        if kind != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CuError::NOT_SUPPORTED);
        }
        let bytes = read_file(os_handle)?;
        let h = super::vmm::any_context()?;
        let dev = ctx::device_of(h)?;
        let p = state::client_of_ctx(h)?.mem_pool_import(ctx::backend(h)?, &bytes).map_err(state::cu)?;
        own().insert(p.0, dev);
        // SAFETY: non-null and writable per the API.
        unsafe { put(out, Pool::Own(p, dev).handle()) }
    })
}

/// `cuMemPoolExportPointer`: the data another process imports the
/// allocation at `ptr` with.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolExportPointer(out: *mut CUmemPoolPtrExportData, ptr: u64) -> CuResult {
    run("cuMemPoolExportPointer", || {
        if out.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let bytes = state::client_of_pointer(ptr)?.mem_pool_export_pointer(ptr).map_err(state::cu)?;
        // SAFETY: non-null and writable per the API.
        unsafe { put(out, CUmemPoolPtrExportData { reserved: bytes }) }
    })
}

/// `cuMemPoolImportPointer`: another process's allocation, from a pool
/// imported here.
///
/// # Safety
/// `out` must be writable, `data` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolImportPointer(out: *mut u64, pool: *mut c_void, data: *mut CUmemPoolPtrExportData) -> CuResult {
    run("cuMemPoolImportPointer", || {
        if out.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: null or readable per the API.
        let bytes = unsafe { data.as_ref() }.ok_or(CuError::INVALID_VALUE)?.reserved;
        let Pool::Own(p, dev) = Pool::of(pool)? else { return Err(CuError::INVALID_VALUE) };
        let (ptr, size) = state::device(dev)?.0.mem_pool_import_pointer(p, &bytes).map_err(state::cu)?;
        // The backend imports in the pool's context; the library's record
        // names the device's context the program would use.
        device_ctx(dev)?;
        let h = state::current_handle().filter(|&h| ctx::device_of(h) == Ok(dev)).unwrap_or(ctx::primary_handle(dev));
        objects().device.insert(ptr, DevAlloc::new(size, h, DevKind::Alloc));
        // SAFETY: non-null and writable per the API.
        unsafe { put(out, ptr) }
    })
}
