//! Physical memory with properties: compressible memory, and shareable
//! handles passed to another process of the guest
//! (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`,
//! `cuMemGetAllocationPropertiesFromHandle`).
//!
//! A shareable handle is a file descriptor, as natively: a sealed memfd
//! holding the 64 bytes the backend made for the memory. The program
//! passes it on as it would the driver's (over a Unix socket, to a child);
//! the importing process's library reads the bytes and the backend gives
//! the memory only to a session of the same guest.

use crate::state::{self, ctx, put, run};
use pvgpu_frontend::{PhysInfo, PhysMem};
use pvgpu_ring::cuda::api::{
    CU_MEM_ALLOCATION_COMP_GENERIC, CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_NONE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
    CU_MEM_LOCATION_TYPE_DEVICE, CUmemAllocationHandleType, CUmemAllocationProp, CUmemLocation,
};
use pvgpu_ring::proto::{MEM_COMPRESSIBLE, MEM_SHAREABLE};
use pvgpu_ring::{CuError, CuResult};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;

/// The device and flags of each physical allocation, by handle.
static PROPS: Mutex<Option<HashMap<u64, (c_int, u32)>>> = Mutex::new(None);

fn props() -> std::sync::MutexGuard<'static, Option<HashMap<u64, (c_int, u32)>>> {
    PROPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The flags `prop` asks for: `CUDA_ERROR_NOT_SUPPORTED` for handle types
/// other than file descriptors (fabric and Windows handles).
pub fn flags_of(prop: &CUmemAllocationProp) -> Result<u32, CuError> {
    let mut f = 0;
    if prop.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC.0 as u8 {
        f |= MEM_COMPRESSIBLE;
    }
    match prop.requestedHandleTypes {
        CU_MEM_HANDLE_TYPE_NONE => {}
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR => f |= MEM_SHAREABLE,
        _ => return Err(CuError::NOT_SUPPORTED),
    }
    Ok(f)
}

/// Remembers what physical allocation `p` of `dev` is.
pub fn made(p: &PhysInfo, dev: c_int) {
    props().get_or_insert_with(HashMap::new).insert(p.mem.0, (dev, p.flags));
}

/// Physical allocation `h` was released.
pub fn released(h: u64) {
    if let Some(m) = props().as_mut() {
        m.remove(&h);
    }
}

/// `cuMemGetAllocationPropertiesFromHandle`.
///
/// # Safety
/// `prop` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(prop: *mut CUmemAllocationProp, handle: u64) -> CuResult {
    run("cuMemGetAllocationPropertiesFromHandle", || {
        if prop.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let (dev, flags) = props().as_ref().and_then(|m| m.get(&handle).copied()).ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: CUmemAllocationProp is integers, flags and a pointer;
        // zero is "none" for each.
        let mut p: CUmemAllocationProp = unsafe { std::mem::zeroed() };
        p.type_ = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: dev };
        if flags & MEM_SHAREABLE != 0 {
            p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        if flags & MEM_COMPRESSIBLE != 0 {
            p.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC.0 as u8;
        }
        // SAFETY: non-null and writable per the API.
        unsafe { put(prop, p) }
    })
}

/// A sealed memfd holding `bytes`.
pub(super) fn sealed_file(bytes: &[u8; 64]) -> Result<OwnedFd, CuError> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create("pvgpu-shareable", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).map_err(|_| CuError::OUT_OF_MEMORY)?;
    let n = nix::unistd::write(&fd, bytes).map_err(|_| CuError::OUT_OF_MEMORY)?;
    if n != bytes.len() {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_SEAL;
    fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(|_| CuError::OUT_OF_MEMORY)?;
    Ok(fd)
}

/// The 64 bytes the file of shareable handle `os_handle` (a descriptor as
/// a pointer, the program's) holds.
pub(super) fn read_file(os_handle: *mut c_void) -> Result<[u8; 64], CuError> {
    let raw = c_int::try_from(os_handle as usize).map_err(|_| CuError::INVALID_VALUE)?;
    // SAFETY: `raw` is only read through, never closed (ManuallyDrop):
    // borrowed, the program keeps its descriptor.
    let file = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(raw) });
    let mut bytes = [0u8; 64];
    let n = nix::sys::uio::pread(&*file, &mut bytes, 0).map_err(|_| CuError::INVALID_VALUE)?;
    if n != bytes.len() {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(bytes)
}

/// `cuMemExportToShareableHandle` (file descriptors).
///
/// # Safety
/// `out` must be writable as an `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    out: *mut c_void,
    handle: u64,
    kind: CUmemAllocationHandleType,
    flags: u64,
) -> CuResult {
    run("cuMemExportToShareableHandle", || {
        if out.is_null() || flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        if kind != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CuError::NOT_SUPPORTED);
        }
        let bytes = state::client()?.mem_export(PhysMem(handle)).map_err(state::cu)?;
        let fd = sealed_file(&bytes)?;
        // SAFETY: non-null and writable as an int per the API; the
        // descriptor is the program's from now on.
        unsafe { put(out.cast::<c_int>(), std::os::fd::IntoRawFd::into_raw_fd(fd)) }
    })
}

/// `cuMemImportFromShareableHandle` (file descriptors), in the current
/// context (or the first device's primary context).
///
/// # Safety
/// `handle` must be writable; `os_handle` is a descriptor as a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut u64,
    os_handle: *mut c_void,
    kind: CUmemAllocationHandleType,
) -> CuResult {
    run("cuMemImportFromShareableHandle", || {
        if handle.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        if kind != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CuError::NOT_SUPPORTED);
        }
        let bytes = read_file(os_handle)?;
        let h = super::vmm::any_context()?;
        let p = state::client()?.mem_import(ctx::backend(h)?, &bytes).map_err(state::cu)?;
        made(&p, ctx::device_of(h)?);
        // SAFETY: non-null and writable per the API.
        unsafe { put(handle, p.mem.0) }
    })
}
