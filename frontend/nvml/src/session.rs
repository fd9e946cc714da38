//! NVML's state: the process's libcuda (whose backend session NVML
//! shares) and the devices it offers, set up by the first `nvmlInit*`,
//! counted like NVML's initialisations, and dropped by the `nvmlShutdown`
//! that brings the count back to zero. Shutting NVML down closes nothing:
//! the session is libcuda's, and lives with the process.

use crate::libcuda::{self, CuDevice, DeviceStatus, Libcuda};
use crate::status::{NvmlError, Res};
use pvgpu_ring::CuError;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// What NVML knows between an initialisation and the last shutdown.
pub struct Session {
    cuda: &'static Libcuda,
    /// The `CUdevice` of each NVML index, asked at initialisation.
    devices: Vec<CuDevice>,
    /// The backend driver's version string, asked once.
    driver: OnceLock<String>,
}

/// The state and how many initialisations hold it.
struct Global {
    session: Option<Arc<Session>>,
    refs: u32,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global { session: None, refs: 0 });

fn global() -> MutexGuard<'static, Global> {
    GLOBAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `nvmlInit*`: loads the process's libcuda and initialises it on the first
/// call, counts the others.
pub fn init() -> Res {
    let mut g = global();
    if g.session.is_some() {
        g.refs += 1;
        return Ok(());
    }
    let session = Session::open()?;
    tracing::info!(devices = session.count(), "libnvidia-ml: sharing the process's pvgpu session through libcuda.so.1");
    g.session = Some(Arc::new(session));
    g.refs = 1;
    Ok(())
}

/// `nvmlShutdown`: drops one initialisation, and NVML's state with the
/// last.
pub fn shutdown() -> Res {
    let mut g = global();
    if g.session.is_none() {
        return Err(NvmlError::UNINITIALIZED);
    }
    g.refs -= 1;
    if g.refs == 0 {
        g.session = None;
    }
    Ok(())
}

/// The state, or `NVML_ERROR_UNINITIALIZED`.
pub fn current() -> Res<Arc<Session>> {
    global().session.clone().ok_or(NvmlError::UNINITIALIZED)
}

/// Logs why initialisation failed; `NVML_ERROR_DRIVER_NOT_LOADED`.
fn not_loaded(why: &str, status: CuError) -> NvmlError {
    tracing::error!(%status, "libnvidia-ml: {why}; answering NVML_ERROR_DRIVER_NOT_LOADED");
    NvmlError::DRIVER_NOT_LOADED
}

impl Session {
    fn open() -> Res<Session> {
        let cuda = libcuda::get().map_err(|e| {
            tracing::error!(
                error = %pvgpu_ring::report::Chain(&e),
                "libnvidia-ml: no pvgpu libcuda.so.1; install pvgpu's libcuda.so.1 in the directory of this library \
                 (or on LD_LIBRARY_PATH); answering NVML_ERROR_DRIVER_NOT_LOADED"
            );
            NvmlError::DRIVER_NOT_LOADED
        })?;
        cuda.init().map_err(|e| {
            not_loaded("cuInit failed: libcuda.so.1 could not open a session with the pvgpu backend named by PVGPU_BACKEND", e)
        })?;
        let count = cuda.device_count().map_err(|e| not_loaded("cuDeviceGetCount failed", e))?;
        let count = count.clamp(0, crate::handle::MAX_DEVICES as i32);
        let devices = (0..count).map(|i| cuda.device_get(i)).collect::<Result<_, _>>().map_err(|e| not_loaded("cuDeviceGet failed", e))?;
        Ok(Session { cuda, devices, driver: OnceLock::new() })
    }

    /// Devices the backend offers.
    pub fn count(&self) -> u32 {
        self.devices.len() as u32
    }

    /// The `CUdevice` of NVML index `index`.
    fn dev(&self, index: u32) -> Res<CuDevice> {
        self.devices.get(index as usize).copied().ok_or(NvmlError::INVALID_ARGUMENT)
    }

    /// The name of device `index`.
    pub fn name(&self, index: u32) -> Res<String> {
        Ok(self.cuda.name(self.dev(index)?)?)
    }

    /// The UUID of device `index`.
    pub fn uuid(&self, index: u32) -> Res<[u8; 16]> {
        Ok(self.cuda.uuid(self.dev(index)?)?)
    }

    /// An attribute of device `index`, 0 when the backend's driver does not
    /// report it (libcuda answers `CUDA_ERROR_INVALID_VALUE`).
    pub fn attr(&self, index: u32, attr: pvgpu_ring::cuda::api::CUdevice_attribute) -> Res<i32> {
        match self.cuda.attribute(self.dev(index)?, attr) {
            Err(CuError::INVALID_VALUE) => Ok(0),
            r => Ok(r?),
        }
    }

    /// Memory as the process's session sees it (its quota, never more than
    /// the device's memory, as the total) and the device's gauges, asked
    /// now.
    pub fn status(&self, index: u32) -> Res<DeviceStatus> {
        let dev = self.dev(index)?;
        let mut st = self.cuda.status(dev)?;
        st.mem_total = st.mem_total.min(self.cuda.total_mem(dev)?);
        Ok(st)
    }

    /// Device `index`'s PCIe link, asked of the backend now.
    pub fn link(&self, index: u32) -> Res<crate::libcuda::abi::PcieLink> {
        let dev = self.dev(index)?;
        Ok(self.cuda.link(dev)?)
    }

    /// The backend driver's version (`580.159.04`), asked of the first
    /// device once; `NVML_ERROR_NOT_FOUND` when the backend has none.
    pub fn driver_version(&self) -> Res<&str> {
        if let Some(v) = self.driver.get() {
            return Ok(v);
        }
        let v = self.cuda.status(*self.devices.first().ok_or(NvmlError::NOT_FOUND)?)?.driver_version;
        Ok(self.driver.get_or_init(|| v))
    }

    /// libcuda's `cuDriverGetVersion` (`13000` for CUDA 13.0).
    pub fn cuda_driver_version(&self) -> Res<i32> {
        Ok(self.cuda.driver_version()?)
    }
}
