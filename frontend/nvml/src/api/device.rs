//! Devices and what identifies them: the count, handles by index, UUID and
//! PCI bus id, the index of a handle, name, UUID, PCI information and
//! compute capability, all from libcuda's device queries (`cuDeviceGetName`,
//! `cuDeviceGetUuid_v2`, `cuDeviceGetAttribute`), which answer from the
//! properties the backend reported for its GPUs.

use crate::ffi::{get_str, put, put_str, run};
use crate::handle::{self, NvmlDevice};
use crate::ids::{PciAddr, fixed, uuid_string};
use crate::session::{self, Session};
use crate::status::{NvmlError, NvmlReturn, Res};
use crate::types::PciInfo;
use pvgpu_ring::cuda::api::*;
use std::ffi::{c_char, c_int, c_uint};

/// Writes the device count.
///
/// # Safety
/// `count` must be null or writable.
unsafe fn count(count: *mut c_uint) -> Res {
    let s = session::current()?;
    // SAFETY: null or writable (this function's contract).
    unsafe { put(count, s.count()) }
}

/// `nvmlDeviceGetCount_v2`: the backend's devices.
///
/// # Safety
/// `device_count` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlDeviceGetCount_v2", || unsafe { count(device_count) })
}

/// `nvmlDeviceGetCount`: the same as [`nvmlDeviceGetCount_v2`] (every
/// device is accessible).
///
/// # Safety
/// `device_count` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(device_count: *mut c_uint) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlDeviceGetCount", || unsafe { count(device_count) })
}

/// Writes the handle of device `index`.
///
/// # Safety
/// `device` must be null or writable.
unsafe fn by_index(index: c_uint, device: *mut NvmlDevice) -> Res {
    let s = session::current()?;
    if index >= s.count() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    // SAFETY: null or writable (this function's contract).
    unsafe { put(device, handle::handle(index)) }
}

/// `nvmlDeviceGetHandleByIndex_v2`: indices are the backend's device
/// ordinals; `NVML_ERROR_INVALID_ARGUMENT` beyond the count.
///
/// # Safety
/// `device` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut NvmlDevice) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlDeviceGetHandleByIndex_v2", || unsafe { by_index(index, device) })
}

/// `nvmlDeviceGetHandleByIndex`: the same as
/// [`nvmlDeviceGetHandleByIndex_v2`].
///
/// # Safety
/// `device` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut NvmlDevice) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlDeviceGetHandleByIndex", || unsafe { by_index(index, device) })
}

/// The first device of `s` that `matches`, or `NVML_ERROR_NOT_FOUND`.
fn find(s: &Session, matches: impl Fn(u32) -> Res<bool>) -> Res<NvmlDevice> {
    for i in 0..s.count() {
        if matches(i)? {
            return Ok(handle::handle(i));
        }
    }
    Err(NvmlError::NOT_FOUND)
}

/// `nvmlDeviceGetHandleByUUID`: the device whose [`nvmlDeviceGetUUID`]
/// is `uuid` (letters in either case); `NVML_ERROR_NOT_FOUND` if none.
///
/// # Safety
/// `uuid` must be null or NUL-terminated; `device` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut NvmlDevice) -> NvmlReturn {
    run("nvmlDeviceGetHandleByUUID", || {
        let s = session::current()?;
        // SAFETY: null or NUL-terminated (the caller's contract).
        let want = unsafe { get_str(uuid) }?;
        if device.is_null() {
            return Err(NvmlError::INVALID_ARGUMENT);
        }
        let h = find(&s, |i| Ok(uuid_string(&s.uuid(i)?).eq_ignore_ascii_case(want.trim())))?;
        // SAFETY: null or writable (the caller's contract).
        unsafe { put(device, h) }
    })
}

/// The PCI address of device `index`, from the CUDA attributes.
fn pci_addr(s: &Session, index: u32) -> Res<PciAddr> {
    let a = |n| s.attr(index, n).map(|v| v as u32);
    Ok(PciAddr {
        domain: a(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        bus: a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        device: a(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    })
}

/// Writes the handle of the device at PCI bus id `bus_id`.
///
/// # Safety
/// `bus_id` must be null or NUL-terminated; `device` null or writable.
unsafe fn by_pci_bus_id(bus_id: *const c_char, device: *mut NvmlDevice) -> Res {
    let s = session::current()?;
    // SAFETY: null or NUL-terminated (this function's contract).
    let want = PciAddr::parse(unsafe { get_str(bus_id) }?).ok_or(NvmlError::INVALID_ARGUMENT)?;
    if device.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    let h = find(&s, |i| Ok(pci_addr(&s, i)? == want))?;
    // SAFETY: null or writable (this function's contract).
    unsafe { put(device, h) }
}

/// `nvmlDeviceGetHandleByPciBusId_v2`: the device at `pci_bus_id` (the
/// backend's PCI address of the GPU, in any form NVML accepts);
/// `NVML_ERROR_NOT_FOUND` if none.
///
/// # Safety
/// `pci_bus_id` must be null or NUL-terminated; `device` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id: *const c_char, device: *mut NvmlDevice) -> NvmlReturn {
    // SAFETY: the caller's pointers, as documented.
    run("nvmlDeviceGetHandleByPciBusId_v2", || unsafe { by_pci_bus_id(pci_bus_id, device) })
}

/// `nvmlDeviceGetHandleByPciBusId`: the same as
/// [`nvmlDeviceGetHandleByPciBusId_v2`].
///
/// # Safety
/// `pci_bus_id` must be null or NUL-terminated; `device` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(pci_bus_id: *const c_char, device: *mut NvmlDevice) -> NvmlReturn {
    // SAFETY: the caller's pointers, as documented.
    run("nvmlDeviceGetHandleByPciBusId", || unsafe { by_pci_bus_id(pci_bus_id, device) })
}

/// `nvmlDeviceGetIndex`: the index of a handle.
///
/// # Safety
/// `index` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetIndex", || {
        let (_, i) = handle::device(device)?;
        // SAFETY: null or writable (the caller's contract).
        unsafe { put(index, i) }
    })
}

/// `nvmlDeviceGetName`: the GPU's name as the backend's driver reports it.
///
/// # Safety
/// `name` must be null or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(device: NvmlDevice, name: *mut c_char, length: c_uint) -> NvmlReturn {
    run("nvmlDeviceGetName", || {
        let (s, i) = handle::device(device)?;
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(name, length, &s.name(i)?) }
    })
}

/// `nvmlDeviceGetUUID`: `GPU-` and the GPU's UUID, as NVIDIA's library
/// writes it (41 bytes with the NUL).
///
/// # Safety
/// `uuid` must be null or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: NvmlDevice, uuid: *mut c_char, length: c_uint) -> NvmlReturn {
    run("nvmlDeviceGetUUID", || {
        let (s, i) = handle::device(device)?;
        // SAFETY: the caller's buffer of `length` bytes.
        unsafe { put_str(uuid, length, &uuid_string(&s.uuid(i)?)) }
    })
}

/// Fills in the PCI information of `device`.
///
/// # Safety
/// `pci` must be null or writable.
unsafe fn pci_info(device: NvmlDevice, pci: *mut PciInfo) -> Res {
    let (s, i) = handle::device(device)?;
    let addr = pci_addr(&s, i)?;
    let info = PciInfo {
        bus_id_legacy: fixed(&addr.bus_id_legacy()),
        domain: addr.domain,
        bus: addr.bus,
        device: addr.device,
        pci_device_id: s.attr(i, CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID)? as u32,
        pci_sub_system_id: s.attr(i, CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID)? as u32,
        bus_id: fixed(&addr.bus_id()),
    };
    // SAFETY: null or writable (this function's contract).
    unsafe { put(pci, info) }
}

/// `nvmlDeviceGetPciInfo_v3`: the GPU's PCI address on the backend's host,
/// and its device and subsystem ids (0 where the backend's driver does
/// not report them).
///
/// # Safety
/// `pci` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: NvmlDevice, pci: *mut PciInfo) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlDeviceGetPciInfo_v3", || unsafe { pci_info(device, pci) })
}

/// `nvmlDeviceGetPciInfo`: the same as [`nvmlDeviceGetPciInfo_v3`] (one
/// structure layout serves every version).
///
/// # Safety
/// `pci` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(device: NvmlDevice, pci: *mut PciInfo) -> NvmlReturn {
    // SAFETY: null or writable (the caller's contract).
    run("nvmlDeviceGetPciInfo", || unsafe { pci_info(device, pci) })
}

/// `nvmlDeviceGetCudaComputeCapability`: major and minor, from the CUDA
/// attributes.
///
/// # Safety
/// `major` and `minor` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(device: NvmlDevice, major: *mut c_int, minor: *mut c_int) -> NvmlReturn {
    run("nvmlDeviceGetCudaComputeCapability", || {
        let (s, i) = handle::device(device)?;
        if major.is_null() || minor.is_null() {
            return Err(NvmlError::INVALID_ARGUMENT);
        }
        // SAFETY: both non-null and writable (the caller's contract).
        unsafe {
            put(major, s.attr(i, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?)?;
            put(minor, s.attr(i, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?)
        }
    })
}
