//! What pvgpu's `libcuda.so.1` exports for this library beyond the CUDA
//! driver API: `pvgpu_device_status`, `pvgpu_device_link` and the
//! structures they fill in, all
//! declared once, in `pvgpu_ring::device_status`, for the two libraries.

pub use pvgpu_ring::device_status::{
    DEVICE_LINK_SYMBOL as DEVICE_LINK, DEVICE_STATUS_SYMBOL as DEVICE_STATUS, DeviceLinkFn, DeviceStatus, DeviceStatusFn, PcieLink,
    PvgpuDeviceLink, PvgpuDeviceStatus,
};
