//! # pvgpu-nvml
//!
//! A drop-in `libnvidia-ml.so.1` (NVML) for guests served by a pvgpu
//! backend: monitoring tools built on NVML (`pynvml`, `nvidia-ml-py`,
//! gpustat-style scripts) and frameworks that ask NVML about the GPU
//! (PyTorch's `torch.cuda.utilization`, `list_gpu_processes`, its
//! `CUDA_VISIBLE_DEVICES` parsing) find it first on the library path and
//! get their answers from the backend named by `PVGPU_BACKEND`.
//!
//! What the guest sees:
//!
//! - **Devices** are the backend's GPUs, in its CUDA order: name, UUID
//!   (`GPU-...`), PCI address on the backend's host, compute capability.
//! - **Memory is the session's own.** `nvmlInit` opens a session of its
//!   own with the backend; the total is that session's quota (or the
//!   device's memory), used is what the session holds. Other guests'
//!   allocations, and the host's, are not visible.
//! - **Utilisation, temperature and power are the device's**, whoever
//!   keeps it busy; a gauge the backend cannot read is
//!   `NVML_ERROR_NOT_SUPPORTED`.
//! - **Running processes** are this process alone, with its session's
//!   memory.
//!
//! Only the functions in [`api`] are exported: NVML callers look functions
//! up by name and treat a missing one as "not supported by this NVML".
//! No failure crosses the C boundary as anything but an `nvmlReturn_t`:
//! bodies run under `catch_unwind`. An unreachable backend is
//! `NVML_ERROR_DRIVER_NOT_LOADED` at `nvmlInit`; a backend lost later is
//! `NVML_ERROR_GPU_IS_LOST`. The library is silent unless `PVGPU_LOG` is
//! set (`PVGPU_LOG=info`, or any `tracing` filter).
//!
//! Install it as `libnvidia-ml.so.1` beside the drop-in `libcuda.so.1`,
//! never on the backend's library path.

pub mod api;
pub mod ffi;
pub mod handle;
pub mod ids;
pub mod session;
pub mod status;
pub mod types;

pub use api::device::*;
pub use api::gauges::*;
pub use api::link::*;
pub use api::system::*;
pub use status::{NvmlError, NvmlReturn};

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{CStr, c_uint};

    #[test]
    fn answers_without_a_session() {
        // SAFETY: nvmlErrorString returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(nvmlErrorString(NvmlReturn::NOT_SUPPORTED)) };
        assert_eq!(text, c"Not Supported");
        assert_eq!(nvmlShutdown(), NvmlReturn::UNINITIALIZED);
        let mut n: c_uint = 7;
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { nvmlDeviceGetCount_v2(&mut n) }, NvmlReturn::UNINITIALIZED);
        assert_eq!(n, 7, "nothing written");
        let mut buf = [0; 80];
        // SAFETY: an 80-byte buffer.
        assert_eq!(unsafe { nvmlSystemGetNVMLVersion(buf.as_mut_ptr(), 80) }, NvmlReturn::SUCCESS);
        // SAFETY: written NUL-terminated.
        assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }, c"12");
        let mut dev = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { nvmlDeviceGetHandleByIndex_v2(0, &mut dev) }, NvmlReturn::UNINITIALIZED);
        let mut temp = 0;
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { nvmlDeviceGetTemperature(handle::handle(0), 0, &mut temp) }, NvmlReturn::UNINITIALIZED);
    }
}
