//! What pvgpu's `libcuda.so.1` exports for this library beyond the CUDA
//! driver API: `pvgpu_device_status` and the structure it fills in. The
//! two libraries are built apart, so the structure is declared again here,
//! with the layout of `PvgpuDeviceStatus` in `frontend/libcuda`
//! (`src/api/device.rs`), checked at compile time.

use std::ffi::{c_char, c_int};
use std::mem::{offset_of, size_of};

/// The name of pvgpu's own export; a `libcuda.so.1` without it is not
/// pvgpu's.
pub const DEVICE_STATUS: &str = "pvgpu_device_status";

/// `CUresult pvgpu_device_status(int dev, PvgpuDeviceStatus *out)`.
pub type DeviceStatusFn = unsafe extern "C" fn(c_int, *mut PvgpuDeviceStatus) -> pvgpu_ring::CuResult;

/// Length of [`PvgpuDeviceStatus::driver_version`], NUL included.
pub const DRIVER_VERSION_LEN: usize = 32;

/// A gauge the backend cannot read.
pub const UNKNOWN: u32 = u32::MAX;

/// What `pvgpu_device_status` writes: memory as the process's session sees
/// it and the device's gauges ([`UNKNOWN`] when not read).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PvgpuDeviceStatus {
    /// Device memory the session may use (the device's, or its quota).
    pub mem_total: u64,
    /// Device memory the session holds.
    pub mem_used: u64,
    /// Percent of the last sample period a kernel ran (device-wide).
    pub gpu_util: u32,
    /// Percent of it device memory was busy (device-wide).
    pub mem_util: u32,
    /// Degrees Celsius.
    pub temperature: u32,
    /// Milliwatts.
    pub power_mw: u32,
    /// The backend driver's version, NUL-terminated.
    pub driver_version: [c_char; DRIVER_VERSION_LEN],
}

// The layout libcuda writes (x86-64 and aarch64 Linux alike).
const _: () = {
    assert!(size_of::<PvgpuDeviceStatus>() == 64);
    assert!(offset_of!(PvgpuDeviceStatus, mem_used) == 8);
    assert!(offset_of!(PvgpuDeviceStatus, gpu_util) == 16);
    assert!(offset_of!(PvgpuDeviceStatus, mem_util) == 20);
    assert!(offset_of!(PvgpuDeviceStatus, temperature) == 24);
    assert!(offset_of!(PvgpuDeviceStatus, power_mw) == 28);
    assert!(offset_of!(PvgpuDeviceStatus, driver_version) == 32);
};

/// A device's status as the NVML calls use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStatus {
    /// Device memory the session may use.
    pub mem_total: u64,
    /// Device memory the session (the program) holds.
    pub mem_used: u64,
    /// Percent of the last sample period a kernel ran, if read.
    pub gpu_util: Option<u32>,
    /// Percent of it device memory was busy, if read.
    pub mem_util: Option<u32>,
    /// Degrees Celsius, if read.
    pub temperature: Option<u32>,
    /// Milliwatts, if read.
    pub power_mw: Option<u32>,
    /// The backend driver's version (`580.159.04`).
    pub driver_version: String,
}

impl From<&PvgpuDeviceStatus> for DeviceStatus {
    fn from(s: &PvgpuDeviceStatus) -> Self {
        let known = |v: u32| Some(v).filter(|&v| v != UNKNOWN);
        let version: Vec<u8> = s.driver_version.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        DeviceStatus {
            mem_total: s.mem_total,
            mem_used: s.mem_used,
            gpu_util: known(s.gpu_util),
            mem_util: known(s.mem_util),
            temperature: known(s.temperature),
            power_mw: known(s.power_mw),
            driver_version: String::from_utf8_lossy(&version).into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_gauges_and_the_version_are_read() {
        let mut raw = PvgpuDeviceStatus {
            mem_total: 8,
            mem_used: 3,
            gpu_util: 7,
            mem_util: UNKNOWN,
            temperature: 40,
            power_mw: UNKNOWN,
            ..Default::default()
        };
        for (d, b) in raw.driver_version.iter_mut().zip(b"580.159.04") {
            *d = *b as c_char;
        }
        let st = DeviceStatus::from(&raw);
        assert_eq!((st.mem_total, st.mem_used), (8, 3));
        assert_eq!((st.gpu_util, st.mem_util, st.temperature, st.power_mw), (Some(7), None, Some(40), None));
        assert_eq!(st.driver_version, "580.159.04");
        // Unterminated: all 32 bytes, nothing beyond.
        raw.driver_version = [b'9' as c_char; DRIVER_VERSION_LEN];
        assert_eq!(DeviceStatus::from(&raw).driver_version.len(), DRIVER_VERSION_LEN);
    }
}
