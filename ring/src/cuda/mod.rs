//! CUDA driver constants shared by every pvgpu component: status codes
//! (`CUresult`) and device-attribute numbers, with the values of CUDA 13's
//! `cuda.h`. The wire carries these numbers unchanged, so a status the
//! backend's driver returns reaches the guest program as the same `CUresult`.

pub mod api;

use core::fmt;
use core::num::NonZeroU32;

macro_rules! codes {
    ($( $name:ident = $val:literal, $desc:literal; )*) => {
        #[allow(missing_docs)]
        impl CuResult {
            pub const SUCCESS: Self = Self(0);
            $( pub const $name: Self = Self($val); )*
        }

        #[allow(missing_docs)]
        impl CuError {
            $( pub const $name: Self = Self(NonZeroU32::new($val).unwrap()); )*
        }

        /// (name, value, description) for every `CUresult` of CUDA 13.0; the
        /// descriptions are what the 580 driver's `cuGetErrorString` returns.
        static TABLE: &[(&str, u32, &str)] = &[
            ("CUDA_SUCCESS", 0, "no error"),
            $( (concat!("CUDA_ERROR_", stringify!($name)), $val, $desc), )*
        ];
    };
}

/// A CUDA driver status code (`CUresult`) as carried on the wire. It has the
/// ABI of C's `CUresult` (a 32-bit enum), so the drop-in library returns it
/// directly. A failure on the Rust side is a [`CuError`], which cannot hold
/// `CUDA_SUCCESS`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct CuResult(pub u32);

/// A CUDA status other than `CUDA_SUCCESS`: the error of every fallible
/// CUDA operation in pvgpu (`Result<T, CuError>`). `Option<CuError>` and
/// `Result<(), CuError>` have the size of a `u32`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct CuError(NonZeroU32);

codes! {
    INVALID_VALUE = 1, "invalid argument";
    OUT_OF_MEMORY = 2, "out of memory";
    NOT_INITIALIZED = 3, "initialization error";
    DEINITIALIZED = 4, "driver shutting down";
    PROFILER_DISABLED = 5, "profiler disabled while using external profiling tool";
    PROFILER_NOT_INITIALIZED = 6, "profiler not initialized: call cudaProfilerInitialize()";
    PROFILER_ALREADY_STARTED = 7, "profiler already started";
    PROFILER_ALREADY_STOPPED = 8, "profiler already stopped";
    STUB_LIBRARY = 34, "CUDA driver is a stub library";
    CALL_REQUIRES_NEWER_DRIVER = 36, "API call is not supported in the installed CUDA driver";
    DEVICE_UNAVAILABLE = 46, "CUDA-capable device(s) is/are busy or unavailable";
    NO_DEVICE = 100, "no CUDA-capable device is detected";
    INVALID_DEVICE = 101, "invalid device ordinal";
    DEVICE_NOT_LICENSED = 102, "device doesn't have valid Grid license";
    INVALID_IMAGE = 200, "device kernel image is invalid";
    INVALID_CONTEXT = 201, "invalid device context";
    CONTEXT_ALREADY_CURRENT = 202, "context already current";
    MAP_FAILED = 205, "mapping of buffer object failed";
    UNMAP_FAILED = 206, "unmapping of buffer object failed";
    ARRAY_IS_MAPPED = 207, "array is mapped";
    ALREADY_MAPPED = 208, "resource already mapped";
    NO_BINARY_FOR_GPU = 209, "no kernel image is available for execution on the device";
    ALREADY_ACQUIRED = 210, "resource already acquired";
    NOT_MAPPED = 211, "resource not mapped";
    NOT_MAPPED_AS_ARRAY = 212, "resource not mapped as array";
    NOT_MAPPED_AS_POINTER = 213, "resource not mapped as pointer";
    ECC_UNCORRECTABLE = 214, "uncorrectable ECC error encountered";
    UNSUPPORTED_LIMIT = 215, "limit is not supported on this architecture";
    CONTEXT_ALREADY_IN_USE = 216, "exclusive-thread device already in use by a different thread";
    PEER_ACCESS_UNSUPPORTED = 217, "peer access is not supported between these two devices";
    INVALID_PTX = 218, "a PTX JIT compilation failed";
    INVALID_GRAPHICS_CONTEXT = 219, "invalid OpenGL or DirectX context";
    NVLINK_UNCORRECTABLE = 220, "uncorrectable NVLink error detected during the execution";
    JIT_COMPILER_NOT_FOUND = 221, "PTX JIT compiler library not found";
    UNSUPPORTED_PTX_VERSION = 222, "the provided PTX was compiled with an unsupported toolchain.";
    JIT_COMPILATION_DISABLED = 223, "PTX JIT compilation was disabled";
    UNSUPPORTED_EXEC_AFFINITY = 224, "the provided execution affinity is not supported";
    UNSUPPORTED_DEVSIDE_SYNC = 225, "the provided PTX contains unsupported call to cudaDeviceSynchronize";
    CONTAINED = 226, "Invalid access of peer GPU memory over nvlink or a hardware error";
    INVALID_SOURCE = 300, "device kernel image is invalid";
    FILE_NOT_FOUND = 301, "file not found";
    SHARED_OBJECT_SYMBOL_NOT_FOUND = 302, "shared object symbol not found";
    SHARED_OBJECT_INIT_FAILED = 303, "shared object initialization failed";
    OPERATING_SYSTEM = 304, "OS call failed or operation not supported on this OS";
    INVALID_HANDLE = 400, "invalid resource handle";
    ILLEGAL_STATE = 401, "the operation cannot be performed in the present state";
    LOSSY_QUERY = 402, "attempted introspection would be semantically lossy";
    NOT_FOUND = 500, "named symbol not found";
    NOT_READY = 600, "device not ready";
    ILLEGAL_ADDRESS = 700, "an illegal memory access was encountered";
    LAUNCH_OUT_OF_RESOURCES = 701, "too many resources requested for launch";
    LAUNCH_TIMEOUT = 702, "the launch timed out and was terminated";
    LAUNCH_INCOMPATIBLE_TEXTURING = 703, "launch uses incompatible texturing mode";
    PEER_ACCESS_ALREADY_ENABLED = 704, "peer access is already enabled";
    PEER_ACCESS_NOT_ENABLED = 705, "peer access has not been enabled";
    PRIMARY_CONTEXT_ACTIVE = 708, "cannot set while device is active in this process";
    CONTEXT_IS_DESTROYED = 709, "context is destroyed";
    ASSERT = 710, "device-side assert triggered";
    TOO_MANY_PEERS = 711, "peer mapping resources exhausted";
    HOST_MEMORY_ALREADY_REGISTERED = 712, "part or all of the requested memory range is already mapped";
    HOST_MEMORY_NOT_REGISTERED = 713, "pointer does not correspond to a registered memory region";
    HARDWARE_STACK_ERROR = 714, "hardware stack error";
    ILLEGAL_INSTRUCTION = 715, "an illegal instruction was encountered";
    MISALIGNED_ADDRESS = 716, "misaligned address";
    INVALID_ADDRESS_SPACE = 717, "operation not supported on global/shared address space";
    INVALID_PC = 718, "invalid program counter";
    LAUNCH_FAILED = 719, "unspecified launch failure";
    COOPERATIVE_LAUNCH_TOO_LARGE = 720, "too many blocks in cooperative launch";
    TENSOR_MEMORY_LEAK = 721, "tensor memory not completely freed";
    NOT_PERMITTED = 800, "operation not permitted";
    NOT_SUPPORTED = 801, "operation not supported";
    SYSTEM_NOT_READY = 802, "system not yet initialized";
    SYSTEM_DRIVER_MISMATCH = 803, "system has unsupported display driver / cuda driver combination";
    COMPAT_NOT_SUPPORTED_ON_DEVICE = 804, "forward compatibility was attempted on non supported HW";
    MPS_CONNECTION_FAILED = 805, "MPS client failed to connect to the MPS control daemon or the MPS server";
    MPS_RPC_FAILURE = 806, "the remote procedural call between the MPS server and the MPS client failed";
    MPS_SERVER_NOT_READY = 807, "MPS server is not ready to accept new MPS client requests";
    MPS_MAX_CLIENTS_REACHED = 808, "the hardware resources required to create MPS client have been exhausted";
    MPS_MAX_CONNECTIONS_REACHED = 809, "the hardware resources required to support device connections have been exhausted";
    MPS_CLIENT_TERMINATED = 810, "the MPS client has been terminated by the server";
    CDP_NOT_SUPPORTED = 811, "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it";
    CDP_VERSION_MISMATCH = 812, "unsupported interaction between different versions of CUDA Dynamic Parallelism";
    STREAM_CAPTURE_UNSUPPORTED = 900, "operation not permitted when stream is capturing";
    STREAM_CAPTURE_INVALIDATED = 901, "operation failed due to a previous error during capture";
    STREAM_CAPTURE_MERGE = 902, "operation would result in a merge of separate capture sequences";
    STREAM_CAPTURE_UNMATCHED = 903, "capture was not ended in the same stream as it began";
    STREAM_CAPTURE_UNJOINED = 904, "capturing stream has unjoined work";
    STREAM_CAPTURE_ISOLATION = 905, "dependency created on uncaptured work in another stream";
    STREAM_CAPTURE_IMPLICIT = 906, "operation would make the legacy stream depend on a capturing blocking stream";
    CAPTURED_EVENT = 907, "operation not permitted on an event last recorded in a capturing stream";
    STREAM_CAPTURE_WRONG_THREAD = 908, "attempt to terminate a thread-local capture sequence from another thread";
    TIMEOUT = 909, "wait operation timed out";
    GRAPH_EXEC_UPDATE_FAILURE = 910, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    EXTERNAL_DEVICE = 911, "an async error has occured in external entity outside of CUDA";
    INVALID_CLUSTER_SIZE = 912, "a kernel launch error has occurred due to cluster misconfiguration";
    FUNCTION_NOT_LOADED = 913, "the function handle is not loaded when calling an API that requires a loaded function";
    INVALID_RESOURCE_TYPE = 914, "one or more resources passed in are not valid resource types for the operation";
    INVALID_RESOURCE_CONFIGURATION = 915, "one or more resources are insufficient or non-applicable for the operation";
    KEY_ROTATION = 916, "an error happened during the key rotation sequence";
    UNKNOWN = 999, "unknown error";
}

impl CuResult {
    /// Whether this is `CUDA_SUCCESS`.
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }

    /// `Ok(())` for `CUDA_SUCCESS`, the error otherwise.
    pub const fn result(self) -> Result<(), CuError> {
        match NonZeroU32::new(self.0) {
            None => Ok(()),
            Some(e) => Err(CuError(e)),
        }
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

impl From<CuError> for CuResult {
    fn from(e: CuError) -> Self {
        CuResult(e.0.get())
    }
}

impl From<Result<(), CuError>> for CuResult {
    fn from(r: Result<(), CuError>) -> Self {
        match r {
            Ok(()) => CuResult::SUCCESS,
            Err(e) => e.into(),
        }
    }
}

impl CuError {
    /// The error of a status, `None` for `CUDA_SUCCESS`.
    pub const fn new(code: u32) -> Option<Self> {
        match NonZeroU32::new(code) {
            Some(c) => Some(CuError(c)),
            None => None,
        }
    }

    /// The `CUresult` number.
    pub const fn code(self) -> u32 {
        self.0.get()
    }

    /// As a status.
    pub const fn status(self) -> CuResult {
        CuResult(self.0.get())
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

impl fmt::Debug for CuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.status(), f)
    }
}

impl fmt::Display for CuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.status(), f)
    }
}

impl std::error::Error for CuError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_cannot_be_success() {
        assert_eq!(CuResult::SUCCESS.result(), Ok(()));
        assert_eq!(CuResult(700).result(), Err(CuError::ILLEGAL_ADDRESS));
        assert_eq!(CuError::new(0), None);
        assert_eq!(CuResult::from(CuError::NOT_READY), CuResult::NOT_READY);
        assert_eq!(core::mem::size_of::<Result<(), CuError>>(), 4);
        assert_eq!(CuError::INVALID_VALUE.to_string(), "CUDA_ERROR_INVALID_VALUE: invalid argument");
    }

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
