//! NVLink queries. A guest's GPU has no NVLink peers it could reach, so
//! these answer `NVML_ERROR_NOT_SUPPORTED`, as NVIDIA's library does for a
//! GPU without NVLink. They are exported because PyTorch resolves them
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
