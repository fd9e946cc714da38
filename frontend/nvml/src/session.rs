//! The backend session behind the library: opened by the first
//! `nvmlInit*`, counted like NVML's initialisations, and closed by the
//! `nvmlShutdown` that brings the count back to zero (which frees the
//! backend's session slot, or the guest's vgpu device on Xen).

use crate::status::{NvmlError, Res};
use pvgpu_frontend::error::Chain;
use pvgpu_frontend::{Client, DeviceProps, DeviceStatus};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// One connection to the backend, and what never changes during it.
pub struct Session {
    client: Client,
    /// Devices the backend offers, counted at initialisation.
    count: u32,
    /// The backend driver's version string, asked once.
    driver: OnceLock<String>,
}

/// The session and how many initialisations hold it.
struct Global {
    session: Option<Arc<Session>>,
    refs: u32,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global { session: None, refs: 0 });

fn global() -> MutexGuard<'static, Global> {
    GLOBAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `nvmlInit*`: connects to the backend named by `PVGPU_BACKEND` on the
/// first call, counts the others.
pub fn init() -> Res {
    let mut g = global();
    if g.session.is_some() {
        g.refs += 1;
        return Ok(());
    }
    let session = Session::open()?;
    tracing::info!(info = ?session.client.info(), devices = session.count, "libnvidia-ml: connected to the pvgpu backend");
    g.session = Some(Arc::new(session));
    g.refs = 1;
    Ok(())
}

/// `nvmlShutdown`: drops one initialisation, and the session with the last.
pub fn shutdown() -> Res {
    let closed = {
        let mut g = global();
        if g.session.is_none() {
            return Err(NvmlError::UNINITIALIZED);
        }
        g.refs -= 1;
        if g.refs > 0 {
            return Ok(());
        }
        g.session.take()
    };
    // Dropped outside the lock: the last reference says goodbye to the
    // backend, after any call still running on another thread.
    drop(closed);
    Ok(())
}

/// The open session, or `NVML_ERROR_UNINITIALIZED`.
pub fn current() -> Res<Arc<Session>> {
    global().session.clone().ok_or(NvmlError::UNINITIALIZED)
}

impl Session {
    fn open() -> Res<Session> {
        let client = Client::from_env().map_err(|e| {
            tracing::error!(
                error = %Chain(&e),
                "libnvidia-ml: cannot reach the pvgpu backend (PVGPU_BACKEND); answering NVML_ERROR_DRIVER_NOT_LOADED"
            );
            NvmlError::DRIVER_NOT_LOADED
        })?;
        let count = client.init().and_then(|()| client.device_count()).map_err(|e| {
            tracing::error!(error = %Chain(&e), "libnvidia-ml: the pvgpu backend refused to initialise");
            NvmlError::DRIVER_NOT_LOADED
        })?;
        Ok(Session { client, count: u32::try_from(count).unwrap_or(0).min(crate::handle::MAX_DEVICES), driver: OnceLock::new() })
    }

    /// Devices the backend offers.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The client, for what the backend said about itself.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Name, UUID and attributes of device `index` (cached by the client).
    pub fn props(&self, index: u32) -> Res<Arc<DeviceProps>> {
        Ok(self.client.device_props(ordinal(index)?)?)
    }

    /// An attribute of device `index`, 0 when the backend's driver does not
    /// report it.
    pub fn attr(&self, index: u32, attr: i32) -> Res<i32> {
        Ok(self.props(index)?.attrs.get(&attr).copied().unwrap_or(0))
    }

    /// Memory as this session sees it and the device's gauges, asked now.
    pub fn status(&self, index: u32) -> Res<DeviceStatus> {
        Ok(self.client.device_status(ordinal(index)?)?)
    }

    /// The backend driver's version (`580.159.04`), asked of the first
    /// device once; `NVML_ERROR_NOT_FOUND` when the backend has none.
    pub fn driver_version(&self) -> Res<&str> {
        if let Some(v) = self.driver.get() {
            return Ok(v);
        }
        if self.count == 0 {
            return Err(NvmlError::NOT_FOUND);
        }
        let v = self.status(0)?.driver_version;
        Ok(self.driver.get_or_init(|| v))
    }
}

/// A device index as the client's ordinal.
fn ordinal(index: u32) -> Res<i32> {
    i32::try_from(index).map_err(|_| NvmlError::INVALID_ARGUMENT)
}
