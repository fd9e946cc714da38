//! The Xen transport: the ring on pages this guest grants to the backend
//! domain, an event channel as the doorbell, and the xenbus handshake in
//! XenStore (see `docs/xenstore.md`).
//!
//! Connecting claims a free vgpu device of this domain (one device serves
//! one session), grants the region and a directory of its grant
//! references, offers an event channel, publishes them in one transaction
//! with the state `Initialised`, and waits for the backend to be
//! `Connected`. The guest kernel clears the region's "frontend alive" byte
//! and signals the backend if this process dies; the backend's kernel does
//! the same for the "backend alive" byte, which this side checks whenever it
//! wakes, so neither side waits forever on a dead peer. Dropping the
//! transport moves the device to `Closing` and `Closed`, releases it, and
//! frees the ring's pages once the backend has unmapped them.

use super::ring::RingTransport;
use crate::Options;
use crate::error::TransportError;
use pvgpu_ring::layout::{BACKEND_ALIVE, FRONTEND_ALIVE, Geometry, init_region};
use pvgpu_ring::region::SharedRegion;
use pvgpu_xen::vgpu::{self, be, fe, read_num};
use pvgpu_xen::xenbus::{read_state, write_state};
use pvgpu_xen::{EvtchnNotifier, GntAlloc, XenError, XenStore, XenbusState, XsAccess};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HANDSHAKE: Duration = Duration::from_secs(15);

fn err(step: &'static str) -> impl FnOnce(XenError) -> TransportError {
    move |source| TransportError::Xen { step, source }
}

fn refused(reason: String) -> TransportError {
    TransportError::Refused { addr: "xen".into(), reason }
}

/// Whether this process runs in a Xen guest that has a vgpu device.
pub fn available() -> bool {
    if !std::path::Path::new("/dev/xen/xenbus").exists() && !std::path::Path::new("/proc/xen/xenbus").exists() {
        return false;
    }
    let Ok(mut xs) = XenStore::open() else { return false };
    xs.directory("device/vgpu").is_ok_and(|d| !d.is_empty())
}

/// Releases the claimed device when the transport goes away.
struct Claim {
    xs: XenStore,
    fe_dir: String,
    token: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let (fe_dir, token) = (self.fe_dir.clone(), self.token.clone());
        let r = self.xs.transaction(|tx| {
            // The backend releases the claim of a session it ended (and may
            // have handed the device to another connection since): leave a
            // device that is no longer ours alone.
            if tx.try_read(&vgpu::key(&fe_dir, fe::CLAIM))?.as_deref() != Some(token.as_bytes()) {
                return Ok(());
            }
            write_state(tx, &fe_dir, XenbusState::Closing)?;
            write_state(tx, &fe_dir, XenbusState::Closed)?;
            tx.try_rm(&vgpu::key(&fe_dir, fe::CLAIM)).map(drop)
        });
        if let Err(e) = r {
            tracing::warn!(device = %self.fe_dir, error = %e, "could not release the vgpu device");
        }
    }
}

/// Holds the ring's pages after the device is released until the backend
/// has unmapped them (its kernel clears the "backend alive" byte when it
/// does), at most [`UNMAP_WAIT`]. A grant this guest ends while the backend
/// still maps the page is not freed at once: the guest kernel frees it
/// later from a timer, a few at a time, and the grant table of a guest that
/// ran programs back to back filled up (seen in the Xen lab: all 64 grant
/// frames in use after about 35 short test programs).
struct UnmapWait(SharedRegion);

/// How long a closing connection waits for the backend to unmap its ring.
const UNMAP_WAIT: Duration = Duration::from_secs(3);

impl Drop for UnmapWait {
    fn drop(&mut self) {
        let start = Instant::now();
        while self.0.read_byte(BACKEND_ALIVE).is_ok_and(|b| b == 1) && start.elapsed() < UNMAP_WAIT {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Notices that this guest was saved and restored (`xl save`, `xl
/// restore`) under the ring: the restored guest is a new domain, the
/// ring's grants and event channel went with the old one, and nothing will
/// ever answer on it. The "backend alive" byte cannot tell: the backend's
/// kernel cleared it in the old domain's memory, if at all after the
/// guest's memory was saved. The domain id read from XenStore can; it is
/// read at most once every [`DOMAIN_CHECK`], from waits the ring's waiter
/// wakes from every 200 ms.
struct SameDomain {
    xs: std::sync::Mutex<(XenStore, Instant)>,
    domid: u16,
    moved: std::sync::atomic::AtomicBool,
}

/// How often a waiting call asks XenStore for this guest's domain id.
const DOMAIN_CHECK: Duration = Duration::from_secs(1);

impl SameDomain {
    /// Watches through `xs`, the connection's own XenStore handle once its
    /// handshake is done.
    fn new(xs: XenStore, domid: u16) -> SameDomain {
        SameDomain { xs: std::sync::Mutex::new((xs, Instant::now())), domid, moved: false.into() }
    }

    /// False once this guest is known to run under another domain id. An
    /// unanswered XenStore leaves the answer as it was.
    fn still(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.moved.load(Relaxed) {
            return false;
        }
        let Ok(mut held) = self.xs.try_lock() else { return true };
        let (xs, last) = &mut *held;
        if last.elapsed() < DOMAIN_CHECK {
            return true;
        }
        *last = Instant::now();
        match xs.domid() {
            Ok(now) if now != self.domid => {
                tracing::info!(was = self.domid, now, "this guest was restored as another domain: its ring is gone");
                self.moved.store(true, Relaxed);
                false
            }
            _ => true,
        }
    }
}

/// A claim value unique to this connection: the process id (for
/// `pvgpu-xl list`) and a per-connection tag, since several connections of
/// one process may race for the same device.
fn claim_token() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}.{n}.{t}", std::process::id())
}

/// Claims a free device: returns its frontend and backend directories and
/// the backend's domain id. The claim is made in a transaction and read
/// back afterwards, so that two connections can never both hold a device.
fn claim(xs: &mut XenStore, domid: u16, want: Option<u32>, token: &str) -> Result<(String, String, u16), TransportError> {
    let root = vgpu::frontend_root(domid);
    let deadline = Instant::now() + HANDSHAKE;
    loop {
        let mut ids: Vec<u32> = match want {
            Some(d) => vec![d],
            None => xs
                .directory(&root)
                .map_err(|_| refused(format!("no vgpu device is attached to domain {domid}: run `pvgpu-xl attach` in Dom0")))?
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect(),
        };
        ids.sort_unstable();
        let mut busy = 0;
        for devid in ids {
            let fe_dir = vgpu::frontend_dir(domid, devid);
            let got = xs
                .transaction(|tx| {
                    let be_dir = tx.read_string(&vgpu::key(&fe_dir, fe::BACKEND))?;
                    let backend_id: u16 = read_num(tx, &fe_dir, fe::BACKEND_ID)?;
                    let fstate = read_state(tx, &fe_dir)?;
                    let bstate = read_state(tx, &be_dir)?;
                    let claimed = tx.try_read(&vgpu::key(&fe_dir, fe::CLAIM))?.is_some();
                    let free = !claimed
                        && matches!(fstate, XenbusState::Initialising | XenbusState::Closed | XenbusState::Unknown)
                        && bstate == XenbusState::InitWait;
                    if !free {
                        return Ok(None);
                    }
                    tx.write(&vgpu::key(&fe_dir, fe::CLAIM), token.as_bytes())?;
                    write_state(tx, &fe_dir, XenbusState::Initialising)?;
                    Ok(Some((be_dir, backend_id)))
                })
                .map_err(err("claiming a vgpu device"))?;
            match got {
                Some((be_dir, backend_id)) => {
                    let owner = xs.try_read(&vgpu::key(&fe_dir, fe::CLAIM)).map_err(err("reading the claim back"))?;
                    if owner.as_deref() == Some(token.as_bytes()) {
                        tracing::debug!(device = %fe_dir, claim = %token, "claimed");
                        return Ok((fe_dir, be_dir, backend_id));
                    }
                    tracing::debug!(device = %fe_dir, "lost the device to another connection");
                    busy += 1;
                }
                None => busy += 1,
            }
        }
        if Instant::now() >= deadline {
            return Err(refused(format!(
                "none of the {busy} vgpu devices of domain {domid} is free (each serves one program; is pvgpu-backend running in Dom0? attach more with `pvgpu-xl attach --count`)"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_backend(xs: &mut XenStore, be_dir: &str, want: XenbusState) -> Result<(), TransportError> {
    let deadline = Instant::now() + HANDSHAKE;
    let path = vgpu::key(be_dir, be::STATE);
    xs.watch(&path, "pvgpu-fe").map_err(err("watching the backend"))?;
    let r = loop {
        match read_state(xs, be_dir) {
            Ok(s) if s == want => break Ok(()),
            Ok(s) if s.is_closing() => break Err(refused(format!("the backend refused the device (state {s})"))),
            Ok(_) => {}
            Err(e) => break Err(err("reading the backend state")(e)),
        }
        let now = Instant::now();
        if now >= deadline {
            break Err(refused(format!("the backend did not reach {want} within {} s", HANDSHAKE.as_secs())));
        }
        let _ = xs.read_watch(Some((deadline - now).min(Duration::from_millis(500))));
    };
    let _ = xs.unwatch(&path, "pvgpu-fe");
    r
}

/// Connects over a vgpu device of this guest (`devid`, or the first free
/// one).
pub fn connect(devid: Option<u32>, opts: &Options) -> Result<RingTransport, TransportError> {
    let mut xs = XenStore::open().map_err(err("opening XenStore"))?;
    let domid = xs.domid().map_err(err("reading this domain's id"))?;
    let token = claim_token();
    let (fe_dir, be_dir, backend_id) = claim(&mut xs, domid, devid, &token)?;
    let claimed = Claim { xs: XenStore::open().map_err(err("opening XenStore"))?, fe_dir: fe_dir.clone(), token };

    let versions = xs.read_string(&vgpu::key(&be_dir, be::PROTOCOL_VERSIONS)).map_err(err("reading the backend's protocol versions"))?;
    if !versions.split(',').any(|v| v.trim() == "1") {
        return Err(refused(format!("the backend speaks protocol versions {versions}, this frontend speaks 1")));
    }
    let max_data: u64 = read_num(&mut xs, &be_dir, be::MAX_DATA_AREA).map_err(err("reading the backend's limits"))?;
    let max_chan: u32 = read_num(&mut xs, &be_dir, be::MAX_CHANNEL_SIZE).map_err(err("reading the backend's limits"))?;
    let staging = opts.xen_data_area.min(max_data) & !4095;
    let pinned = opts.xen_pinned.min(max_data.saturating_sub(staging)) & !4095;
    let g = Geometry { req_size: (64 << 10).min(max_chan), rsp_size: (32 << 10).min(max_chan), data_size: staging + pinned };
    g.validate(max_data)?;

    let gnt = GntAlloc::open().map_err(err("opening /dev/xen/gntalloc"))?;
    let pages = gnt.share(backend_id, g.pages(), true).map_err(err("granting the shared region"))?;
    let refs = pages.refs().to_vec();
    let dir_count = refs.len().div_ceil(vgpu::REFS_PER_DIR_PAGE);
    let dir = gnt.share(backend_id, dir_count, false).map_err(err("granting the reference directory"))?;
    let dir_refs = dir.refs().to_vec();
    let dir = SharedRegion::new(dir);
    let dir_area = dir.area(0, dir_count * 4096)?;
    for (i, r) in refs.iter().enumerate() {
        dir_area.write((i * 4) as u64, &r.to_le_bytes())?;
    }
    let notifier = EvtchnNotifier::offer(backend_id).map_err(err("offering an event channel"))?;
    pages.set_unmap_notify(FRONTEND_ALIVE as u64, Some(notifier.port()), true).map_err(err("arming the unmap notification"))?;
    let notice = pages.unmap_notice();
    let region = SharedRegion::new(pages);
    init_region(&region, &g)?;
    region.write_byte(FRONTEND_ALIVE, 1)?;

    let port = notifier.port();
    xs.transaction(|tx| {
        let w = |tx: &mut pvgpu_xen::xenstore::Transaction<'_>, k: &str, v: String| tx.write(&vgpu::key(&fe_dir, k), v.as_bytes());
        w(tx, fe::PAGE_COUNT, refs.len().to_string())?;
        w(tx, fe::DIR_REF_COUNT, dir_count.to_string())?;
        for (i, r) in dir_refs.iter().enumerate() {
            w(tx, &format!("{}{i}", fe::DIR_REF), r.to_string())?;
        }
        w(tx, fe::EVENT_CHANNEL, port.to_string())?;
        w(tx, fe::REQ_SIZE, g.req_size.to_string())?;
        w(tx, fe::RSP_SIZE, g.rsp_size.to_string())?;
        w(tx, fe::DATA_SIZE, g.data_size.to_string())?;
        w(tx, fe::PROTOCOL, "1".into())?;
        w(tx, fe::REGION_ADDR, (region.as_ptr() as usize).to_string())?;
        write_state(tx, &fe_dir, XenbusState::Initialised)
    })
    .map_err(err("publishing the ring"))?;
    wait_backend(&mut xs, &be_dir, XenbusState::Connected)?;
    write_state(&mut xs, &fe_dir, XenbusState::Connected).map_err(err("entering Connected"))?;
    tracing::debug!(device = %fe_dir, pages = refs.len(), port, "connected over Xen");

    let probe = region.clone();
    let unmapped = UnmapWait(region.clone());
    let here = SameDomain::new(xs, domid);
    let notifier = notifier.with_liveness(Arc::new(move || probe.read_byte(BACKEND_ALIVE).is_ok_and(|b| b == 1) && here.still()));
    // Retired (its session left), the connection lets go of its port: the
    // unmap notification keeps only clearing the byte, so that the kernel
    // holds the port no longer, and the port is unbound.
    let retire = Box::new(move || {
        if let Err(e) = notice.set(FRONTEND_ALIVE as u64, None, true) {
            tracing::warn!(error = %e, "could not disarm the ring's unmap notification");
        }
    });
    let t = RingTransport::new(region, &g, staging, Box::new(notifier), opts.spin, opts.timeout, "xen")?.on_retire(retire);
    // Dropped in order: the device released (the backend ends the session
    // and unmaps the ring), the directory, then the pages once unmapped.
    Ok(t.with_keepalive(Box::new((claimed, dir))).with_keepalive(Box::new(unmapped)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvgpu_xen::xenstore::fake::{Fake, SharedFake};

    /// The fake store's own domain.
    const DOM: u16 = 3;

    /// A store with `n` devices attached and advertised by backend domain 0.
    fn attached(n: u32) -> SharedFake {
        let store = SharedFake::new(Fake::default());
        let mut xs = store.connect();
        for devid in 0..n {
            vgpu::create_device(&mut xs, 0, DOM, devid).unwrap();
            write_state(&mut xs, &vgpu::backend_dir(0, DOM, devid), XenbusState::InitWait).unwrap();
        }
        store
    }

    fn value(store: &SharedFake, path: &str) -> Option<Vec<u8>> {
        store.with(|f| f.nodes.get(path).map(|n| n.0.clone()))
    }

    fn state(store: &SharedFake, dir: &str) -> XenbusState {
        read_state(&mut store.connect(), dir).unwrap()
    }

    #[test]
    fn tokens_differ_between_connections() {
        let (a, b) = (claim_token(), claim_token());
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}.", std::process::id())), "{a}");
    }

    #[test]
    fn each_connection_claims_its_own_device() {
        let store = attached(2);
        let mut xs = store.connect();
        let (a, a_be, backend) = claim(&mut xs, DOM, None, "a").unwrap();
        assert_eq!((a.as_str(), a_be.as_str(), backend), ("/local/domain/3/device/vgpu/0", "/local/domain/0/backend/vgpu/3/0", 0));
        let (b, ..) = claim(&mut xs, DOM, None, "b").unwrap();
        assert_eq!(b, vgpu::frontend_dir(DOM, 1));
        assert_eq!(value(&store, &vgpu::key(&a, fe::CLAIM)).as_deref(), Some(&b"a"[..]));
        assert_eq!(value(&store, &vgpu::key(&b, fe::CLAIM)).as_deref(), Some(&b"b"[..]));
        assert_eq!(state(&store, &a), XenbusState::Initialising);
    }

    #[test]
    fn a_device_with_a_backend_not_waiting_is_not_claimed() {
        let store = attached(2);
        let mut xs = store.connect();
        // Device 0's backend has not advertised it (still Initialising).
        write_state(&mut xs, &vgpu::backend_dir(0, DOM, 0), XenbusState::Initialising).unwrap();
        let (dir, ..) = claim(&mut xs, DOM, None, "a").unwrap();
        assert_eq!(dir, vgpu::frontend_dir(DOM, 1));
        assert_eq!(value(&store, &vgpu::key(&vgpu::frontend_dir(DOM, 0), fe::CLAIM)), None);
    }

    #[test]
    fn dropping_a_claim_releases_the_device() {
        let store = attached(1);
        let mut xs = store.connect();
        let (dir, ..) = claim(&mut xs, DOM, None, "a").unwrap();
        drop(Claim { xs: store.connect(), fe_dir: dir.clone(), token: "a".into() });
        assert_eq!(value(&store, &vgpu::key(&dir, fe::CLAIM)), None);
        assert_eq!(state(&store, &dir), XenbusState::Closed);
        // Free again for the next program.
        assert_eq!(claim(&mut xs, DOM, Some(0), "b").unwrap().0, dir);
    }

    #[test]
    fn a_claim_dropped_after_the_device_changed_hands_leaves_it_alone() {
        let store = attached(1);
        let mut xs = store.connect();
        let (dir, be_dir, _) = claim(&mut xs, DOM, None, "a").unwrap();
        let a = Claim { xs: store.connect(), fe_dir: dir.clone(), token: "a".into() };
        // The backend ends A's session (as it does for a broken frontend),
        // advertises the device again, and B claims it.
        xs.rm(&vgpu::key(&dir, fe::CLAIM)).unwrap();
        write_state(&mut xs, &dir, XenbusState::Closed).unwrap();
        write_state(&mut xs, &be_dir, XenbusState::InitWait).unwrap();
        assert_eq!(claim(&mut xs, DOM, Some(0), "b").unwrap().0, dir);
        drop(a);
        assert_eq!(value(&store, &vgpu::key(&dir, fe::CLAIM)).as_deref(), Some(&b"b"[..]));
        assert_eq!(state(&store, &dir), XenbusState::Initialising);
    }
}
