//! A device's memory and gauges as the backend reports them (for NVML in
//! the guest), in the three forms pvgpu carries them: the wire reply
//! ([`DeviceStatusRep`]), the C structure pvgpu's `libcuda.so.1` fills in
//! for its `libnvidia-ml.so.1` ([`PvgpuDeviceStatus`]: the two libraries
//! are built apart and meet only through this layout), and the value both
//! become ([`DeviceStatus`]). A gauge the backend cannot read is
//! [`UNKNOWN`] in the first two and `None` in the last.

use crate::proto::{DeviceStatusRep, str_from_fixed};
use std::ffi::{c_char, c_int};
use std::mem::{offset_of, size_of};

/// A gauge the backend cannot read.
pub const UNKNOWN: u32 = u32::MAX;

/// The name of pvgpu's own `libcuda.so.1` export that fills in a
/// [`PvgpuDeviceStatus`]; a `libcuda.so.1` without it is not pvgpu's.
pub const DEVICE_STATUS_SYMBOL: &str = "pvgpu_device_status";

/// `CUresult pvgpu_device_status(int dev, PvgpuDeviceStatus *out)`.
pub type DeviceStatusFn = unsafe extern "C" fn(c_int, *mut PvgpuDeviceStatus) -> crate::CuResult;

/// Length of [`PvgpuDeviceStatus::driver_version`], NUL included.
pub const DRIVER_VERSION_LEN: usize = 32;

/// Memory as the session sees it and the device's gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStatus {
    /// Device memory the session may use (the device's, or its quota).
    pub mem_total: u64,
    /// Device memory the session holds.
    pub mem_used: u64,
    /// Percent of the last sample period a kernel ran (device-wide).
    pub gpu_util: Option<u32>,
    /// Percent of it device memory was busy (device-wide).
    pub mem_util: Option<u32>,
    /// Degrees Celsius.
    pub temperature: Option<u32>,
    /// Milliwatts.
    pub power_mw: Option<u32>,
    /// The backend driver's version (`580.159.04`).
    pub driver_version: String,
    /// The device's PCIe link as NVML reports it in the backend.
    pub link: PcieLink,
}

/// A device's PCIe link; each field `None` where the backend cannot read
/// it (no NVML, the host test double).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PcieLink {
    /// Generation the link runs at now.
    pub generation: Option<u32>,
    /// Lanes it runs on now.
    pub width: Option<u32>,
    /// The most the device and its slot allow: generation.
    pub max_gen: Option<u32>,
    /// Lanes.
    pub max_width: Option<u32>,
}

/// pvgpu's libcuda export that answers a device's PCIe link for pvgpu's
/// libnvidia-ml (absent from libcuda builds before it: NVML then answers
/// `NVML_ERROR_NOT_SUPPORTED`).
pub const DEVICE_LINK_SYMBOL: &str = "pvgpu_device_link";

/// `CUresult pvgpu_device_link(int dev, PvgpuDeviceLink *out)`.
pub type DeviceLinkFn = unsafe extern "C" fn(c_int, *mut PvgpuDeviceLink) -> crate::CuResult;

/// What `pvgpu_device_link` writes: [`PcieLink`], `u32::MAX` for unknown.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PvgpuDeviceLink {
    /// Generation now.
    pub generation: u32,
    /// Lanes now.
    pub width: u32,
    /// Most generation.
    pub max_gen: u32,
    /// Most lanes.
    pub max_width: u32,
}

const _: () = assert!(size_of::<PvgpuDeviceLink>() == 16);

impl From<PcieLink> for PvgpuDeviceLink {
    fn from(l: PcieLink) -> Self {
        let v = |x: Option<u32>| x.unwrap_or(UNKNOWN);
        PvgpuDeviceLink { generation: v(l.generation), width: v(l.width), max_gen: v(l.max_gen), max_width: v(l.max_width) }
    }
}

impl From<PvgpuDeviceLink> for PcieLink {
    fn from(l: PvgpuDeviceLink) -> Self {
        PcieLink { generation: known(l.generation), width: known(l.width), max_gen: known(l.max_gen), max_width: known(l.max_width) }
    }
}

/// What `pvgpu_device_status` writes.
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
    /// The backend driver's version, NUL-terminated (unless all 32 bytes
    /// are used).
    pub driver_version: [c_char; DRIVER_VERSION_LEN],
}

// The layout both libraries agree on (x86-64 and aarch64 Linux alike).
const _: () = {
    assert!(size_of::<PvgpuDeviceStatus>() == 64);
    assert!(offset_of!(PvgpuDeviceStatus, mem_used) == 8);
    assert!(offset_of!(PvgpuDeviceStatus, gpu_util) == 16);
    assert!(offset_of!(PvgpuDeviceStatus, mem_util) == 20);
    assert!(offset_of!(PvgpuDeviceStatus, temperature) == 24);
    assert!(offset_of!(PvgpuDeviceStatus, power_mw) == 28);
    assert!(offset_of!(PvgpuDeviceStatus, driver_version) == 32);
};

fn known(v: u32) -> Option<u32> {
    Some(v).filter(|&v| v != UNKNOWN)
}

impl From<&DeviceStatusRep> for DeviceStatus {
    fn from(r: &DeviceStatusRep) -> Self {
        DeviceStatus {
            mem_total: r.mem_total.get(),
            mem_used: r.mem_used.get(),
            gpu_util: known(r.gpu_util.get()),
            mem_util: known(r.mem_util.get()),
            temperature: known(r.temperature.get()),
            power_mw: known(r.power_mw.get()),
            driver_version: str_from_fixed(&r.driver_version),
            link: PcieLink {
                generation: known(r.pcie_gen.get()),
                width: known(r.pcie_width.get()),
                max_gen: known(r.pcie_max_gen.get()),
                max_width: known(r.pcie_max_width.get()),
            },
        }
    }
}

impl From<&PvgpuDeviceStatus> for DeviceStatus {
    fn from(s: &PvgpuDeviceStatus) -> Self {
        let version: Vec<u8> = s.driver_version.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        DeviceStatus {
            mem_total: s.mem_total,
            mem_used: s.mem_used,
            gpu_util: known(s.gpu_util),
            mem_util: known(s.mem_util),
            temperature: known(s.temperature),
            power_mw: known(s.power_mw),
            driver_version: String::from_utf8_lossy(&version).into_owned(),
            link: PcieLink::default(),
        }
    }
}

impl From<&DeviceStatus> for PvgpuDeviceStatus {
    /// The version is cut to 31 bytes and NUL-terminated.
    fn from(s: &DeviceStatus) -> Self {
        let mut driver_version = [0 as c_char; DRIVER_VERSION_LEN];
        for (d, b) in driver_version.iter_mut().zip(s.driver_version.bytes().take(DRIVER_VERSION_LEN - 1)) {
            *d = b as c_char;
        }
        let gauge = |v: Option<u32>| v.unwrap_or(UNKNOWN);
        PvgpuDeviceStatus {
            mem_total: s.mem_total,
            mem_used: s.mem_used,
            gpu_util: gauge(s.gpu_util),
            mem_util: gauge(s.mem_util),
            temperature: gauge(s.temperature),
            power_mw: gauge(s.power_mw),
            driver_version,
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
        assert_eq!(PvgpuDeviceStatus::from(&st), raw, "and back");
        let link = PcieLink { generation: Some(5), width: Some(16), max_gen: None, max_width: Some(16) };
        let raw_link = PvgpuDeviceLink::from(link);
        assert_eq!(raw_link.max_gen, UNKNOWN);
        assert_eq!(PcieLink::from(raw_link), link, "a link and back");
        // Unterminated: all 32 bytes, nothing beyond.
        raw.driver_version = [b'9' as c_char; DRIVER_VERSION_LEN];
        assert_eq!(DeviceStatus::from(&raw).driver_version.len(), DRIVER_VERSION_LEN);
        // Written back, a long version is cut and terminated.
        let long = DeviceStatus { driver_version: "9".repeat(40), ..st };
        assert_eq!(PvgpuDeviceStatus::from(&long).driver_version[DRIVER_VERSION_LEN - 1], 0);
    }
}
