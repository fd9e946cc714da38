//! The Xen side of the backend: watches XenStore for vgpu devices, runs the
//! xenbus handshake, and serves each connected frontend as a session over
//! grant-mapped pages and an event channel.
//!
//! Device life cycle, as the backend drives it (`docs/xenstore.md`):
//!
//! 1. the toolstack (`pvgpu-xl attach`) creates both directories in
//!    `Initialising`;
//! 2. the backend advertises its limits and moves to `InitWait`;
//! 3. a guest process claims the device, publishes its ring and moves to
//!    `Initialised`;
//! 4. the backend starts a session (a worker process by default), which
//!    reads the ring's geometry, grants and port, maps the grants, binds the
//!    event channel, moves the device to `Connected` and closes its XenStore
//!    connection: from then on, and before it serves a request, the worker
//!    holds only its grants and its port;
//! 5. when the frontend closes, dies (its kernel clears the region's alive
//!    byte), or its domain goes away (the supervisor sees the state or the
//!    domain go and ends the session), the session ends, the grants are
//!    unmapped and the port closed; the supervisor moves the device to
//!    `Closed` ([`close_device`]), releases a claim the dead frontend left,
//!    and advertises the device again.

use crate::config::SessionConfig;
use crate::conn::RingConn;
use pvgpu_ring::layout::{BACKEND_ALIVE, FRONTEND_ALIVE, Geometry};
use pvgpu_ring::region::SharedRegion;
use pvgpu_ring::report::Chain;
use pvgpu_xen::vgpu::{self, be, fe, read_num};
use pvgpu_xen::xenbus::{read_state, write_state};
use pvgpu_xen::{EvtchnNotifier, GntDev, MappedGrants, XenError, XenStore, XenbusState, XsAccess};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Largest channel the backend accepts from a Xen frontend.
pub const MAX_CHANNEL: u32 = 1 << 20;

/// Why a Xen session could not start.
#[derive(Debug, thiserror::Error)]
pub enum XenSessionError {
    /// A Xen operation failed.
    #[error(transparent)]
    Xen(#[from] XenError),
    /// The frontend published something impossible.
    #[error("Frontend published a bad ring: {0}")]
    BadFrontend(String),
}

/// A running session's hold on its device: the directory page's mapping.
/// The device's XenStore side is the supervisor's ([`close_device`] when
/// the session has ended).
pub struct XenSession {
    _dir: MappedGrants,
}

/// Ends the XenStore side of guest `domid`'s device `devid` once its
/// session has ended: the backend moves to `Closing`, then `Closed`, and a
/// claim the frontend left (it may have died) is released.
pub fn close_device(domid: u16, devid: u32) {
    let r = XenStore::open().and_then(|mut xs| {
        let me = xs.domid()?;
        let (be_dir, fe_dir) = (vgpu::backend_dir(me, domid, devid), vgpu::frontend_dir(domid, devid));
        xs.transaction(|tx| {
            write_state(tx, &be_dir, XenbusState::Closing)?;
            write_state(tx, &be_dir, XenbusState::Closed)?;
            // A frontend that died cannot release its claim; do it for it.
            if tx.try_read(&vgpu::key(&fe_dir, fe::STATE))?.is_some() && read_state(tx, &fe_dir).is_ok_and(|s| !s.is_closing()) {
                write_state(tx, &fe_dir, XenbusState::Closed)?;
            }
            tx.try_rm(&vgpu::key(&fe_dir, fe::CLAIM)).map(drop)
        })
    });
    if let Err(e) = r {
        tracing::debug!(domid, devid, error = %e, "could not close the device (domain gone?)");
    }
}

fn bad(what: impl Into<String>) -> XenSessionError {
    XenSessionError::BadFrontend(what.into())
}

/// What a frontend published of its ring, read and checked by the
/// supervisor and handed to the session's worker (which reads no
/// XenStore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XenRing {
    /// Channel and data-area sizes.
    pub geometry: Geometry,
    /// Grant references of the directory pages.
    pub dir_refs: Vec<u32>,
    /// The frontend's event-channel port.
    pub port: u32,
    /// Where the region lies in the frontend's process (0: not said).
    pub region_addr: u64,
}

impl XenRing {
    /// Reads guest `domid`'s device `devid`, copying every value out of
    /// XenStore and checking it before anything uses it.
    pub fn read(xs: &mut XenStore, domid: u16, devid: u32, cfg: &SessionConfig) -> Result<XenRing, XenSessionError> {
        let fe_dir = vgpu::frontend_dir(domid, devid);
        let fe_dir = fe_dir.as_str();
        let g = Geometry {
            req_size: read_num(xs, fe_dir, fe::REQ_SIZE)?,
            rsp_size: read_num(xs, fe_dir, fe::RSP_SIZE)?,
            data_size: read_num(xs, fe_dir, fe::DATA_SIZE)?,
        };
        // Everything that sizes what follows is checked first: the guest
        // chooses these numbers, and the supervisor reads on its behalf.
        check_geometry(&g, cfg)?;
        let pages: usize = read_num(xs, fe_dir, fe::PAGE_COUNT)?;
        if pages != g.pages() {
            return Err(bad(format!("{pages} pages for a geometry of {}", g.pages())));
        }
        let dir_count: usize = read_num(xs, fe_dir, fe::DIR_REF_COUNT)?;
        check_dir_pages(&g, dir_count)?;
        let mut dir_refs = Vec::with_capacity(dir_count);
        for i in 0..dir_count {
            dir_refs.push(read_num::<u32>(xs, fe_dir, &format!("{}{i}", fe::DIR_REF))?);
        }
        let port: u32 = read_num(xs, fe_dir, fe::EVENT_CHANNEL)?;
        let protocol = xs.read_string(&vgpu::key(fe_dir, fe::PROTOCOL))?;
        if protocol.trim() != "1" {
            return Err(bad(format!("protocol {protocol}")));
        }
        // Optional: an address to map the region at, if free (checked
        // where it is used).
        let region_addr = xs.read_string(&vgpu::key(fe_dir, fe::REGION_ADDR)).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        Ok(XenRing { geometry: g, dir_refs, port, region_addr })
    }

    /// Checks the ring against the backend's limits (again in the worker:
    /// it trusts no argument).
    pub fn check(&self, cfg: &SessionConfig) -> Result<(), XenSessionError> {
        check_geometry(&self.geometry, cfg)?;
        check_dir_pages(&self.geometry, self.dir_refs.len())
    }

    /// The ring as a worker's argument: `req,rsp,data,port,addr,ref,ref...`.
    pub fn to_arg(&self) -> String {
        let g = &self.geometry;
        let mut parts = vec![
            g.req_size.to_string(),
            g.rsp_size.to_string(),
            g.data_size.to_string(),
            self.port.to_string(),
            self.region_addr.to_string(),
        ];
        parts.extend(self.dir_refs.iter().map(u32::to_string));
        parts.join(",")
    }

    /// Parses [`XenRing::to_arg`].
    pub fn from_arg(s: &str) -> Option<XenRing> {
        let mut it = s.split(',');
        let mut next = || it.next()?.parse::<u64>().ok();
        let (req, rsp, data, port, region_addr) = (next()?, next()?, next()?, next()?, next()?);
        let geometry = Geometry { req_size: u32::try_from(req).ok()?, rsp_size: u32::try_from(rsp).ok()?, data_size: data };
        let port = u32::try_from(port).ok()?;
        let dir_refs = s.split(',').skip(5).map(|r| r.parse::<u32>().ok()).collect::<Option<Vec<_>>>()?;
        Some(XenRing { geometry, dir_refs, port, region_addr })
    }
}

fn check_geometry(g: &Geometry, cfg: &SessionConfig) -> Result<(), XenSessionError> {
    g.validate(cfg.max_data_area).map_err(|e| bad(Chain(&e).to_string()))?;
    if g.req_size > MAX_CHANNEL || g.rsp_size > MAX_CHANNEL {
        return Err(bad("channel larger than advertised"));
    }
    Ok(())
}

fn check_dir_pages(g: &Geometry, dir_pages: usize) -> Result<(), XenSessionError> {
    if dir_pages != g.pages().div_ceil(vgpu::REFS_PER_DIR_PAGE) {
        return Err(bad("wrong number of directory pages"));
    }
    Ok(())
}

/// Maps the ring of guest `domid`'s device (as the supervisor read it from
/// XenStore) and returns the session's connection and its hold on the
/// device. It touches no XenStore: the supervisor moves the device to
/// `Connected` once the worker says it is ready.
pub fn open_session(domid: u16, ring: &XenRing, cfg: &SessionConfig) -> Result<(RingConn, XenSession), XenSessionError> {
    ring.check(cfg)?;
    let g = &ring.geometry;
    let pages = g.pages();
    let gntdev = GntDev::open()?;
    let dir = gntdev.map(domid, &ring.dir_refs, false)?;
    let mut raw = vec![0u8; pages * 4];
    dir.read(0, &mut raw)?;
    let refs: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    // A process that serves this one session maps the region where the
    // frontend has it, when that is free: pointers into its data area
    // (page-locked memory handed to kernels) then mean the same here.
    let at = usize::try_from(ring.region_addr).ok().filter(|&a| cfg.same_address && a != 0);
    let map = gntdev.map_at(domid, &refs, true, at)?;
    let same_address = at.is_some_and(|a| a == pvgpu_ring::region::Mapping::as_ptr(&map) as usize);

    let notifier = EvtchnNotifier::connect(domid, ring.port)?;
    map.set_unmap_notify(BACKEND_ALIVE as u64, Some(notifier.port()), true)?;
    let region: SharedRegion = map.into_region()?;
    region.write_byte(BACKEND_ALIVE, 1).map_err(|e| bad(Chain(&e).to_string()))?;

    // The frontend's process dying clears its alive byte; its domain going
    // away or its device closing is the supervisor's to see (it ends the
    // session).
    let probe = region.clone();
    let notifier = notifier.with_liveness(Arc::new(move || probe.read_byte(FRONTEND_ALIVE).is_ok_and(|b| b == 1)));
    let conn = RingConn::new(region, g, Box::new(notifier), cfg.spin).map_err(|e| bad(Chain(&e).to_string()))?;
    tracing::info!(domid, pages, same_address, "Xen frontend's ring mapped");
    Ok((conn, XenSession { _dir: dir }))
}

/// Moves guest `domid`'s device `devid` to `Connected`: its session's
/// worker has mapped the ring and set its alive byte.
pub fn connect_device(domid: u16, devid: u32) {
    let r = XenStore::open().and_then(|mut xs| {
        let me = xs.domid()?;
        write_state(&mut xs, &vgpu::backend_dir(me, domid, devid), XenbusState::Connected)
    });
    match r {
        Ok(()) => tracing::info!(domid, devid, "Xen frontend connected"),
        Err(e) => tracing::debug!(domid, devid, error = %e, "could not mark the device connected (domain gone?)"),
    }
}

/// Advertises the backend's limits on a device and moves it to `InitWait`.
fn advertise(xs: &mut XenStore, be_dir: &str, cfg: &SessionConfig, executor: &str) -> Result<(), XenError> {
    xs.transaction(|tx| {
        tx.write(&vgpu::key(be_dir, be::MAX_DATA_AREA), cfg.max_data_area.to_string().as_bytes())?;
        tx.write(&vgpu::key(be_dir, be::MAX_CHANNEL_SIZE), MAX_CHANNEL.to_string().as_bytes())?;
        tx.write(&vgpu::key(be_dir, be::PROTOCOL_VERSIONS), b"1")?;
        tx.write(&vgpu::key(be_dir, be::EXECUTOR), executor.as_bytes())?;
        write_state(tx, be_dir, XenbusState::InitWait)
    })
}

/// Puts a device whose session is gone back to a clean `Closed` (the next
/// scan advertises it again).
fn reset(xs: &mut XenStore, be_dir: &str, fe_dir: &str) -> Result<(), XenError> {
    xs.transaction(|tx| {
        write_state(tx, be_dir, XenbusState::Closed)?;
        if tx.try_read(&vgpu::key(fe_dir, fe::STATE))?.is_some() {
            write_state(tx, fe_dir, XenbusState::Closed)?;
        }
        tx.try_rm(&vgpu::key(fe_dir, fe::CLAIM)).map(drop)
    })
}

/// Devices with a session running: (domain, device) to session number.
pub type Active = Arc<Mutex<HashMap<(u16, u32), u64>>>;

/// Sessions whose guest went away or closed its device (domain gone,
/// frontend state missing, closing or garbled): the supervisor ends them,
/// whatever their worker is doing.
pub fn departed(xs: &mut XenStore, active: &Active) -> Vec<u64> {
    let devices: Vec<((u16, u32), u64)> =
        active.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|(_, id)| **id != 0).map(|(k, v)| (*k, *v)).collect();
    let mut gone = Vec::new();
    for ((domid, devid), id) in devices {
        let alive = match xs.try_read(&format!("/local/domain/{domid}")) {
            Ok(Some(_)) => match xs.try_read(&vgpu::key(&vgpu::frontend_dir(domid, devid), fe::STATE)) {
                Ok(Some(v)) => XenbusState::from_wire(&v).is_some_and(|s| !s.is_closing()),
                Ok(None) => false,
                // XenStore did not answer: decide on the next pass.
                Err(_) => true,
            },
            Ok(None) => false,
            Err(_) => true,
        };
        if !alive {
            gone.push(id);
        }
    }
    gone
}

/// One pass over every vgpu device in XenStore: advertise, start sessions,
/// clean up after dead ones. `start(domid, devid)` launches a session and
/// returns its number, or `None` when it could not. A device whose keys cannot be read or make no sense
/// (a guest writes what it likes under its own frontend directory) is
/// skipped for this pass and reported through `skipped`; it never stops the
/// pass for the other guests' devices. Only failing to list the backend's
/// own directory is an error.
pub fn scan(
    xs: &mut XenStore,
    cfg: &SessionConfig,
    executor: &str,
    active: &Active,
    start: &mut dyn FnMut(&mut XenStore, u16, u32) -> Option<u64>,
    skipped: &mut dyn FnMut(&str, XenError),
) -> Result<(), XenError> {
    let me = xs.domid()?;
    let root = vgpu::backend_root(me);
    let domains = match xs.directory(&root) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    };
    for d in domains {
        let Ok(domid) = d.parse::<u16>() else { continue };
        let devs = match scan_domain(xs, &root, domid, active) {
            Ok(Some(devs)) => devs,
            Ok(None) => continue,
            Err(e) => {
                skipped(&format!("{root}/{domid}"), e);
                continue;
            }
        };
        for devid in devs {
            if active.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&(domid, devid)) {
                continue;
            }
            let be_dir = vgpu::backend_dir(me, domid, devid);
            if let Err(e) = scan_device(xs, cfg, executor, active, start, &be_dir, domid, devid) {
                skipped(&be_dir, e);
            }
        }
    }
    Ok(())
}

/// The device ids of guest `domid`, or `None` when the guest is gone (its
/// devices are then removed, once no session of it runs).
fn scan_domain(xs: &mut XenStore, root: &str, domid: u16, active: &Active) -> Result<Option<Vec<u32>>, XenError> {
    if xs.try_read(&format!("/local/domain/{domid}"))?.is_none() {
        // The guest is gone (destroyed or crashed) and no session of it
        // runs: remove its devices, as libxl does for its own.
        let busy = active.lock().unwrap_or_else(|p| p.into_inner()).keys().any(|(dm, _)| *dm == domid);
        if !busy {
            tracing::info!(domid, "guest gone; removing its vgpu devices");
            xs.try_rm(&format!("{root}/{domid}"))?;
        }
        return Ok(None);
    }
    let devs = xs.directory(&format!("{root}/{domid}"))?;
    Ok(Some(devs.iter().filter_map(|s| s.parse::<u32>().ok()).collect()))
}

/// One device's step of the life cycle.
#[allow(clippy::too_many_arguments)]
fn scan_device(
    xs: &mut XenStore,
    cfg: &SessionConfig,
    executor: &str,
    active: &Active,
    start: &mut dyn FnMut(&mut XenStore, u16, u32) -> Option<u64>,
    be_dir: &str,
    domid: u16,
    devid: u32,
) -> Result<(), XenError> {
    let fe_dir = xs.read_string(&vgpu::key(be_dir, be::FRONTEND))?;
    if fe_dir != vgpu::frontend_dir(domid, devid) {
        return Err(XenError::InvalidArgument(format!("frontend path {fe_dir} does not match the device")));
    }
    let online = xs.try_read(&vgpu::key(be_dir, be::ONLINE))?.is_some_and(|v| v == b"1");
    let bstate = read_state(xs, be_dir)?;
    if !online {
        if bstate != XenbusState::Closed {
            write_state(xs, be_dir, XenbusState::Closed)?;
        }
        return Ok(());
    }
    let fstate = frontend_state(xs, be_dir, &fe_dir)?;
    let claimed = xs.try_read(&vgpu::key(&fe_dir, fe::CLAIM))?.is_some();
    match bstate {
        XenbusState::Unknown | XenbusState::Initialising | XenbusState::Closed => {
            if claimed || matches!(fstate, XenbusState::Initialised | XenbusState::Connected) {
                // A frontend that died holding the device.
                reset(xs, be_dir, &fe_dir)?;
            } else if !fstate.is_closing() || fstate == XenbusState::Closed {
                advertise(xs, be_dir, cfg, executor)?;
                tracing::debug!(device = %be_dir, "advertised");
            }
        }
        XenbusState::InitWait if fstate == XenbusState::Initialised => begin(xs, active, start, be_dir, &fe_dir, domid, devid)?,
        XenbusState::Connected | XenbusState::Closing => {
            // No session here: a previous backend's, or one that died.
            reset(xs, be_dir, &fe_dir)?;
        }
        _ => {}
    }
    Ok(())
}

/// The frontend's state. A state the guest garbled is read as the guest
/// being gone: the device goes back to a clean `Closed` (and is advertised
/// again next pass), and the error is reported.
fn frontend_state(xs: &mut XenStore, be_dir: &str, fe_dir: &str) -> Result<XenbusState, XenError> {
    match read_state(xs, fe_dir) {
        Err(e @ XenError::BadValue { .. }) => {
            reset(xs, be_dir, fe_dir)?;
            Err(e)
        }
        r => r,
    }
}

/// Starts the session of a device whose frontend is `Initialised`, marked
/// active before it starts (it may end, and unmark itself, before `start`
/// returns); a device whose session cannot start is reset.
#[allow(clippy::too_many_arguments)]
fn begin(
    xs: &mut XenStore,
    active: &Active,
    start: &mut dyn FnMut(&mut XenStore, u16, u32) -> Option<u64>,
    be_dir: &str,
    fe_dir: &str,
    domid: u16,
    devid: u32,
) -> Result<(), XenError> {
    active.lock().unwrap_or_else(|p| p.into_inner()).insert((domid, devid), 0);
    match start(xs, domid, devid) {
        Some(id) => {
            if let Some(v) = active.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&(domid, devid)) {
                *v = id;
            }
        }
        None => {
            active.lock().unwrap_or_else(|p| p.into_inner()).remove(&(domid, devid));
            reset(xs, be_dir, fe_dir)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvgpu_xen::xenstore::fake::{Fake, SharedFake};

    /// A fake store with guests `domids`, each with vgpu device 0 created;
    /// a client of it; the backend's domain.
    fn guests(domids: &[u16]) -> (SharedFake, XenStore, u16) {
        let store = SharedFake::new(Fake::default());
        let mut xs = store.connect();
        let me = xs.domid().unwrap();
        for &domid in domids {
            xs.write(&format!("/local/domain/{domid}/name"), b"guest").unwrap();
            vgpu::create_device(&mut xs, me, domid, 0).unwrap();
        }
        (store, xs, me)
    }

    /// Guest 1 writes garbage into its device's state; guest 2's device
    /// must still be advertised, and guest 1's put back to a clean state.
    #[test]
    fn one_guests_garbage_skips_only_its_device() {
        let (_store, mut xs, me) = guests(&[1, 2]);
        xs.write(&vgpu::key(&vgpu::frontend_dir(1, 0), fe::STATE), b"not a state").unwrap();
        let active: Active = Default::default();
        let mut skipped = Vec::new();
        scan(&mut xs, &SessionConfig::default(), "host", &active, &mut |_, _, _| None, &mut |d, _| skipped.push(d.to_string())).unwrap();
        assert_eq!(read_state(&mut xs, &vgpu::backend_dir(me, 2, 0)).unwrap(), XenbusState::InitWait);
        assert_eq!(skipped, [vgpu::backend_dir(me, 1, 0)]);
        // The garbled device was reset, so the next pass advertises it.
        scan(&mut xs, &SessionConfig::default(), "host", &active, &mut |_, _, _| None, &mut |d, _| skipped.push(d.to_string())).unwrap();
        assert_eq!(read_state(&mut xs, &vgpu::backend_dir(me, 1, 0)).unwrap(), XenbusState::InitWait);
        assert_eq!(skipped.len(), 1);
    }

    /// A device directory the backend cannot read (here: a frontend path
    /// that points elsewhere) is skipped, not fatal.
    #[test]
    fn unreadable_device_does_not_stop_the_scan() {
        let (_store, mut xs, me) = guests(&[1, 2]);
        xs.rm(&vgpu::key(&vgpu::backend_dir(me, 1, 0), be::FRONTEND)).unwrap();
        let active: Active = Default::default();
        let mut n = 0;
        scan(&mut xs, &SessionConfig::default(), "host", &active, &mut |_, _, _| None, &mut |_, _| n += 1).unwrap();
        assert_eq!(n, 1);
        assert_eq!(read_state(&mut xs, &vgpu::backend_dir(me, 2, 0)).unwrap(), XenbusState::InitWait);
    }

    /// The supervisor ends sessions whose guest went away or closed its
    /// device, and only those.
    #[test]
    fn departed_finds_sessions_whose_guest_left() {
        let (_store, mut xs, _) = guests(&[1, 2, 4]);
        for domid in [1, 2, 4] {
            write_state(&mut xs, &vgpu::frontend_dir(domid, 0), XenbusState::Connected).unwrap();
        }
        let active: Active = Default::default();
        active.lock().unwrap().extend([((1, 0), 11), ((2, 0), 12), ((4, 0), 14), ((5, 0), 0)]);
        assert!(departed(&mut xs, &active).is_empty());
        write_state(&mut xs, &vgpu::frontend_dir(1, 0), XenbusState::Closing).unwrap();
        xs.rm("/local/domain/2").unwrap();
        let mut gone = departed(&mut xs, &active);
        gone.sort();
        assert_eq!(gone, [11, 12]);
    }

    /// The supervisor reads a frontend's ring and checks it before the
    /// worker sees it; the worker's argument round-trips.
    #[test]
    fn the_ring_is_read_checked_and_handed_over() {
        let (_store, mut xs, _) = guests(&[1]);
        let fe_dir = vgpu::frontend_dir(1, 0);
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 1 << 20 };
        for (k, v) in [
            (fe::REQ_SIZE, "4096".to_string()),
            (fe::RSP_SIZE, "4096".into()),
            (fe::DATA_SIZE, (1u32 << 20).to_string()),
            (fe::PAGE_COUNT, g.pages().to_string()),
            (fe::DIR_REF_COUNT, "1".into()),
            ("dir-ref-0", "77".into()),
            (fe::EVENT_CHANNEL, "9".into()),
            (fe::PROTOCOL, "1".into()),
        ] {
            xs.write(&vgpu::key(&fe_dir, k), v.as_bytes()).unwrap();
        }
        let cfg = SessionConfig::default();
        let ring = XenRing::read(&mut xs, 1, 0, &cfg).unwrap();
        assert_eq!(ring, XenRing { geometry: g, dir_refs: vec![77], port: 9, region_addr: 0 });
        assert_eq!(XenRing::from_arg(&ring.to_arg()), Some(ring));
        // A guest that claims a billion directory pages is refused before
        // the supervisor reads one.
        xs.write(&vgpu::key(&fe_dir, fe::DIR_REF_COUNT), b"1000000000").unwrap();
        assert!(XenRing::read(&mut xs, 1, 0, &cfg).is_err());
        xs.write(&vgpu::key(&fe_dir, fe::DIR_REF_COUNT), b"1").unwrap();
        xs.write(&vgpu::key(&fe_dir, fe::DATA_SIZE), b"99999999999").unwrap();
        assert!(XenRing::read(&mut xs, 1, 0, &cfg).is_err());
    }
}
