//! The process's `libcuda.so.1`, through which this library asks the
//! backend: loaded by the first `nvmlInit*` with `dlopen`, so that it is
//! the library the program uses (found the same way: `LD_LIBRARY_PATH`,
//! then the directory of this library, then the system's), and its one
//! backend session serves both. Kept loaded for the life of the process,
//! as the session is.
//!
//! Only pvgpu's `libcuda.so.1` will do: NVIDIA's has no
//! [`abi::DEVICE_STATUS`], and cannot answer for a pvgpu backend.

pub mod abi;

pub use abi::DeviceStatus;

use abi::{DeviceLinkFn, DeviceStatusFn, PcieLink, PvgpuDeviceLink, PvgpuDeviceStatus};
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::{
    CUdevice_attribute, CUuuid, PFN_cuDeviceGet, PFN_cuDeviceGetAttribute, PFN_cuDeviceGetCount, PFN_cuDeviceGetName,
    PFN_cuDeviceGetUuid_v2, PFN_cuDeviceTotalMem_v2, PFN_cuDriverGetVersion, PFN_cuInit,
};
use std::ffi::{CStr, c_char, c_int};
use std::sync::OnceLock;

/// The name the program's CUDA library answers to.
pub const SONAME: &str = "libcuda.so.1";

/// `CUdevice`.
pub type CuDevice = c_int;

/// The entry points this library calls, typed as cuda.h declares them.
struct Fns {
    init: PFN_cuInit,
    driver_get_version: PFN_cuDriverGetVersion,
    device_get_count: PFN_cuDeviceGetCount,
    device_get: PFN_cuDeviceGet,
    device_get_name: PFN_cuDeviceGetName,
    device_get_uuid: PFN_cuDeviceGetUuid_v2,
    device_total_mem: PFN_cuDeviceTotalMem_v2,
    device_get_attribute: PFN_cuDeviceGetAttribute,
    device_status: DeviceStatusFn,
    /// Absent from pvgpu's libcuda before the PCIe link was answered.
    device_link: Option<DeviceLinkFn>,
}

/// pvgpu's `libcuda.so.1`, loaded, with its entry points.
pub struct Libcuda {
    fns: Fns,
    /// Keeps the entry points mapped.
    _lib: Library,
}

/// Why no usable `libcuda.so.1` was found.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `dlopen` failed.
    #[error("Cannot load {SONAME}")]
    Open(#[source] libloading::Error),
    /// The library found has no `pvgpu_device_status`: it is not pvgpu's.
    #[error("The {SONAME} found is not pvgpu's (it has no {})", abi::DEVICE_STATUS)]
    NotPvgpu,
    /// pvgpu's library lacks a CUDA entry point (a broken build).
    #[error("{SONAME} has no {0}")]
    Missing(&'static str),
}

static LIBCUDA: OnceLock<Libcuda> = OnceLock::new();

/// The process's `libcuda.so.1`, loaded the first time (a failure is tried
/// again at the next call).
pub fn get() -> Result<&'static Libcuda, LoadError> {
    if let Some(l) = LIBCUDA.get() {
        return Ok(l);
    }
    let l = Libcuda::open(SONAME)?;
    // A thread that lost the race drops its copy: `dlclose` only lowers the
    // library's reference count.
    Ok(LIBCUDA.get_or_init(|| l))
}

/// The entry point `name`.
///
/// # Safety
/// `T` must be the C signature of `name` (a function pointer type).
unsafe fn sym<T: Copy>(lib: &Library, name: &'static str) -> Result<T, LoadError> {
    // SAFETY: `T` is the symbol's type (this function's contract).
    unsafe { lib.get::<T>(name) }.map(|s| *s).map_err(|_| LoadError::Missing(name))
}

impl Libcuda {
    /// Loads `name` and resolves the entry points, refusing a library
    /// without [`abi::DEVICE_STATUS`].
    pub fn open(name: &str) -> Result<Libcuda, LoadError> {
        // SAFETY: loading a CUDA library runs its initialisers, which have
        // no preconditions; it is never unloaded while in use (see `get`).
        let lib = unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL) }.map_err(LoadError::Open)?;
        // SAFETY: each type is the C signature cuda.h declares for the name
        // (and pvgpu's libcuda for `pvgpu_device_status`); the pointers live
        // in `Libcuda` beside `lib`, so they are not called after it is
        // unloaded.
        let fns = unsafe {
            Fns {
                device_status: sym(&lib, abi::DEVICE_STATUS).map_err(|_| LoadError::NotPvgpu)?,
                device_link: sym(&lib, abi::DEVICE_LINK).ok(),
                init: sym(&lib, "cuInit")?,
                driver_get_version: sym(&lib, "cuDriverGetVersion")?,
                device_get_count: sym(&lib, "cuDeviceGetCount")?,
                device_get: sym(&lib, "cuDeviceGet")?,
                device_get_name: sym(&lib, "cuDeviceGetName")?,
                device_get_uuid: sym(&lib, "cuDeviceGetUuid_v2")?,
                device_total_mem: sym(&lib, "cuDeviceTotalMem_v2")?,
                device_get_attribute: sym(&lib, "cuDeviceGetAttribute")?,
            }
        };
        Ok(Libcuda { fns, _lib: lib })
    }

    /// `cuInit(0)`: connects the process to the backend, if it is not yet.
    pub fn init(&self) -> Result<(), CuError> {
        // SAFETY: no pointers.
        unsafe { (self.fns.init)(0) }.result()
    }

    /// `cuDriverGetVersion`.
    pub fn driver_version(&self) -> Result<i32, CuError> {
        let mut v = 0;
        // SAFETY: a valid out-pointer.
        unsafe { (self.fns.driver_get_version)(&mut v) }.result()?;
        Ok(v)
    }

    /// `cuDeviceGetCount`.
    pub fn device_count(&self) -> Result<i32, CuError> {
        let mut n = 0;
        // SAFETY: a valid out-pointer.
        unsafe { (self.fns.device_get_count)(&mut n) }.result()?;
        Ok(n)
    }

    /// `cuDeviceGet`: the device of `ordinal`.
    pub fn device_get(&self, ordinal: i32) -> Result<CuDevice, CuError> {
        let mut d = 0;
        // SAFETY: a valid out-pointer.
        unsafe { (self.fns.device_get)(&mut d, ordinal) }.result()?;
        Ok(d)
    }

    /// `cuDeviceGetName`.
    pub fn name(&self, dev: CuDevice) -> Result<String, CuError> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: a buffer of the length passed; the library writes at most
        // that many bytes, NUL included.
        unsafe { (self.fns.device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, dev) }.result()?;
        buf[buf.len() - 1] = 0;
        // SAFETY: NUL-terminated (the last byte at least), and unchanged
        // while read.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// `cuDeviceGetUuid_v2`.
    pub fn uuid(&self, dev: CuDevice) -> Result<[u8; 16], CuError> {
        let mut u = CUuuid { bytes: [0; 16] };
        // SAFETY: a valid out-pointer.
        unsafe { (self.fns.device_get_uuid)(&mut u, dev) }.result()?;
        Ok(u.bytes.map(|b| b as u8))
    }

    /// `cuDeviceTotalMem_v2`: the device's memory.
    pub fn total_mem(&self, dev: CuDevice) -> Result<u64, CuError> {
        let mut b = 0;
        // SAFETY: a valid out-pointer.
        unsafe { (self.fns.device_total_mem)(&mut b, dev) }.result()?;
        Ok(b as u64)
    }

    /// `cuDeviceGetAttribute`.
    pub fn attribute(&self, dev: CuDevice, attr: CUdevice_attribute) -> Result<i32, CuError> {
        let mut v = 0;
        // SAFETY: a valid out-pointer.
        unsafe { (self.fns.device_get_attribute)(&mut v, attr, dev) }.result()?;
        Ok(v)
    }

    /// `pvgpu_device_status`: memory as the process's session sees it, and
    /// the device's gauges, asked of the backend now.
    pub fn status(&self, dev: CuDevice) -> Result<DeviceStatus, CuError> {
        let mut st = PvgpuDeviceStatus::default();
        // SAFETY: a valid out-pointer to the structure the function writes.
        unsafe { (self.fns.device_status)(dev, &mut st) }.result()?;
        Ok(DeviceStatus::from(&st))
    }

    /// `pvgpu_device_link`: the device's PCIe link, asked of the backend
    /// now (all unknown from a libcuda without it).
    pub fn link(&self, dev: CuDevice) -> Result<PcieLink, CuError> {
        let Some(f) = self.fns.device_link else { return Ok(PcieLink::default()) };
        let mut l = PvgpuDeviceLink::from(PcieLink::default());
        // SAFETY: a valid out-pointer to the structure the function writes.
        unsafe { f(dev, &mut l) }.result()?;
        Ok(PcieLink::from(l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pvgpus_libcuda_will_do() {
        let e = Libcuda::open("libpvgpu-no-such-library.so.1").err().expect("nothing to load");
        assert!(matches!(e, LoadError::Open(_)), "{e}");
        let chain = pvgpu_ring::report::Chain(&e).to_string();
        assert!(chain.contains("libpvgpu-no-such-library.so.1: cannot open shared object file"), "{chain}");
        // Loads, but is no CUDA library at all.
        let e = Libcuda::open("libc.so.6").err().expect("libc is refused");
        assert!(matches!(e, LoadError::NotPvgpu), "{e}");
        assert_eq!(e.to_string(), "The libcuda.so.1 found is not pvgpu's (it has no pvgpu_device_status)");
    }
}
