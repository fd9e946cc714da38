//! The structures NVML fills in, laid out as NVIDIA's `nvml.h` (API
//! version 12) declares them; sizes and offsets are checked at compile
//! time.

use std::ffi::c_char;
use std::mem::{offset_of, size_of};

/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE`: `busIdLegacy`.
pub const PCI_BUS_ID_LEGACY_SIZE: usize = 16;
/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE`: `busId`.
pub const PCI_BUS_ID_SIZE: usize = 32;
/// `NVML_VALUE_NOT_AVAILABLE` in an unsigned field: no MIG instance.
pub const NO_INSTANCE: u32 = u32::MAX;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Bytes in all.
    pub total: u64,
    /// Bytes not allocated.
    pub free: u64,
    /// Bytes allocated.
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryV2 {
    /// [`MEMORY_V2`], set by the caller.
    pub version: u32,
    /// Bytes in all.
    pub total: u64,
    /// Bytes the driver or firmware keeps for itself.
    pub reserved: u64,
    /// Bytes not allocated.
    pub free: u64,
    /// Bytes allocated.
    pub used: u64,
}

/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)`, the structure's size
/// with the version in the top byte.
pub const MEMORY_V2: u32 = size_of::<MemoryV2>() as u32 | 2 << 24;

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Utilization {
    /// Percent of the last sample period a kernel ran.
    pub gpu: u32,
    /// Percent of it device memory was read or written.
    pub memory: u32,
}

/// `nvmlPciInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciInfo {
    /// `domain:bus:device.function` with a 4-digit domain, NUL-terminated.
    pub bus_id_legacy: [c_char; PCI_BUS_ID_LEGACY_SIZE],
    /// PCI domain.
    pub domain: u32,
    /// Bus number.
    pub bus: u32,
    /// Device number on the bus.
    pub device: u32,
    /// 16-bit device id (high half) and 16-bit vendor id (low half).
    pub pci_device_id: u32,
    /// 32-bit subsystem id.
    pub pci_sub_system_id: u32,
    /// `domain:bus:device.function` with an 8-digit domain, NUL-terminated.
    pub bus_id: [c_char; PCI_BUS_ID_SIZE],
}

/// `nvmlProcessInfo_v1_t` (`nvmlDeviceGetComputeRunningProcesses`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessInfoV1 {
    /// Process id.
    pub pid: u32,
    /// Device memory it holds.
    pub used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t`, also `nvmlProcessInfo_t` (`_v2` and `_v3` of
/// `nvmlDeviceGetComputeRunningProcesses`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessInfoV2 {
    /// Process id.
    pub pid: u32,
    /// Device memory it holds.
    pub used_gpu_memory: u64,
    /// MIG GPU instance, [`NO_INSTANCE`] without MIG.
    pub gpu_instance_id: u32,
    /// MIG compute instance, [`NO_INSTANCE`] without MIG.
    pub compute_instance_id: u32,
}

/// An entry of a running-process list, in either layout.
pub trait ProcessEntry: Copy {
    /// The entry of process `pid` holding `used` bytes, outside MIG.
    fn new(pid: u32, used: u64) -> Self;
}

impl ProcessEntry for ProcessInfoV1 {
    fn new(pid: u32, used: u64) -> Self {
        ProcessInfoV1 { pid, used_gpu_memory: used }
    }
}

impl ProcessEntry for ProcessInfoV2 {
    fn new(pid: u32, used: u64) -> Self {
        ProcessInfoV2 { pid, used_gpu_memory: used, gpu_instance_id: NO_INSTANCE, compute_instance_id: NO_INSTANCE }
    }
}

// The layouts of nvml.h on x86-64 Linux, as pynvml's ctypes mirrors them.
const _: () = {
    assert!(size_of::<Memory>() == 24);
    assert!(size_of::<MemoryV2>() == 40 && offset_of!(MemoryV2, total) == 8 && offset_of!(MemoryV2, used) == 32);
    assert!(MEMORY_V2 == 0x0200_0028);
    assert!(size_of::<Utilization>() == 8);
    assert!(size_of::<PciInfo>() == 68 && offset_of!(PciInfo, domain) == 16 && offset_of!(PciInfo, bus_id) == 36);
    assert!(size_of::<ProcessInfoV1>() == 16 && offset_of!(ProcessInfoV1, used_gpu_memory) == 8);
    assert!(size_of::<ProcessInfoV2>() == 24 && offset_of!(ProcessInfoV2, compute_instance_id) == 20);
};
