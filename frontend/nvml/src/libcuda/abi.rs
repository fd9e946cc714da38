//! What pvgpu's `libcuda.so.1` exports for this library beyond the CUDA
//! driver API: `pvgpu_device_status` and the structure it fills in, both
//! declared once, in `pvgpu_ring::device_status`, for the two libraries.

pub use pvgpu_ring::device_status::{DEVICE_STATUS_SYMBOL as DEVICE_STATUS, DeviceStatus, DeviceStatusFn, PvgpuDeviceStatus};
