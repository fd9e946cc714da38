//! NVML status codes (`nvmlReturn_t`, with the values of NVIDIA's
//! `nvml.h`), their texts for `nvmlErrorString`, and how a failed call
//! into libcuda maps onto them.

use pvgpu_ring::CuError;
use std::ffi::CStr;
use std::fmt;
use std::num::NonZeroU32;

/// An NVML status as the C ABI returns it (`nvmlReturn_t`, a 32-bit enum).
/// A failure on the Rust side is an [`NvmlError`], which cannot hold
/// `NVML_SUCCESS`.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub struct NvmlReturn(pub u32);

/// An NVML status other than `NVML_SUCCESS`: the error of every API body.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub struct NvmlError(NonZeroU32);

/// Result of an API body.
pub type Res<T = ()> = Result<T, NvmlError>;

macro_rules! codes {
    ($( $name:ident = $val:literal, $text:literal; )*) => {
        #[allow(missing_docs)]
        impl NvmlReturn {
            pub const SUCCESS: Self = Self(0);
            $( pub const $name: Self = Self($val); )*
        }

        #[allow(missing_docs)]
        impl NvmlError {
            $( pub const $name: Self = Self(NonZeroU32::new($val).unwrap()); )*
        }

        /// (value, name, text) of every status; the texts are what
        /// `nvmlErrorString` returns.
        static TABLE: &[(u32, &str, &CStr)] = &[
            (0, "NVML_SUCCESS", c"Success"),
            $( ($val, concat!("NVML_ERROR_", stringify!($name)), $text), )*
        ];
    };
}

codes! {
    UNINITIALIZED = 1, c"Uninitialized";
    INVALID_ARGUMENT = 2, c"Invalid Argument";
    NOT_SUPPORTED = 3, c"Not Supported";
    NO_PERMISSION = 4, c"Insufficient Permissions";
    ALREADY_INITIALIZED = 5, c"Already Initialized";
    NOT_FOUND = 6, c"Not Found";
    INSUFFICIENT_SIZE = 7, c"Insufficient Size";
    INSUFFICIENT_POWER = 8, c"Insufficient External Power";
    DRIVER_NOT_LOADED = 9, c"Driver Not Loaded";
    TIMEOUT = 10, c"Timeout";
    IRQ_ISSUE = 11, c"Interrupt request issue";
    LIBRARY_NOT_FOUND = 12, c"NVML Shared Library Not Found";
    FUNCTION_NOT_FOUND = 13, c"Function Not Found";
    CORRUPTED_INFOROM = 14, c"Corrupted infoROM";
    GPU_IS_LOST = 15, c"GPU is lost";
    RESET_REQUIRED = 16, c"GPU requires restart";
    OPERATING_SYSTEM = 17, c"The operating system has blocked the request";
    LIB_RM_VERSION_MISMATCH = 18, c"RM has detected an NVML/RM version mismatch";
    IN_USE = 19, c"In use by another client";
    MEMORY = 20, c"Insufficient Memory";
    NO_DATA = 21, c"No data";
    VGPU_ECC_NOT_SUPPORTED = 22, c"The requested vgpu operation is not available on target device, because ECC is enabled";
    INSUFFICIENT_RESOURCES = 23, c"Ran out of critical resources, other than memory";
    FREQ_NOT_SUPPORTED = 24, c"Frequency not supported";
    ARGUMENT_VERSION_MISMATCH = 25, c"The provided version is invalid/unsupported";
    DEPRECATED = 26, c"The requested functionality has been deprecated";
    NOT_READY = 27, c"The system is not ready for the request";
    GPU_NOT_FOUND = 28, c"No GPUs were found";
    INVALID_STATE = 29, c"Resource not in correct state to perform requested operation";
    UNKNOWN = 999, c"Unknown Error";
}

impl NvmlReturn {
    /// The text `nvmlErrorString` returns for this status ("Unknown Error"
    /// for a number NVML does not define).
    pub fn text(self) -> &'static CStr {
        TABLE.iter().find(|e| e.0 == self.0).map_or(c"Unknown Error", |e| e.2)
    }

    /// The status's name (`NVML_ERROR_NOT_SUPPORTED`), if NVML defines it.
    pub fn name(self) -> Option<&'static str> {
        TABLE.iter().find(|e| e.0 == self.0).map(|e| e.1)
    }
}

impl NvmlError {
    /// As a status.
    pub const fn status(self) -> NvmlReturn {
        NvmlReturn(self.0.get())
    }
}

impl From<NvmlError> for NvmlReturn {
    fn from(e: NvmlError) -> Self {
        e.status()
    }
}

impl From<Res> for NvmlReturn {
    fn from(r: Res) -> Self {
        match r {
            Ok(()) => NvmlReturn::SUCCESS,
            Err(e) => e.status(),
        }
    }
}

/// What a failed libcuda call means to an NVML caller (after `nvmlInit`;
/// a failure there is `NVML_ERROR_DRIVER_NOT_LOADED`): an unknown device
/// is a bad argument, a feature the backend lacks is unsupported, a lost
/// connection to the backend is a lost GPU.
impl From<CuError> for NvmlError {
    fn from(e: CuError) -> Self {
        match e {
            CuError::INVALID_DEVICE | CuError::INVALID_VALUE => NvmlError::INVALID_ARGUMENT,
            CuError::NOT_SUPPORTED => NvmlError::NOT_SUPPORTED,
            CuError::DEVICE_UNAVAILABLE => NvmlError::GPU_IS_LOST,
            CuError::NOT_INITIALIZED | CuError::DEINITIALIZED => NvmlError::UNINITIALIZED,
            CuError::NO_DEVICE | CuError::STUB_LIBRARY => NvmlError::DRIVER_NOT_LOADED,
            CuError::OUT_OF_MEMORY => NvmlError::MEMORY,
            _ => NvmlError::UNKNOWN,
        }
    }
}

impl fmt::Debug for NvmlReturn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "nvmlReturn_t({})", self.0),
        }
    }
}

impl fmt::Debug for NvmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.status(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_nvml_values_and_texts() {
        assert_eq!(NvmlReturn::from(Err(NvmlError::INSUFFICIENT_SIZE)), NvmlReturn(7));
        assert_eq!(NvmlReturn::from(Ok(())), NvmlReturn::SUCCESS);
        assert_eq!(NvmlError::UNKNOWN.status(), NvmlReturn(999));
        assert_eq!(NvmlReturn(3).text(), c"Not Supported");
        assert_eq!(NvmlReturn(12_345).text(), c"Unknown Error");
        assert_eq!(format!("{:?}", NvmlError::DRIVER_NOT_LOADED), "NVML_ERROR_DRIVER_NOT_LOADED(9)");
        assert_eq!(std::mem::size_of::<Res>(), 4);
    }

    #[test]
    fn cuda_errors_map_to_nvml_statuses() {
        assert_eq!(NvmlError::from(CuError::INVALID_DEVICE), NvmlError::INVALID_ARGUMENT);
        assert_eq!(NvmlError::from(CuError::DEVICE_UNAVAILABLE), NvmlError::GPU_IS_LOST);
        assert_eq!(NvmlError::from(CuError::NOT_SUPPORTED), NvmlError::NOT_SUPPORTED);
        assert_eq!(NvmlError::from(CuError::NO_DEVICE), NvmlError::DRIVER_NOT_LOADED);
        assert_eq!(NvmlError::from(CuError::OUT_OF_MEMORY), NvmlError::MEMORY);
        assert_eq!(NvmlError::from(CuError::LAUNCH_FAILED), NvmlError::UNKNOWN);
    }
}
