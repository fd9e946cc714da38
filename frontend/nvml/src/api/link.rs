//! NVLink and fabric queries. A guest's GPU has no NVLink peers it could
//! reach, so these answer `NVML_ERROR_NOT_SUPPORTED` (the fabric query: a
//! GPU in no fabric), as NVIDIA's library does for a GPU without NVLink. They are exported because PyTorch resolves them
//! (with `nvmlInit_v2`, `nvmlDeviceGetHandleByPciBusId_v2`,
//! `nvmlDeviceGetComputeRunningProcesses` and
//! `nvmlSystemGetCudaDriverVersion_v2`) whenever it finds a
//! `libnvidia-ml.so.1`, and stops if one is missing.

use crate::ffi::run;
use crate::handle::{self, NvmlDevice};
use crate::status::{NvmlError, NvmlReturn, Res};
use crate::types::PciInfo;
use std::ffi::c_uint;

/// `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: c_uint = 18;

/// Checks the arguments as NVIDIA's library does, then refuses.
fn no_link<T>(device: NvmlDevice, link: c_uint, out: *mut T) -> Res {
    handle::device(device)?;
    if link >= MAX_LINKS || out.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    Err(NvmlError::NOT_SUPPORTED)
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`: `NVML_ERROR_NOT_SUPPORTED`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(device: NvmlDevice, link: c_uint, device_type: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetNvLinkRemoteDeviceType", || no_link(device, link, device_type))
}

/// `nvmlDeviceGetNvLinkRemotePciInfo_v2`: `NVML_ERROR_NOT_SUPPORTED`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(device: NvmlDevice, link: c_uint, pci: *mut PciInfo) -> NvmlReturn {
    run("nvmlDeviceGetNvLinkRemotePciInfo_v2", || no_link(device, link, pci))
}

/// `nvmlDeviceGetNvLinkState`: `NVML_ERROR_NOT_SUPPORTED` (XLA counts a
/// device's active NVLinks with it, and stops at that answer).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkState(device: NvmlDevice, link: c_uint, is_active: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetNvLinkState", || no_link(device, link, is_active))
}

/// `nvmlDeviceGetNvLinkCapability`: `NVML_ERROR_NOT_SUPPORTED`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkCapability(device: NvmlDevice, link: c_uint, _cap: c_uint, result: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetNvLinkCapability", || no_link(device, link, result))
}

/// `nvmlGpuFabricInfo_v2`: version 2 of the structure, 36 bytes.
const FABRIC_INFO_V2: c_uint = 0x0200_0024;

/// `nvmlDeviceGetGpuFabricInfoV`: the device is in no NVLink fabric a guest
/// could use, as NVIDIA's library reports a GPU outside one: success, with
/// the state `NVML_GPU_FABRIC_STATE_NOT_SUPPORTED`, no cluster and no
/// clique. XLA asks at start; without the function it logged an error.
///
/// # Safety
/// `info` must be null or point to an `nvmlGpuFabricInfoV_t` whose
/// `version` says its size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(device: NvmlDevice, info: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetGpuFabricInfoV", || {
        handle::device(device)?;
        if info.is_null() {
            return Err(NvmlError::INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the structure starts with its version.
        if unsafe { info.read_unaligned() } != FABRIC_INFO_V2 {
            return Err(NvmlError::ARGUMENT_VERSION_MISMATCH);
        }
        // SAFETY: the caller's structure is 36 bytes (its version says so).
        // Everything after the version is zeroed: the cluster UUID (16
        // bytes), the status (success), the clique, the state (not
        // supported) and the health mask.
        unsafe { std::ptr::write_bytes(info.cast::<u8>().add(4), 0, 32) };
        Ok(())
    })
}

/// `NVML_FI_DEV_NVLINK_LINK_COUNT`.
const FI_NVLINK_LINK_COUNT: c_uint = 91;
/// `NVML_VALUE_TYPE_UNSIGNED_INT`.
const VALUE_UNSIGNED_INT: c_uint = 1;

/// `nvmlFieldValue_t`.
#[repr(C)]
struct FieldValue {
    field_id: c_uint,
    scope_id: c_uint,
    timestamp: i64,
    latency_usec: i64,
    value_type: c_uint,
    nvml_return: c_uint,
    value: u64,
}

const _: () = assert!(std::mem::size_of::<FieldValue>() == 40);

/// `nvmlDeviceGetFieldValues`: the NVLink count is 0 (no link a guest
/// could use; XLA asks it at start); every other field answers
/// `NVML_ERROR_NOT_SUPPORTED` in its own `nvmlReturn`, as NVIDIA's library
/// does for fields a device lacks.
///
/// # Safety
/// `values` must be null or hold `count` writable `nvmlFieldValue_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(device: NvmlDevice, count: std::ffi::c_int, values: *mut std::ffi::c_void) -> NvmlReturn {
    run("nvmlDeviceGetFieldValues", || {
        handle::device(device)?;
        let n = usize::try_from(count).map_err(|_| NvmlError::INVALID_ARGUMENT)?;
        if values.is_null() || n == 0 {
            return Err(NvmlError::INVALID_ARGUMENT);
        }
        let values = values.cast::<FieldValue>();
        for i in 0..n {
            // SAFETY: `count` structures, per the caller; read and written
            // unaligned, whatever the caller's alignment.
            unsafe {
                let p = values.add(i);
                let mut v = p.read_unaligned();
                (v.timestamp, v.latency_usec, v.value) = (0, 0, 0);
                (v.value_type, v.nvml_return) = match v.field_id {
                    FI_NVLINK_LINK_COUNT => (VALUE_UNSIGNED_INT, 0),
                    _ => (0, NvmlError::NOT_SUPPORTED.status().0),
                };
                p.write_unaligned(v);
            }
        }
        Ok(())
    })
}

/// `NVML_DEVICE_MIG_DISABLE`.
const MIG_DISABLE: c_uint = 0;

/// `nvmlDeviceGetMigMode`: disabled, now and pending (a guest's GPU is not
/// partitioned through pvgpu).
///
/// # Safety
/// Each pointer must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(device: NvmlDevice, current: *mut c_uint, pending: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetMigMode", || {
        handle::device(device)?;
        if current.is_null() || pending.is_null() {
            return Err(NvmlError::INVALID_ARGUMENT);
        }
        // SAFETY: non-null and writable (the caller's contract).
        unsafe {
            current.write(MIG_DISABLE);
            pending.write(MIG_DISABLE);
        }
        Ok(())
    })
}
