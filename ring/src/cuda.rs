//! CUDA driver constants shared by every pvgpu component: status codes
//! (`CUresult`) and device-attribute numbers, with the values of CUDA 13's
//! `cuda.h`. The wire carries these numbers unchanged, so a status the
//! backend's driver returns reaches the guest program as the same `CUresult`.

use core::fmt;

/// A CUDA driver status code (`CUresult`) as carried on the wire. It has the
/// ABI of C's `CUresult` (a 32-bit enum), so the drop-in library returns it
/// directly.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct CuResult(pub u32);

#[allow(missing_docs)]
impl CuResult {
    pub const SUCCESS: Self = Self(0);
    pub const INVALID_VALUE: Self = Self(1);
    pub const OUT_OF_MEMORY: Self = Self(2);
    pub const NOT_INITIALIZED: Self = Self(3);
    pub const DEINITIALIZED: Self = Self(4);
    pub const PROFILER_DISABLED: Self = Self(5);
    pub const PROFILER_NOT_INITIALIZED: Self = Self(6);
    pub const PROFILER_ALREADY_STARTED: Self = Self(7);
    pub const PROFILER_ALREADY_STOPPED: Self = Self(8);
    pub const STUB_LIBRARY: Self = Self(34);
    pub const CALL_REQUIRES_NEWER_DRIVER: Self = Self(36);
    pub const DEVICE_UNAVAILABLE: Self = Self(46);
    pub const NO_DEVICE: Self = Self(100);
    pub const INVALID_DEVICE: Self = Self(101);
    pub const DEVICE_NOT_LICENSED: Self = Self(102);
    pub const INVALID_IMAGE: Self = Self(200);
    pub const INVALID_CONTEXT: Self = Self(201);
    pub const CONTEXT_ALREADY_CURRENT: Self = Self(202);
    pub const MAP_FAILED: Self = Self(205);
    pub const UNMAP_FAILED: Self = Self(206);
    pub const ARRAY_IS_MAPPED: Self = Self(207);
    pub const ALREADY_MAPPED: Self = Self(208);
    pub const NO_BINARY_FOR_GPU: Self = Self(209);
    pub const ALREADY_ACQUIRED: Self = Self(210);
    pub const NOT_MAPPED: Self = Self(211);
    pub const NOT_MAPPED_AS_ARRAY: Self = Self(212);
    pub const NOT_MAPPED_AS_POINTER: Self = Self(213);
    pub const ECC_UNCORRECTABLE: Self = Self(214);
    pub const UNSUPPORTED_LIMIT: Self = Self(215);
    pub const CONTEXT_ALREADY_IN_USE: Self = Self(216);
    pub const PEER_ACCESS_UNSUPPORTED: Self = Self(217);
    pub const INVALID_PTX: Self = Self(218);
    pub const INVALID_GRAPHICS_CONTEXT: Self = Self(219);
    pub const NVLINK_UNCORRECTABLE: Self = Self(220);
    pub const JIT_COMPILER_NOT_FOUND: Self = Self(221);
    pub const UNSUPPORTED_PTX_VERSION: Self = Self(222);
    pub const JIT_COMPILATION_DISABLED: Self = Self(223);
    pub const UNSUPPORTED_EXEC_AFFINITY: Self = Self(224);
    pub const UNSUPPORTED_DEVSIDE_SYNC: Self = Self(225);
    pub const CONTAINED: Self = Self(226);
    pub const INVALID_SOURCE: Self = Self(300);
    pub const FILE_NOT_FOUND: Self = Self(301);
    pub const SHARED_OBJECT_SYMBOL_NOT_FOUND: Self = Self(302);
    pub const SHARED_OBJECT_INIT_FAILED: Self = Self(303);
    pub const OPERATING_SYSTEM: Self = Self(304);
    pub const INVALID_HANDLE: Self = Self(400);
    pub const ILLEGAL_STATE: Self = Self(401);
    pub const LOSSY_QUERY: Self = Self(402);
    pub const NOT_FOUND: Self = Self(500);
    pub const NOT_READY: Self = Self(600);
    pub const ILLEGAL_ADDRESS: Self = Self(700);
    pub const LAUNCH_OUT_OF_RESOURCES: Self = Self(701);
    pub const LAUNCH_TIMEOUT: Self = Self(702);
    pub const LAUNCH_INCOMPATIBLE_TEXTURING: Self = Self(703);
    pub const PEER_ACCESS_ALREADY_ENABLED: Self = Self(704);
    pub const PEER_ACCESS_NOT_ENABLED: Self = Self(705);
    pub const PRIMARY_CONTEXT_ACTIVE: Self = Self(708);
    pub const CONTEXT_IS_DESTROYED: Self = Self(709);
    pub const ASSERT: Self = Self(710);
    pub const TOO_MANY_PEERS: Self = Self(711);
    pub const HOST_MEMORY_ALREADY_REGISTERED: Self = Self(712);
    pub const HOST_MEMORY_NOT_REGISTERED: Self = Self(713);
    pub const HARDWARE_STACK_ERROR: Self = Self(714);
    pub const ILLEGAL_INSTRUCTION: Self = Self(715);
    pub const MISALIGNED_ADDRESS: Self = Self(716);
    pub const INVALID_ADDRESS_SPACE: Self = Self(717);
    pub const INVALID_PC: Self = Self(718);
    pub const LAUNCH_FAILED: Self = Self(719);
    pub const COOPERATIVE_LAUNCH_TOO_LARGE: Self = Self(720);
    pub const TENSOR_MEMORY_LEAK: Self = Self(721);
    pub const NOT_PERMITTED: Self = Self(800);
    pub const NOT_SUPPORTED: Self = Self(801);
    pub const SYSTEM_NOT_READY: Self = Self(802);
    pub const SYSTEM_DRIVER_MISMATCH: Self = Self(803);
    pub const COMPAT_NOT_SUPPORTED_ON_DEVICE: Self = Self(804);
    pub const MPS_CONNECTION_FAILED: Self = Self(805);
    pub const MPS_RPC_FAILURE: Self = Self(806);
    pub const MPS_SERVER_NOT_READY: Self = Self(807);
    pub const MPS_MAX_CLIENTS_REACHED: Self = Self(808);
    pub const MPS_MAX_CONNECTIONS_REACHED: Self = Self(809);
    pub const MPS_CLIENT_TERMINATED: Self = Self(810);
    pub const CDP_NOT_SUPPORTED: Self = Self(811);
    pub const CDP_VERSION_MISMATCH: Self = Self(812);
    pub const STREAM_CAPTURE_UNSUPPORTED: Self = Self(900);
    pub const STREAM_CAPTURE_INVALIDATED: Self = Self(901);
    pub const STREAM_CAPTURE_MERGE: Self = Self(902);
    pub const STREAM_CAPTURE_UNMATCHED: Self = Self(903);
    pub const STREAM_CAPTURE_UNJOINED: Self = Self(904);
    pub const STREAM_CAPTURE_ISOLATION: Self = Self(905);
    pub const STREAM_CAPTURE_IMPLICIT: Self = Self(906);
    pub const CAPTURED_EVENT: Self = Self(907);
    pub const STREAM_CAPTURE_WRONG_THREAD: Self = Self(908);
    pub const TIMEOUT: Self = Self(909);
    pub const GRAPH_EXEC_UPDATE_FAILURE: Self = Self(910);
    pub const EXTERNAL_DEVICE: Self = Self(911);
    pub const INVALID_CLUSTER_SIZE: Self = Self(912);
    pub const FUNCTION_NOT_LOADED: Self = Self(913);
    pub const INVALID_RESOURCE_TYPE: Self = Self(914);
    pub const INVALID_RESOURCE_CONFIGURATION: Self = Self(915);
    pub const KEY_ROTATION: Self = Self(916);
    pub const UNKNOWN: Self = Self(999);

    /// Whether this is `CUDA_SUCCESS`.
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }

    /// `Ok(())` for `CUDA_SUCCESS`, `Err(self)` otherwise.
    pub const fn result(self) -> Result<(), CuResult> {
        if self.is_success() { Ok(()) } else { Err(self) }
    }

    /// The symbolic name, as `cuGetErrorName` returns it, or `None` for a
    /// number CUDA 13 does not define.
    pub fn name(self) -> Option<&'static str> {
        TABLE.iter().find(|(_, v, _)| *v == self.0).map(|(n, _, _)| *n)
    }

    /// A one-line description, as `cuGetErrorString` returns it.
    pub fn description(self) -> Option<&'static str> {
        TABLE.iter().find(|(_, v, _)| *v == self.0).map(|(_, _, d)| *d)
    }
}

impl fmt::Debug for CuResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "CUresult({})", self.0),
        }
    }
}

impl fmt::Display for CuResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.name(), self.description()) {
            (Some(n), Some(d)) => write!(f, "{n}: {d}"),
            _ => write!(f, "CUDA error {}", self.0),
        }
    }
}

impl std::error::Error for CuResult {}

/// (name, value, description) for every `CUresult` of CUDA 13.0; the
/// descriptions are what the 580 driver's `cuGetErrorString` returns.
static TABLE: &[(&str, u32, &str)] = &[
    ("CUDA_SUCCESS", 0, "no error"),
    ("CUDA_ERROR_INVALID_VALUE", 1, "invalid argument"),
    ("CUDA_ERROR_OUT_OF_MEMORY", 2, "out of memory"),
    ("CUDA_ERROR_NOT_INITIALIZED", 3, "initialization error"),
    ("CUDA_ERROR_DEINITIALIZED", 4, "driver shutting down"),
    ("CUDA_ERROR_PROFILER_DISABLED", 5, "profiler disabled while using external profiling tool"),
    ("CUDA_ERROR_PROFILER_NOT_INITIALIZED", 6, "profiler not initialized: call cudaProfilerInitialize()"),
    ("CUDA_ERROR_PROFILER_ALREADY_STARTED", 7, "profiler already started"),
    ("CUDA_ERROR_PROFILER_ALREADY_STOPPED", 8, "profiler already stopped"),
    ("CUDA_ERROR_STUB_LIBRARY", 34, "CUDA driver is a stub library"),
    ("CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", 36, "API call is not supported in the installed CUDA driver"),
    ("CUDA_ERROR_DEVICE_UNAVAILABLE", 46, "CUDA-capable device(s) is/are busy or unavailable"),
    ("CUDA_ERROR_NO_DEVICE", 100, "no CUDA-capable device is detected"),
    ("CUDA_ERROR_INVALID_DEVICE", 101, "invalid device ordinal"),
    ("CUDA_ERROR_DEVICE_NOT_LICENSED", 102, "device doesn't have valid Grid license"),
    ("CUDA_ERROR_INVALID_IMAGE", 200, "device kernel image is invalid"),
    ("CUDA_ERROR_INVALID_CONTEXT", 201, "invalid device context"),
    ("CUDA_ERROR_CONTEXT_ALREADY_CURRENT", 202, "context already current"),
    ("CUDA_ERROR_MAP_FAILED", 205, "mapping of buffer object failed"),
    ("CUDA_ERROR_UNMAP_FAILED", 206, "unmapping of buffer object failed"),
    ("CUDA_ERROR_ARRAY_IS_MAPPED", 207, "array is mapped"),
    ("CUDA_ERROR_ALREADY_MAPPED", 208, "resource already mapped"),
    ("CUDA_ERROR_NO_BINARY_FOR_GPU", 209, "no kernel image is available for execution on the device"),
    ("CUDA_ERROR_ALREADY_ACQUIRED", 210, "resource already acquired"),
    ("CUDA_ERROR_NOT_MAPPED", 211, "resource not mapped"),
    ("CUDA_ERROR_NOT_MAPPED_AS_ARRAY", 212, "resource not mapped as array"),
    ("CUDA_ERROR_NOT_MAPPED_AS_POINTER", 213, "resource not mapped as pointer"),
    ("CUDA_ERROR_ECC_UNCORRECTABLE", 214, "uncorrectable ECC error encountered"),
    ("CUDA_ERROR_UNSUPPORTED_LIMIT", 215, "limit is not supported on this architecture"),
    ("CUDA_ERROR_CONTEXT_ALREADY_IN_USE", 216, "exclusive-thread device already in use by a different thread"),
    ("CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", 217, "peer access is not supported between these two devices"),
    ("CUDA_ERROR_INVALID_PTX", 218, "a PTX JIT compilation failed"),
    ("CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", 219, "invalid OpenGL or DirectX context"),
    ("CUDA_ERROR_NVLINK_UNCORRECTABLE", 220, "uncorrectable NVLink error detected during the execution"),
    ("CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 221, "PTX JIT compiler library not found"),
    ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 222, "the provided PTX was compiled with an unsupported toolchain."),
    ("CUDA_ERROR_JIT_COMPILATION_DISABLED", 223, "PTX JIT compilation was disabled"),
    ("CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", 224, "the provided execution affinity is not supported"),
    ("CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", 225, "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    ("CUDA_ERROR_CONTAINED", 226, "Invalid access of peer GPU memory over nvlink or a hardware error"),
    ("CUDA_ERROR_INVALID_SOURCE", 300, "device kernel image is invalid"),
    ("CUDA_ERROR_FILE_NOT_FOUND", 301, "file not found"),
    ("CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", 302, "shared object symbol not found"),
    ("CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", 303, "shared object initialization failed"),
    ("CUDA_ERROR_OPERATING_SYSTEM", 304, "OS call failed or operation not supported on this OS"),
    ("CUDA_ERROR_INVALID_HANDLE", 400, "invalid resource handle"),
    ("CUDA_ERROR_ILLEGAL_STATE", 401, "the operation cannot be performed in the present state"),
    ("CUDA_ERROR_LOSSY_QUERY", 402, "attempted introspection would be semantically lossy"),
    ("CUDA_ERROR_NOT_FOUND", 500, "named symbol not found"),
    ("CUDA_ERROR_NOT_READY", 600, "device not ready"),
    ("CUDA_ERROR_ILLEGAL_ADDRESS", 700, "an illegal memory access was encountered"),
    ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 701, "too many resources requested for launch"),
    ("CUDA_ERROR_LAUNCH_TIMEOUT", 702, "the launch timed out and was terminated"),
    ("CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", 703, "launch uses incompatible texturing mode"),
    ("CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", 704, "peer access is already enabled"),
    ("CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", 705, "peer access has not been enabled"),
    ("CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", 708, "cannot set while device is active in this process"),
    ("CUDA_ERROR_CONTEXT_IS_DESTROYED", 709, "context is destroyed"),
    ("CUDA_ERROR_ASSERT", 710, "device-side assert triggered"),
    ("CUDA_ERROR_TOO_MANY_PEERS", 711, "peer mapping resources exhausted"),
    ("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", 712, "part or all of the requested memory range is already mapped"),
    ("CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", 713, "pointer does not correspond to a registered memory region"),
    ("CUDA_ERROR_HARDWARE_STACK_ERROR", 714, "hardware stack error"),
    ("CUDA_ERROR_ILLEGAL_INSTRUCTION", 715, "an illegal instruction was encountered"),
    ("CUDA_ERROR_MISALIGNED_ADDRESS", 716, "misaligned address"),
    ("CUDA_ERROR_INVALID_ADDRESS_SPACE", 717, "operation not supported on global/shared address space"),
    ("CUDA_ERROR_INVALID_PC", 718, "invalid program counter"),
    ("CUDA_ERROR_LAUNCH_FAILED", 719, "unspecified launch failure"),
    ("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", 720, "too many blocks in cooperative launch"),
    ("CUDA_ERROR_TENSOR_MEMORY_LEAK", 721, "tensor memory not completely freed"),
    ("CUDA_ERROR_NOT_PERMITTED", 800, "operation not permitted"),
    ("CUDA_ERROR_NOT_SUPPORTED", 801, "operation not supported"),
    ("CUDA_ERROR_SYSTEM_NOT_READY", 802, "system not yet initialized"),
    ("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 803, "system has unsupported display driver / cuda driver combination"),
    ("CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 804, "forward compatibility was attempted on non supported HW"),
    ("CUDA_ERROR_MPS_CONNECTION_FAILED", 805, "MPS client failed to connect to the MPS control daemon or the MPS server"),
    ("CUDA_ERROR_MPS_RPC_FAILURE", 806, "the remote procedural call between the MPS server and the MPS client failed"),
    ("CUDA_ERROR_MPS_SERVER_NOT_READY", 807, "MPS server is not ready to accept new MPS client requests"),
    ("CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", 808, "the hardware resources required to create MPS client have been exhausted"),
    ("CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", 809, "the hardware resources required to support device connections have been exhausted"),
    ("CUDA_ERROR_MPS_CLIENT_TERMINATED", 810, "the MPS client has been terminated by the server"),
    (
        "CUDA_ERROR_CDP_NOT_SUPPORTED",
        811,
        "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it",
    ),
    ("CUDA_ERROR_CDP_VERSION_MISMATCH", 812, "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    ("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", 900, "operation not permitted when stream is capturing"),
    ("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", 901, "operation failed due to a previous error during capture"),
    ("CUDA_ERROR_STREAM_CAPTURE_MERGE", 902, "operation would result in a merge of separate capture sequences"),
    ("CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", 903, "capture was not ended in the same stream as it began"),
    ("CUDA_ERROR_STREAM_CAPTURE_UNJOINED", 904, "capturing stream has unjoined work"),
    ("CUDA_ERROR_STREAM_CAPTURE_ISOLATION", 905, "dependency created on uncaptured work in another stream"),
    ("CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", 906, "operation would make the legacy stream depend on a capturing blocking stream"),
    ("CUDA_ERROR_CAPTURED_EVENT", 907, "operation not permitted on an event last recorded in a capturing stream"),
    ("CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", 908, "attempt to terminate a thread-local capture sequence from another thread"),
    ("CUDA_ERROR_TIMEOUT", 909, "wait operation timed out"),
    (
        "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
        910,
        "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update",
    ),
    ("CUDA_ERROR_EXTERNAL_DEVICE", 911, "an async error has occured in external entity outside of CUDA"),
    ("CUDA_ERROR_INVALID_CLUSTER_SIZE", 912, "a kernel launch error has occurred due to cluster misconfiguration"),
    ("CUDA_ERROR_FUNCTION_NOT_LOADED", 913, "the function handle is not loaded when calling an API that requires a loaded function"),
    ("CUDA_ERROR_INVALID_RESOURCE_TYPE", 914, "one or more resources passed in are not valid resource types for the operation"),
    ("CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", 915, "one or more resources are insufficient or non-applicable for the operation"),
    ("CUDA_ERROR_KEY_ROTATION", 916, "an error happened during the key rotation sequence"),
    ("CUDA_ERROR_UNKNOWN", 999, "unknown error"),
];

/// Device attribute numbers (`CUdevice_attribute`) that pvgpu itself uses.
/// Every attribute number below [`attr::MAX`] is forwarded unchanged.
#[allow(missing_docs)]
pub mod attr {
    pub const MAX_THREADS_PER_BLOCK: i32 = 1;
    pub const MAX_BLOCK_DIM_X: i32 = 2;
    pub const MAX_BLOCK_DIM_Y: i32 = 3;
    pub const MAX_BLOCK_DIM_Z: i32 = 4;
    pub const MAX_GRID_DIM_X: i32 = 5;
    pub const MAX_GRID_DIM_Y: i32 = 6;
    pub const MAX_GRID_DIM_Z: i32 = 7;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: i32 = 8;
    pub const TOTAL_CONSTANT_MEMORY: i32 = 9;
    pub const WARP_SIZE: i32 = 10;
    pub const MAX_PITCH: i32 = 11;
    pub const MAX_REGISTERS_PER_BLOCK: i32 = 12;
    pub const CLOCK_RATE: i32 = 13;
    pub const TEXTURE_ALIGNMENT: i32 = 14;
    pub const MULTIPROCESSOR_COUNT: i32 = 16;
    pub const INTEGRATED: i32 = 18;
    pub const CAN_MAP_HOST_MEMORY: i32 = 19;
    pub const COMPUTE_MODE: i32 = 20;
    pub const CONCURRENT_KERNELS: i32 = 31;
    pub const PCI_BUS_ID: i32 = 33;
    pub const PCI_DEVICE_ID: i32 = 34;
    pub const MEMORY_CLOCK_RATE: i32 = 36;
    pub const GLOBAL_MEMORY_BUS_WIDTH: i32 = 37;
    pub const L2_CACHE_SIZE: i32 = 38;
    pub const MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;
    pub const ASYNC_ENGINE_COUNT: i32 = 40;
    pub const UNIFIED_ADDRESSING: i32 = 41;
    pub const PCI_DOMAIN_ID: i32 = 50;
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub const MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: i32 = 81;
    pub const MAX_REGISTERS_PER_MULTIPROCESSOR: i32 = 82;
    pub const MANAGED_MEMORY: i32 = 83;
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
    pub const MAX_BLOCKS_PER_MULTIPROCESSOR: i32 = 106;
    /// One past the largest attribute number CUDA 13.0 defines.
    pub const MAX: i32 = 148;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_match_cuda_h() {
        assert_eq!(CuResult::SUCCESS.name(), Some("CUDA_SUCCESS"));
        assert_eq!(CuResult::ILLEGAL_ADDRESS.0, 700);
        assert_eq!(CuResult::NOT_SUPPORTED.0, 801);
        assert_eq!(CuResult::DEVICE_UNAVAILABLE.0, 46);
        assert_eq!(CuResult(123_456).name(), None);
        assert_eq!(CuResult::INVALID_HANDLE.description(), Some("invalid resource handle"));
    }
}
