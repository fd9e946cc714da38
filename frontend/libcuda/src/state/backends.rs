//! The program's backends: `PVGPU_BACKEND` may list several
//! (`local:/run/pvgpu/pvgpu.sock,tcp:gpu2:7000`), each a session of its
//! own. The program sees their devices numbered in the list's order; a
//! `CUdevice` this library hands out is that number.
//!
//! Every call goes to one backend: a device's calls to the backend that
//! serves it; a context's, stream's or event's to the backend that made it
//! (each backend puts its place in the list into every handle it makes,
//! [`pvgpu_ring::proto::space_of`]); a pointer's to the backend of the
//! allocation it lies in; everything else to the backend of the calling
//! thread's current context, or the first backend without one. With one
//! backend, every call goes to it.

use super::ctx;
use pvgpu_frontend::{Client, CuError, Error, Options};
use std::sync::{Mutex, OnceLock};

static CLIENTS: OnceLock<Vec<Client>> = OnceLock::new();
static CONNECT: Mutex<()> = Mutex::new(());
/// Each device the program's backends serve, in the program's numbering:
/// (backend, the backend's ordinal). Set at `cuInit`.
static DEVICES: OnceLock<Vec<(usize, i32)>> = OnceLock::new();

/// Connects to the backends `PVGPU_BACKEND` lists (once); `on_first` runs
/// with the first connection made.
pub fn connect(on_first: impl FnOnce(&Client)) -> Result<&'static [Client], CuError> {
    if let Some(c) = CLIENTS.get() {
        return Ok(c);
    }
    let _guard = CONNECT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = CLIENTS.get() {
        return Ok(c);
    }
    let made = pvgpu_frontend::backends_from_env().and_then(|addrs| {
        let many = addrs.len() > 1;
        addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let opts = Options { space: i as u16, ..Options::for_backend(addr)? };
                Client::connect(addr, &opts).inspect_err(|e| {
                    if many {
                        tracing::error!(backend = %addr, place = i, error = %pvgpu_frontend::error::Chain(e), "libcuda: cannot reach this backend of PVGPU_BACKEND's list");
                    }
                })
            })
            .collect::<Result<Vec<Client>, Error>>()
    });
    match made {
        Ok(list) => {
            for c in &list {
                tracing::info!(info = ?c.info(), "libcuda: connected to the pvgpu backend");
            }
            // The list has an address at least (`backends_from_env`).
            on_first(list.first().ok_or(CuError::NO_DEVICE)?);
            Ok(CLIENTS.get_or_init(|| list))
        }
        Err(e) => {
            tracing::error!(error = %pvgpu_frontend::error::Chain(&e), "libcuda: cannot reach the pvgpu backend (PVGPU_BACKEND)");
            Err(match e {
                Error::Address(_) | Error::Setting(_) => CuError::INVALID_VALUE,
                _ => CuError::NO_DEVICE,
            })
        }
    }
}

/// The connections, if made.
pub fn connected() -> Option<&'static [Client]> {
    CLIENTS.get().map(Vec::as_slice)
}

/// Numbers the backends' devices in the list's order (at `cuInit`, once
/// every backend answered its count).
pub fn number_devices(clients: &[Client]) -> Result<(), Error> {
    if DEVICES.get().is_none() {
        let mut all = Vec::new();
        for (b, c) in clients.iter().enumerate() {
            all.extend((0..c.device_count()?).map(|d| (b, d)));
        }
        let _ = DEVICES.set(all);
    }
    Ok(())
}

/// How many devices the backends serve together.
pub fn device_count() -> i32 {
    DEVICES.get().map_or(0, |d| d.len() as i32)
}

/// The backend serving device `dev` (the program's `CUdevice`), and its
/// ordinal there.
pub fn on_device(dev: i32) -> Result<(&'static Client, i32), CuError> {
    let clients = CLIENTS.get().ok_or(CuError::NOT_INITIALIZED)?;
    let devices = DEVICES.get().ok_or(CuError::NOT_INITIALIZED)?;
    let &(b, local) = usize::try_from(dev).ok().and_then(|i| devices.get(i)).ok_or(CuError::INVALID_DEVICE)?;
    Ok((&clients[b], local))
}

/// Which backend device `dev` is on.
pub fn backend_of_device(dev: i32) -> Option<usize> {
    DEVICES.get()?.get(usize::try_from(dev).ok()?).map(|d| d.0)
}

/// Which backend made handle `id` (a context, stream, event, module,
/// function, graph of the backend's).
pub fn backend_of_handle(id: u64) -> usize {
    usize::from(pvgpu_ring::proto::space_of(id))
}

/// Which backend serves context handle `h` (a primary context's handle
/// names its device).
pub fn backend_of_ctx(h: u64) -> usize {
    match ctx::primary_dev(h) {
        Some(dev) => backend_of_device(dev).unwrap_or(0),
        None => backend_of_handle(h),
    }
}

/// The connection to backend `b`.
pub fn at(b: usize) -> Result<&'static Client, CuError> {
    CLIENTS.get().and_then(|c| c.get(b)).ok_or(CuError::NOT_INITIALIZED)
}

/// Which backend the calling thread's current context is on (the first
/// without one).
pub fn current_backend() -> usize {
    ctx::current_handle().map_or(0, backend_of_ctx)
}

/// Which backend holds device memory at `p`, if the library knows it (an
/// allocation, a global, a mapping).
pub fn backend_of_pointer(p: u64) -> Option<usize> {
    let ctx = super::objects().device_range(p, 1)?.1.ctx;
    Some(backend_of_ctx(ctx))
}

/// Whether device memory `[p, p+size)`, just handed out by backend `b`,
/// overlaps memory the library knows another backend holds: the two
/// backends place device memory where the other does (a backend with the
/// driver's own placement), and the program's pointers would be
/// ambiguous. Logged, with what to do.
pub fn clashes(p: u64, size: u64, b: usize) -> bool {
    if !several() {
        return false;
    }
    let end = p.saturating_add(size.max(1));
    let o = super::objects();
    let other = o.device.iter().find(|(s, a)| **s < end && s.saturating_add(a.size.max(1)) > p && backend_of_ctx(a.ctx) != b);
    if let Some((s, a)) = other {
        tracing::error!(
            addr = p,
            size,
            backend = b,
            other = backend_of_ctx(a.ctx),
            other_addr = *s,
            "two backends of PVGPU_BACKEND's list gave overlapping device addresses; start GPU backends with --device-memory placed so that each keeps to its own"
        );
    }
    other.is_some()
}

/// Whether the program uses more than one backend.
pub fn several() -> bool {
    CLIENTS.get().is_some_and(|c| c.len() > 1)
}
