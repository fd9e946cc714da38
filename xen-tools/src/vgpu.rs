//! The vgpu device's XenStore layout, shared by the frontend library, the
//! backend service and `pvgpu-xl`. `docs/xenstore.md` documents every path
//! and key.
//!
//! One vgpu device is one session: a guest process claims a free device,
//! shares a region (request and response channels and a data area) with
//! the backend through grants, and offers an event channel. A guest that
//! runs several GPU programs at once gets several devices
//! (`pvgpu-xl attach --count N`).

use crate::error::XenError;
use crate::xenbus::{XenbusState, read_state, write_state};
use crate::xenstore::{Perm, XsAccess};

/// Device type name in XenStore paths.
pub const DEVICE_TYPE: &str = "vgpu";

/// Frontend keys (written by the toolstack, then by the frontend).
pub mod fe {
    /// Backend directory path (toolstack).
    pub const BACKEND: &str = "backend";
    /// Backend domain id (toolstack).
    pub const BACKEND_ID: &str = "backend-id";
    /// xenbus state.
    pub const STATE: &str = "state";
    /// Device id (toolstack).
    pub const HANDLE: &str = "handle";
    /// Process that claimed the device: `<pid>` (frontend).
    pub const CLAIM: &str = "claim";
    /// Number of pages of the shared region (frontend).
    pub const PAGE_COUNT: &str = "page-count";
    /// Number of directory pages listing the region's grant references.
    pub const DIR_REF_COUNT: &str = "dir-ref-count";
    /// Prefix of `dir-ref-<i>`: grant reference of directory page `i`.
    pub const DIR_REF: &str = "dir-ref-";
    /// Event channel port offered to the backend.
    pub const EVENT_CHANNEL: &str = "event-channel";
    /// Request channel size in bytes.
    pub const REQ_SIZE: &str = "req-size";
    /// Response channel size in bytes.
    pub const RSP_SIZE: &str = "rsp-size";
    /// Data area size in bytes.
    pub const DATA_SIZE: &str = "data-size";
    /// Protocol version chosen.
    pub const PROTOCOL: &str = "protocol";
    /// Where the shared region lies in the frontend's process (optional):
    /// a backend that serves the session in a process of its own maps the
    /// grants at the same address when it is free, so that pointers into
    /// the data area (page-locked memory) mean the same on both sides.
    pub const REGION_ADDR: &str = "region-addr";
}

/// Backend keys (written by the toolstack, then by the backend).
pub mod be {
    /// Frontend directory path (toolstack).
    pub const FRONTEND: &str = "frontend";
    /// Frontend domain id (toolstack).
    pub const FRONTEND_ID: &str = "frontend-id";
    /// 1 while the device should be served (toolstack).
    pub const ONLINE: &str = "online";
    /// xenbus state.
    pub const STATE: &str = "state";
    /// Largest data area accepted, bytes (backend).
    pub const MAX_DATA_AREA: &str = "max-data-area";
    /// Largest channel size accepted, bytes (backend).
    pub const MAX_CHANNEL_SIZE: &str = "max-channel-size";
    /// Protocol versions spoken, comma-separated (backend).
    pub const PROTOCOL_VERSIONS: &str = "protocol-versions";
    /// Executor serving the device, `cuda` or `host` (backend).
    pub const EXECUTOR: &str = "executor";
}

/// Grant references per directory page.
pub const REFS_PER_DIR_PAGE: usize = 1024;

/// `/local/domain/<domid>/device/vgpu`.
pub fn frontend_root(domid: u16) -> String {
    format!("/local/domain/{domid}/device/{DEVICE_TYPE}")
}

/// `/local/domain/<domid>/device/vgpu/<devid>`.
pub fn frontend_dir(domid: u16, devid: u32) -> String {
    format!("{}/{devid}", frontend_root(domid))
}

/// `/local/domain/<backend>/backend/vgpu`.
pub fn backend_root(backend: u16) -> String {
    format!("/local/domain/{backend}/backend/{DEVICE_TYPE}")
}

/// `/local/domain/<backend>/backend/vgpu/<domid>/<devid>`.
pub fn backend_dir(backend: u16, domid: u16, devid: u32) -> String {
    format!("{}/{domid}/{devid}", backend_root(backend))
}

/// `dir/key`.
pub fn key(dir: &str, k: &str) -> String {
    format!("{dir}/{k}")
}

/// Reads `dir/k` as a number.
pub fn read_num<T: std::str::FromStr>(xs: &mut impl XsAccess, dir: &str, k: &str) -> Result<T, XenError> {
    let path = key(dir, k);
    let s = xs.read_string(&path)?;
    s.trim().parse().map_err(|_| XenError::BadValue { path, value: s, expected: "a decimal number" })
}

/// Creates both directories of device `devid` for guest `domid`, as libxl
/// does for its own devices, in one transaction: the frontend directory
/// owned by the guest (readable by the backend), the backend directory owned
/// by the backend domain (readable by the guest), both in `Initialising`.
pub fn create_device(xs: &mut crate::XenStore, backend: u16, domid: u16, devid: u32) -> Result<(), XenError> {
    let fe_dir = frontend_dir(domid, devid);
    let be_dir = backend_dir(backend, domid, devid);
    xs.transaction(|tx| {
        if tx.try_read(&key(&be_dir, be::STATE))?.is_some() {
            return Err(XenError::InvalidArgument(format!("vgpu device {devid} of domain {domid} exists already")));
        }
        tx.mkdir(&fe_dir)?;
        tx.set_perms(&fe_dir, &[Perm::new(domid, crate::xenstore::Access::None), Perm::new(backend, crate::xenstore::Access::Read)])?;
        tx.write(&key(&fe_dir, fe::BACKEND), be_dir.as_bytes())?;
        tx.write(&key(&fe_dir, fe::BACKEND_ID), backend.to_string().as_bytes())?;
        tx.write(&key(&fe_dir, fe::HANDLE), devid.to_string().as_bytes())?;
        write_state(tx, &fe_dir, XenbusState::Initialising)?;
        tx.mkdir(&be_dir)?;
        tx.set_perms(&be_dir, &[Perm::new(backend, crate::xenstore::Access::None), Perm::new(domid, crate::xenstore::Access::Read)])?;
        tx.write(&key(&be_dir, be::FRONTEND), fe_dir.as_bytes())?;
        tx.write(&key(&be_dir, be::FRONTEND_ID), domid.to_string().as_bytes())?;
        tx.write(&key(&be_dir, be::ONLINE), b"1")?;
        write_state(tx, &be_dir, XenbusState::Initialising)?;
        Ok(())
    })
}

/// Removes both directories of a device.
pub fn remove_device(xs: &mut crate::XenStore, backend: u16, domid: u16, devid: u32) -> Result<(), XenError> {
    let fe_dir = frontend_dir(domid, devid);
    let be_dir = backend_dir(backend, domid, devid);
    xs.transaction(|tx| {
        for d in [&fe_dir, &be_dir] {
            tx.try_rm(d)?;
        }
        Ok(())
    })
}

/// Current (frontend, backend) states of a device.
pub fn states(xs: &mut crate::XenStore, backend: u16, domid: u16, devid: u32) -> Result<(XenbusState, XenbusState), XenError> {
    let f = read_state(xs, &frontend_dir(domid, devid))?;
    let b = read_state(xs, &backend_dir(backend, domid, devid))?;
    Ok((f, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_xenbus_conventions() {
        assert_eq!(frontend_dir(5, 0), "/local/domain/5/device/vgpu/0");
        assert_eq!(backend_dir(0, 5, 3), "/local/domain/0/backend/vgpu/5/3");
        assert_eq!(key("/a", fe::STATE), "/a/state");
    }
}
