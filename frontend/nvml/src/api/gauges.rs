//! What changes: memory, utilisation, temperature, power and running
//! processes, asked of the backend at each call through libcuda's
//! `pvgpu_device_status`. Memory is the process's session's view, the one
//! session libcuda holds for the program (its quota as the total, the
//! program's own allocations as used); utilisation, temperature and power
//! are the whole device's. A gauge the backend cannot read is
//! `NVML_ERROR_NOT_SUPPORTED`.

use crate::ffi::{put, run};
use crate::handle::{self, NvmlDevice};
use crate::libcuda::DeviceStatus;
use crate::status::{NvmlError, NvmlReturn, Res};
use crate::types::{MEMORY_V2, Memory, MemoryV2, ProcessEntry, ProcessInfoV1, ProcessInfoV2, Utilization};
use std::ffi::c_uint;

/// `NVML_TEMPERATURE_GPU`, the only sensor NVML defines.
const TEMPERATURE_GPU: c_uint = 0;

/// The status of `device`, asked now, once the out-pointer is known to
/// be non-null (checked before the round trip).
fn status<T>(device: NvmlDevice, out: *mut T) -> Res<DeviceStatus> {
    let (s, i) = handle::device(device)?;
    if out.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    s.status(i)
}

/// Total, free and used bytes as the process's session sees them.
fn memory(st: &DeviceStatus) -> Memory {
    let used = st.mem_used.min(st.mem_total);
    Memory { total: st.mem_total, free: st.mem_total - used, used }
}

/// `nvmlDeviceGetMemoryInfo`: the process's memory (the backend's
/// per-session quota, or the device's memory, as the total; what the
/// program allocated through libcuda as used).
///
/// # Safety
/// `mem` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, mem: *mut Memory) -> NvmlReturn {
    run("nvmlDeviceGetMemoryInfo", || {
        let m = memory(&status(device, mem)?);
        // SAFETY: null or writable (the caller's contract).
        unsafe { put(mem, m) }
    })
}

/// `nvmlDeviceGetMemoryInfo_v2`: as [`nvmlDeviceGetMemoryInfo`], with
/// nothing reserved; the caller's `version` must be `nvmlMemory_v2`
/// (`NVML_ERROR_ARGUMENT_VERSION_MISMATCH` otherwise).
///
/// # Safety
/// `mem` must be null or valid for reads and writes of `nvmlMemory_v2_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: NvmlDevice, mem: *mut MemoryV2) -> NvmlReturn {
    run("nvmlDeviceGetMemoryInfo_v2", || {
        let (s, i) = handle::device(device)?;
        if mem.is_null() {
            return Err(NvmlError::INVALID_ARGUMENT);
        }
        // SAFETY: non-null and readable (the caller's contract).
        let version = unsafe { std::ptr::addr_of!((*mem).version).read_unaligned() };
        if version != MEMORY_V2 {
            return Err(NvmlError::ARGUMENT_VERSION_MISMATCH);
        }
        let m = memory(&s.status(i)?);
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { put(mem, MemoryV2 { version, total: m.total, reserved: 0, free: m.free, used: m.used }) }
    })
}

/// `nvmlDeviceGetUtilizationRates`: the device's, over its last sample
/// period (all work on the GPU, not only this guest's).
///
/// # Safety
/// `utilization` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(device: NvmlDevice, utilization: *mut Utilization) -> NvmlReturn {
    run("nvmlDeviceGetUtilizationRates", || {
        let st = status(device, utilization)?;
        let (Some(gpu), Some(memory)) = (st.gpu_util, st.mem_util) else { return Err(NvmlError::NOT_SUPPORTED) };
        // SAFETY: null or writable (the caller's contract).
        unsafe { put(utilization, Utilization { gpu, memory }) }
    })
}

/// `nvmlDeviceGetTemperature`: the GPU die's temperature in degrees
/// Celsius (`NVML_TEMPERATURE_GPU`, the only sensor).
///
/// # Safety
/// `temp` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(device: NvmlDevice, sensor: c_uint, temp: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetTemperature", || {
        handle::device(device)?;
        if sensor != TEMPERATURE_GPU {
            return Err(NvmlError::INVALID_ARGUMENT);
        }
        let st = status(device, temp)?;
        // SAFETY: null or writable (the caller's contract).
        unsafe { put(temp, st.temperature.ok_or(NvmlError::NOT_SUPPORTED)?) }
    })
}

/// `nvmlDeviceGetPowerUsage`: the whole board's draw in milliwatts.
///
/// # Safety
/// `power` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: NvmlDevice, power: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetPowerUsage", || {
        let st = status(device, power)?;
        // SAFETY: null or writable (the caller's contract).
        unsafe { put(power, st.power_mw.ok_or(NvmlError::NOT_SUPPORTED)?) }
    })
}

/// Fills in the running compute processes the guest can see: this process,
/// with the device memory it holds (its session's, shared with libcuda).
/// Other processes, other guests' and the host's are not visible.
///
/// With `*count` smaller than the list (0 to ask its length), writes the
/// length to `*count` and returns `NVML_ERROR_INSUFFICIENT_SIZE`.
///
/// # Safety
/// `count` must be null or valid for reads and writes; `infos` null or
/// writable for `*count` entries.
unsafe fn processes<T: ProcessEntry>(device: NvmlDevice, count: *mut c_uint, infos: *mut T) -> Res {
    let st = status(device, count)?;
    let list = [T::new(std::process::id(), st.mem_used)];
    // SAFETY: non-null, readable and writable (this function's contract).
    let room = unsafe { count.read_unaligned() } as usize;
    // SAFETY: as above.
    unsafe { count.write_unaligned(list.len() as c_uint) };
    if room < list.len() {
        return Err(NvmlError::INSUFFICIENT_SIZE);
    }
    if infos.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    for (i, entry) in list.iter().enumerate() {
        // SAFETY: `i < list.len() <= *count`, the entries `infos` holds.
        unsafe { infos.add(i).write_unaligned(*entry) };
    }
    Ok(())
}

/// `nvmlDeviceGetComputeRunningProcesses_v3`: see [`processes`].
///
/// # Safety
/// `info_count` must be null or valid for reads and writes; `infos` null
/// or writable for `*info_count` `nvmlProcessInfo_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    info_count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> NvmlReturn {
    // SAFETY: the caller's pointers, as documented.
    run("nvmlDeviceGetComputeRunningProcesses_v3", || unsafe { processes(device, info_count, infos) })
}

/// `nvmlDeviceGetComputeRunningProcesses_v2`: the same entries as `_v3`.
///
/// # Safety
/// As for [`nvmlDeviceGetComputeRunningProcesses_v3`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: NvmlDevice,
    info_count: *mut c_uint,
    infos: *mut ProcessInfoV2,
) -> NvmlReturn {
    // SAFETY: the caller's pointers, as documented.
    run("nvmlDeviceGetComputeRunningProcesses_v2", || unsafe { processes(device, info_count, infos) })
}

/// `nvmlDeviceGetComputeRunningProcesses`: the NVML 2 form, with the
/// shorter `nvmlProcessInfo_v1_t` (PyTorch resolves this one).
///
/// # Safety
/// `info_count` must be null or valid for reads and writes; `infos` null
/// or writable for `*info_count` `nvmlProcessInfo_v1_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: NvmlDevice,
    info_count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> NvmlReturn {
    // SAFETY: the caller's pointers, as documented.
    run("nvmlDeviceGetComputeRunningProcesses", || unsafe { processes(device, info_count, infos) })
}

/// One figure of a device's PCIe link, `NVML_ERROR_NOT_SUPPORTED` where
/// the backend cannot read it (the host test double, a backend without
/// NVML).
fn link(device: NvmlDevice, out: *mut c_uint, pick: fn(&crate::libcuda::abi::PcieLink) -> Option<u32>) -> Res {
    let (s, i) = handle::device(device)?;
    if out.is_null() {
        return Err(NvmlError::INVALID_ARGUMENT);
    }
    let v = pick(&s.link(i)?).ok_or(NvmlError::NOT_SUPPORTED)?;
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { put(out, v) }
}

/// `nvmlDeviceGetCurrPcieLinkGeneration`: the generation the link runs at
/// now (XLA reads it to estimate host transfers).
///
/// # Safety
/// `out` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(device: NvmlDevice, out: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetCurrPcieLinkGeneration", || link(device, out, |l| l.generation))
}

/// `nvmlDeviceGetCurrPcieLinkWidth`: the lanes it runs on now.
///
/// # Safety
/// `out` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(device: NvmlDevice, out: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetCurrPcieLinkWidth", || link(device, out, |l| l.width))
}

/// `nvmlDeviceGetMaxPcieLinkGeneration`: the most the device and its slot
/// allow.
///
/// # Safety
/// `out` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(device: NvmlDevice, out: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetMaxPcieLinkGeneration", || link(device, out, |l| l.max_gen))
}

/// `nvmlDeviceGetMaxPcieLinkWidth`: the most lanes.
///
/// # Safety
/// `out` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(device: NvmlDevice, out: *mut c_uint) -> NvmlReturn {
    run("nvmlDeviceGetMaxPcieLinkWidth", || link(device, out, |l| l.max_width))
}
