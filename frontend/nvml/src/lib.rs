//! # pvgpu-nvml
//!
//! A drop-in `libnvidia-ml.so.1` (NVML) for guests served by a pvgpu
//! backend: monitoring tools built on NVML (`pynvml`, `nvidia-ml-py`,
//! gpustat-style scripts) and frameworks that ask NVML about the GPU
//! (PyTorch's `torch.cuda.utilization`, `list_gpu_processes`, its
//! `CUDA_VISIBLE_DEVICES` parsing) find it first on the library path and
//! get their answers from the backend named by `PVGPU_BACKEND`.
//!
//! **NVML shares the program's session.** It holds no connection of its
//! own: `nvmlInit` loads the process's `libcuda.so.1` (pvgpu's drop-in
//! library, the one the program uses) and asks through it ([`libcuda`]:
//! `cuInit`, the `cuDevice*` queries, and pvgpu's `pvgpu_device_status`).
//! A process using both CUDA and NVML (PyTorch) holds one backend session,
//! one of the guest's vgpu devices on Xen; `nvmlShutdown` closes nothing.
//!
//! What the guest sees:
//!
//! - **Devices** are the backend's GPUs, in its CUDA order: name, UUID
//!   (`GPU-...`), PCI address on the backend's host, compute capability.
//! - **Memory is the program's own.** The total is its session's quota
//!   (or the device's memory), used is what the program allocated through
//!   libcuda. Other processes' allocations, other guests' and the host's
//!   are not visible.
//! - **Utilisation, temperature and power are the device's**, whoever
//!   keeps it busy; a gauge the backend cannot read is
//!   `NVML_ERROR_NOT_SUPPORTED`.
//! - **Running processes** are this process alone, with its memory.
//!
//! Only the functions in [`api`] are exported: NVML callers look functions
//! up by name and treat a missing one as "not supported by this NVML".
//! No failure crosses the C boundary as anything but an `nvmlReturn_t`:
//! bodies run under `catch_unwind`. No `libcuda.so.1`, NVIDIA's instead of
//! pvgpu's, or an unreachable backend is `NVML_ERROR_DRIVER_NOT_LOADED` at
//! `nvmlInit`; a backend lost later is `NVML_ERROR_GPU_IS_LOST`. The
//! library is silent unless `PVGPU_LOG` is set (`PVGPU_LOG=info`, or any
//! `tracing` filter).
//!
//! Install it as `libnvidia-ml.so.1` in the same directory as pvgpu's
//! `libcuda.so.1` (it looks there after `LD_LIBRARY_PATH`), never on the
//! backend's library path.

pub mod api;
pub mod ffi;
pub mod handle;
pub mod ids;
pub mod libcuda;
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
