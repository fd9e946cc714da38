//! Devices: answered from the properties cached at the first query.

use crate::state::{self, Res, put, run};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::cuda::api::{CUdevice_attribute, CUdevprop, CUexecAffinityType, CUuuid};
use pvgpu_ring::device_status::{PvgpuDeviceLink, PvgpuDeviceStatus};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_char, c_int};

fn props(dev: c_int) -> Result<std::sync::Arc<pvgpu_frontend::DeviceProps>, CuError> {
    let (c, local) = state::device(dev)?;
    c.device_props(local).map_err(state::cu)
}

use state::device_attribute as attribute;

/// `cuDeviceGet`.
///
/// # Safety
/// `device` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> CuResult {
    run("cuDeviceGet", || {
        // CUDA_VISIBLE_DEVICES: the program's ordinal names one of the
        // backends' devices.
        let d = crate::visible::backend_ordinal(ordinal).ok_or(CuError::INVALID_DEVICE)?;
        let (c, local) = state::device(d)?;
        c.device_get(local).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(device, d) }
    })
}

/// `cuDeviceGetCount`.
///
/// # Safety
/// `count` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    run("cuDeviceGetCount", || {
        state::client()?;
        let n = state::backends::device_count();
        // SAFETY: writable per the API.
        unsafe { put(count, crate::visible::count(n)) }
    })
}

/// `cuDeviceGetName`.
///
/// # Safety
/// `name` must be writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CuResult {
    run("cuDeviceGetName", || {
        if name.is_null() || len <= 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let p = props(dev)?;
        let bytes = p.name.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: the caller provides `len` writable bytes; we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast(), n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

fn uuid(out: *mut CUuuid, dev: c_int) -> Res {
    let u = props(dev)?.uuid;
    // SAFETY: writable per the API.
    unsafe { put(out, CUuuid { bytes: u.map(|b| b as c_char) }) }
}

/// `cuDeviceGetUuid`.
///
/// # Safety
/// `out` must be writable for 16 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(out: *mut CUuuid, dev: c_int) -> CuResult {
    run("cuDeviceGetUuid", || uuid(out, dev))
}

/// `cuDeviceGetUuid_v2`.
///
/// # Safety
/// `out` must be writable for 16 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(out: *mut CUuuid, dev: c_int) -> CuResult {
    run("cuDeviceGetUuid_v2", || uuid(out, dev))
}

/// `cuDeviceTotalMem_v2`.
///
/// # Safety
/// `bytes` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CuResult {
    run("cuDeviceTotalMem_v2", || {
        let t = props(dev)?.total_mem as usize;
        // SAFETY: writable per the API.
        unsafe { put(bytes, t) }
    })
}

/// `cuDeviceGetAttribute`, from the cache.
///
/// # Safety
/// `pi` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(pi: *mut c_int, attrib: CUdevice_attribute, dev: c_int) -> CuResult {
    run("cuDeviceGetAttribute", || {
        let v = attribute(dev, attrib)?;
        // SAFETY: writable per the API.
        unsafe { put(pi, v) }
    })
}

/// `cuDeviceComputeCapability` (deprecated, still used).
///
/// # Safety
/// `major` and `minor` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: c_int) -> CuResult {
    run("cuDeviceComputeCapability", || {
        let ma = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let mi = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        // SAFETY: writable per the API.
        unsafe {
            put(major, ma)?;
            put(minor, mi)
        }
    })
}

/// `cuDeviceGetProperties` (deprecated, still used).
///
/// # Safety
/// `prop` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetProperties(prop: *mut CUdevprop, dev: c_int) -> CuResult {
    run("cuDeviceGetProperties", || {
        let a = |k: CUdevice_attribute| attribute(dev, k);
        let p = CUdevprop {
            maxThreadsPerBlock: a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            maxThreadsDim: [
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            maxGridSize: [
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            sharedMemPerBlock: a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            totalConstantMemory: a(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY)?,
            SIMDWidth: a(CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
            memPitch: a(CU_DEVICE_ATTRIBUTE_MAX_PITCH)?,
            regsPerBlock: a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
            clockRate: a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
            textureAlign: a(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT)?,
        };
        // SAFETY: writable per the API.
        unsafe { put(prop, p) }
    })
}

fn bus_id(dev: c_int) -> Result<String, CuError> {
    let a = |k: CUdevice_attribute| attribute(dev, k);
    Ok(format!(
        "{:08X}:{:02X}:{:02X}.0",
        a(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        a(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
    ))
}

/// `cuDeviceGetPCIBusId`: the backend GPU's bus id.
///
/// # Safety
/// `pci_bus_id` must be writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(pci_bus_id: *mut c_char, len: c_int, dev: c_int) -> CuResult {
    run("cuDeviceGetPCIBusId", || {
        if pci_bus_id.is_null() || len <= 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let s = bus_id(dev)?;
        let n = s.len().min(len as usize - 1);
        // SAFETY: the caller provides `len` writable bytes; we write n + 1.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), pci_bus_id.cast(), n);
            pci_bus_id.add(n).write(0);
        }
        Ok(())
    })
}

/// `cuDeviceGetByPCIBusId`.
///
/// # Safety
/// `dev` must be writable and `pci_bus_id` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(dev: *mut c_int, pci_bus_id: *const c_char) -> CuResult {
    run("cuDeviceGetByPCIBusId", || {
        // SAFETY: NUL-terminated per the API.
        let want = unsafe { state::name(pci_bus_id) }?.to_ascii_uppercase();
        state::client()?;
        for d in (0..state::backends::device_count()).filter(|d| crate::visible::sees(*d)) {
            let id = bus_id(d)?;
            if id == want || id.ends_with(&want) {
                // SAFETY: writable per the API.
                return unsafe { put(dev, d) };
            }
        }
        Err(CuError::INVALID_DEVICE)
    })
}

/// `cuDeviceCanAccessPeer`: as the backend's driver answers for its
/// devices; devices of two backends cannot reach each other's memory.
///
/// # Safety
/// `can_access` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can_access: *mut c_int, dev: c_int, peer: c_int) -> CuResult {
    run("cuDeviceCanAccessPeer", || {
        if can_access.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let ((c, d), (pc, p)) = (state::device(dev)?, state::device(peer)?);
        let can = std::ptr::eq(c, pc) && c.can_access_peer(d, p).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(can_access, c_int::from(can)) }
    })
}

/// `cuDeviceGetP2PAttribute`.
///
/// # Safety
/// `value` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetP2PAttribute(value: *mut c_int, attr: CUdevice_P2PAttribute, src: c_int, dst: c_int) -> CuResult {
    run("cuDeviceGetP2PAttribute", || {
        if value.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let ((c, s), (dc, d)) = (state::device(src)?, state::device(dst)?);
        // Devices of two backends: no peer link, so every attribute is 0
        // (as the driver answers for devices without one).
        let v = if std::ptr::eq(c, dc) { c.p2p_attribute(attr.0, s, d).map_err(state::cu)? } else { 0 };
        // SAFETY: writable per the API.
        unsafe { put(value, v) }
    })
}

/// `cuDeviceGetCount`-style flag query kept for completeness:
/// `cuDeviceGetExecAffinitySupport` answers "not supported" (0).
///
/// # Safety
/// `pi` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetExecAffinitySupport(pi: *mut c_int, _kind: CUexecAffinityType, dev: c_int) -> CuResult {
    run("cuDeviceGetExecAffinitySupport", || {
        props(dev)?;
        // SAFETY: writable per the API.
        unsafe { put(pi, 0) }
    })
}

/// pvgpu's own entry point ([`pvgpu_ring::device_status::DEVICE_STATUS_SYMBOL`]): the memory and
/// gauges of device `dev` (connecting to the backend if this process has
/// not yet). pvgpu's `libnvidia-ml.so.1` calls it, so that NVML in the
/// guest shares this library's session (one per process) and reports the
/// program's own memory.
///
/// # Safety
/// `out` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvgpu_device_status(dev: c_int, out: *mut PvgpuDeviceStatus) -> CuResult {
    run("pvgpu_device_status", || {
        let clients = state::connect()?;
        // Before `cuInit` numbered the backends' devices: the first's.
        let first = clients.first().ok_or(CuError::NO_DEVICE)?;
        let (c, local) = state::backends::on_device(dev).unwrap_or((first, dev));
        let s = c.device_status(local).map_err(state::cu)?;
        // SAFETY: null is refused; otherwise writable, per the caller.
        unsafe { put(out, PvgpuDeviceStatus::from(&s)) }
    })
}

/// pvgpu's own entry point ([`pvgpu_ring::device_status::DEVICE_LINK_SYMBOL`]):
/// the PCIe link of device `dev` as the backend's NVML reads it, for
/// pvgpu's `libnvidia-ml.so.1` (`nvmlDeviceGetCurrPcieLinkGeneration` and
/// the like).
///
/// # Safety
/// `out` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvgpu_device_link(dev: c_int, out: *mut PvgpuDeviceLink) -> CuResult {
    run("pvgpu_device_link", || {
        let clients = state::connect()?;
        let first = clients.first().ok_or(CuError::NO_DEVICE)?;
        let (c, local) = state::backends::on_device(dev).unwrap_or((first, dev));
        let s = c.device_status(local).map_err(state::cu)?;
        // SAFETY: null is refused; otherwise writable, per the caller.
        unsafe { put(out, PvgpuDeviceLink::from(s.link)) }
    })
}
