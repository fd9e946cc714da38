//! The supervisor: listeners, one session per accepted peer, session
//! counts and limits, shutdown.
//!
//! Each accepted connection becomes one session, served either on a thread
//! of this process ([`Isolation::Thread`]: tests, the embedded backend of
//! `pvgpu-bench`) or in a worker process of its own
//! ([`Isolation::Process`], the default of `pvgpu-backend`). On a GPU a
//! kernel fault poisons every CUDA context of the process that ran it, so
//! only process isolation keeps one guest's fault from ending the others'
//! sessions; it also makes clean-up unconditional (the worker's exit frees
//! its GPU memory).

use crate::admission::{self, Pools, Slots};
use crate::config::{AdmissionConfig, Config, ControlSocket, Listen, SessionConfig, WorkerCommand};
use crate::control::{ControlServer, Sessions, SocketError, Supervised};
use crate::exec::Executor;
use crate::handover::{Handover, Transport};
use crate::listener::{Accepted, ListenError, Listener, bind};
use crate::log_limit;
use crate::roster::Roster;
use crate::spawn::{OnEnd, ProcessSpawner, Spawner, Start, ThreadSpawner};
use pvgpu_ring::local::{self, Refusal};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::spawn::WORKER_FD;

/// Why the backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A listener could not be opened.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The control socket asked for could not be opened.
    #[error(transparent)]
    Control(#[from] SocketError),
    /// `/metrics` could not be served where asked.
    #[error(transparent)]
    Metrics(#[from] crate::control::MetricsError),
    /// The state database could not be read.
    #[error(transparent)]
    State(#[from] crate::tenants::StateError),
    /// A thread of the supervisor could not be started.
    #[error("Cannot start the {0} thread")]
    Thread(&'static str, #[source] io::Error),
}

/// Counters for operators and tests.
#[derive(Debug)]
pub struct Stats {
    sessions: Arc<Slots>,
    total: AtomicU64,
}

impl Stats {
    /// Sessions being served now.
    pub fn live(&self) -> usize {
        self.sessions.held()
    }
    /// Sessions started since the backend started.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }
    fn next_id(&self) -> u64 {
        self.total.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// A running backend. Dropping it (or [`Backend::shutdown`]) stops the
/// listeners, ends every session and frees their resources.
pub struct Backend {
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    listeners: Vec<JoinHandle<()>>,
    spawner: Arc<dyn Spawner>,
    tcp_addrs: Vec<SocketAddr>,
    local_paths: Vec<PathBuf>,
    control: Option<ControlServer>,
    control_http: Option<ControlServer>,
    metrics: Option<crate::control::MetricsServer>,
}

/// What every listener thread shares.
struct Shared {
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    pools: Pools,
    spawner: Arc<dyn Spawner>,
    admission: AdmissionConfig,
    session: SessionConfig,
    roster: Arc<Roster>,
    devices: Arc<crate::devices::Devices>,
}

/// Opens the control socket `cfg` asks for; one at the default path that
/// another backend serves is left out with a warning.
fn open_control(cfg: &ControlSocket, sessions: Arc<dyn Sessions>) -> Result<Option<ControlServer>, SocketError> {
    match cfg {
        ControlSocket::Off => Ok(None),
        ControlSocket::At(path) => ControlServer::start(path, sessions).map(Some),
        ControlSocket::Default(path) => match ControlServer::start(path, sessions) {
            Ok(c) => Ok(Some(c)),
            Err(e) => {
                tracing::warn!(error = %e, "no control socket for this backend");
                Ok(None)
            }
        },
    }
}

impl Backend {
    /// Starts a backend serving each session on a thread of this process.
    pub fn start_threads<E: Executor>(exec: Arc<E>, cfg: Config) -> Result<Backend, BackendError> {
        let spawner = Arc::new(ThreadSpawner::new(exec, cfg.session.clone(), cfg.admission.end_grace));
        Self::start(cfg, spawner)
    }

    /// Starts a backend serving each session in a worker process.
    pub fn start_processes(cfg: Config, worker: WorkerCommand) -> Result<Backend, BackendError> {
        let spawner = Arc::new(ProcessSpawner::new(worker, cfg.admission.end_grace));
        Self::start(cfg, spawner)
    }

    fn start(cfg: Config, spawner: Arc<dyn Spawner>) -> Result<Backend, BackendError> {
        // Once here, before this starts its threads, not while a session
        // moves (workers make theirs as they start).
        crate::fd_table::make_room();
        let pools = Pools::new(&cfg.admission);
        spawner.desk().copies.set_peers(
            cfg.peers.iter().map(|p| crate::peer_copy::PeerLink { address: p.listed.address.clone(), tls: p.tls.clone() }).collect(),
        );
        let stats = Arc::new(Stats { sessions: pools.sessions.clone(), total: AtomicU64::new(0) });
        let shared = Arc::new(Shared {
            stop: Arc::new(AtomicBool::new(false)),
            stats: stats.clone(),
            pools,
            spawner: spawner.clone(),
            admission: cfg.admission.clone(),
            session: cfg.session.clone(),
            roster: Arc::default(),
            devices: Arc::new(crate::devices::Devices::new(spawner.device_uuids().len(), cfg.admission.tenants.clone())?),
        });
        let tenants = cfg.admission.tenants.clone().map(|tenants| crate::control::TenantDesk {
            tenants,
            roster: shared.roster.clone(),
            spawner: spawner.clone(),
            ledgers: shared.pools.ledgers.clone(),
            default_cap: cfg.admission.peer_mem_quota.unwrap_or(u64::MAX),
        });
        let gpus = (spawner.executor() == "cuda").then(crate::exec::cuda::gpu_gauges).flatten();
        let arbiter = match cfg.session.gpu_slice {
            Some(slice) => {
                let a = Arc::new(crate::share::Arbiter::new(slice));
                crate::share::run(a.clone(), shared.roster.clone(), cfg.admission.tenants.clone(), shared.stop.clone())
                    .map_err(|e| BackendError::Thread("GPU turns", e))?;
                tracing::info!(slice_ms = slice.as_millis() as u64, "sessions take turns on each GPU, by their tenants' shares");
                Some(a)
            }
            None => None,
        };
        let metrics = crate::metrics::Metrics::new(
            shared.roster.clone(),
            cfg.admission.tenants.clone(),
            shared.pools.ledgers.clone(),
            gpus,
            shared.devices.clone(),
        )
        .with_arbiter(arbiter)
        .with_copies(spawner.desk().copies.counts.clone())
        .with_executor_uuids(spawner.device_uuids());
        let metrics_server = match &cfg.metrics {
            Some(addr) => Some(crate::control::MetricsServer::start(addr, metrics.clone())?),
            None => None,
        };
        let supervised: Arc<dyn Sessions> = Arc::new(
            Supervised::new(shared.roster.clone(), spawner.clone(), tenants, metrics)
                .with_peers(cfg.peers.clone())
                .with_limits(crate::control::room::Limits { session: cfg.session.limits.mem_quota, peer: cfg.admission.peer_mem_quota }),
        );
        let control = open_control(&cfg.control, supervised.clone())?;
        let control_http = match &cfg.control_http {
            Some(c) => Some(match &c.tls {
                Some(tls) => ControlServer::start_https(&c.addr, c.token.clone(), tls.clone(), supervised)?,
                None => ControlServer::start_http(&c.addr, c.token.clone(), supervised)?,
            }),
            None => None,
        };
        let mut bound = Vec::new();
        let mut tcp_addrs = Vec::new();
        let mut local_paths = Vec::new();
        for l in &cfg.listen {
            let (listener, addr) = bind(l, &cfg.admission)?;
            if let Some(a) = addr {
                let auth = if cfg.admission.tcp_key.is_some() { "key required" } else { "trusted network, no key" };
                if let Listen::Rdma(_) = l {
                    tracing::info!(address = %a, auth, "listening (rdma)");
                } else {
                    tracing::info!(address = %a, auth, "listening (tcp)");
                    tcp_addrs.push(a);
                }
            }
            if let Listen::Local(p) = l {
                tracing::info!(path = %p.display(), "listening (local shared memory)");
                local_paths.push(p.clone());
            }
            bound.push(listener);
        }
        let mut listeners = Vec::new();
        for listener in bound {
            let shared = shared.clone();
            let h = std::thread::Builder::new()
                .name("pvgpu-listener".into())
                .spawn(move || match listener {
                    Listener::Xen(xs) => xen_loop(xs, &shared),
                    other => accept_loop(other, &shared),
                })
                .map_err(|e| BackendError::Thread("listener", e))?;
            listeners.push(h);
        }
        Ok(Backend {
            stop: shared.stop.clone(),
            stats,
            listeners,
            spawner,
            tcp_addrs,
            local_paths,
            control,
            control_http,
            metrics: metrics_server,
        })
    }

    /// Bound TCP addresses (useful with port 0).
    pub fn tcp_addrs(&self) -> &[SocketAddr] {
        &self.tcp_addrs
    }

    /// Session counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// A flag that stops the backend when set (for signal handlers).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Stops listening, ends every session, frees everything, and waits.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    /// Where `/metrics` is served over TCP (`--metrics`), if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
    }

    /// Where the control API and dashboard are served over HTTP, if they are.
    pub fn control_http_addr(&self) -> Option<SocketAddr> {
        self.control_http.as_ref().and_then(|c| c.addr())
    }

    fn stop_all(&mut self) {
        self.control = None;
        self.control_http = None;
        self.metrics = None;
        self.stop.store(true, Ordering::SeqCst);
        // New programs find no socket from now on (a successor may bind the
        // path while this one ends its sessions).
        for p in self.local_paths.drain(..) {
            let _ = std::fs::remove_file(p);
        }
        for l in self.listeners.drain(..) {
            let _ = l.join();
        }
        self.spawner.shutdown();
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// How often a listener looks at its pool's deadlines and its workers.
const TICK: Duration = Duration::from_millis(100);

/// Accepts connections and hands each to an admission thread, which holds
/// a place in the transport's pool of openings while it opens (hello, TLS
/// handshake, key check), and gets a worker only once it has and a session
/// slot is free.
fn accept_loop(listener: Listener, sh: &Arc<Shared>) {
    let transport = listener.transport();
    let Some(pool) = sh.pools.pending(transport) else { return };
    while !sh.stop.load(Ordering::SeqCst) {
        let accepted = listener.accept(TICK);
        pool.expire();
        sh.spawner.tend();
        match accepted {
            // A connection that came in as the backend stops gets no
            // session (it would be ended a moment later): it is closed, and
            // its program tries again elsewhere or later.
            Ok(Some(_)) if sh.stop.load(Ordering::SeqCst) => {}
            Ok(Some(acc)) => enter(acc, sh),
            Ok(None) => {}
            Err(e) => {
                if log_limit::peer_triggered() {
                    tracing::warn!(transport = transport.name(), error = %e, "accept failed");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Puts a new connection in its transport's pool of openings and starts
/// its admission thread; a peer at its most is refused at once.
fn enter(acc: Accepted, sh: &Arc<Shared>) {
    let (peer, transport) = (acc.peer(), acc.transport());
    let Some(pool) = sh.pools.pending(transport) else { return };
    let Ok(dup) = acc.dup() else { return };
    let pending = match pool.enter(&peer, dup) {
        Ok(p) => p,
        Err(full) => {
            if let Accepted::Unix { sock, .. } = &acc {
                local::refuse(sock, Refusal::Busy, sh.session.max_data_area);
            }
            admission::log_refusal(&peer, transport, &admission::Refused::Full(full));
            return;
        }
    };
    let sh2 = sh.clone();
    let r = std::thread::Builder::new().name("pvgpu-admit".into()).spawn(move || admit(acc, pending, &sh2));
    if let Err(e) = r {
        tracing::error!(error = %e, "cannot start an admission thread");
    }
}

/// One connection's opening, then its session; for TLS and RDMA, this
/// thread then relays the session's traffic.
fn admit(acc: Accepted, pending: admission::pending::Pending, sh: &Shared) {
    let (peer, transport) = (acc.peer(), acc.transport());
    match admission::open(acc, pending, &sh.admission, &sh.pools, sh.session.max_data_area, &sh.spawner.desk().copies) {
        // Another backend's copy, parked for its session.
        Ok(None) => {}
        Ok(Some(admission::Admitted { handover, slot, seat, relay, tenant })) => {
            let id = sh.stats.next_id();
            let scope = tenant.as_ref().map(|t| crate::tenants::peer_of(&t.name));
            let gpus = gpus_for(sh, tenant.as_ref().map(|t| t.name.as_str()));
            let (on_end, meter) = enroll(sh, id, &handover, &seat, tenant, None);
            let start = Start { handover, id, slot, seat, on_ready: None, on_end: Some(on_end), meter, scope, gpus };
            if let Err(e) = sh.spawner.spawn(start, sh.stop.clone()) {
                sh.roster.remove(id);
                tracing::error!(session = id, error = %e, "cannot start a session");
                return;
            }
            if let Some(relay) = relay {
                relay.run();
            }
        }
        Err(why) => admission::log_refusal(&peer, transport, &why),
    }
}

/// The GPUs a new session of `tenant` (or of no tenant) is given.
fn gpus_for(sh: &Shared, tenant: Option<&str>) -> Option<Vec<usize>> {
    let quota = tenant.and_then(|t| sh.admission.tenants.as_ref()?.quota(t));
    sh.devices.for_session(quota.as_ref().and_then(|q| q.gpus.as_deref()))
}

/// Puts session `id` on the roster with a meter of its own; returns what
/// runs when it has ended (`then`, and taking it off the roster) and the
/// meter.
fn enroll(
    sh: &Shared,
    id: u64,
    handover: &Handover,
    seat: &crate::ledger::Seat,
    tenant: Option<crate::roster::TenantOf>,
    then: Option<OnEnd>,
) -> (OnEnd, Option<Arc<crate::meter::Meter>>) {
    let meter = match crate::meter::Meter::new() {
        Ok(m) => Some(Arc::new(m)),
        Err(e) => {
            tracing::warn!(session = id, error = %e, "no meter for this session: /metrics leaves it out, and it takes no GPU turns");
            None
        }
    };
    sh.roster.add(id, handover.owner().0, handover.transport(), seat.view(), tenant, meter.clone());
    let roster = sh.roster.clone();
    let on_end: OnEnd = Box::new(move || {
        roster.remove(id);
        if let Some(f) = then {
            f();
        }
    });
    (on_end, meter)
}

/// Serves Xen guests: rescans the vgpu devices whenever XenStore changes
/// under the backend's directory (and every second, to notice sessions that
/// ended), starts a session for each frontend that is ready, and ends the
/// sessions of guests that went away or closed their device.
fn xen_loop(mut xs: pvgpu_xen::XenStore, sh: &Shared) {
    if let Err(why) = watch_devices(&mut xs) {
        tracing::error!(error = %why, "not serving Xen guests");
        return;
    }
    let active: crate::xen::Active = Default::default();
    let mut last_scan = Instant::now() - Duration::from_secs(10);
    while !sh.stop.load(Ordering::SeqCst) {
        sh.spawner.tend();
        let event = matches!(xs.read_watch(Some(2 * TICK)), Ok(Some(_)));
        if !event && last_scan.elapsed() < Duration::from_secs(1) {
            continue;
        }
        last_scan = Instant::now();
        for id in crate::xen::departed(&mut xs, &active) {
            sh.spawner.end(id);
        }
        scan_devices(&mut xs, sh, &active);
    }
}

/// Watches the backend's vgpu directory.
fn watch_devices(xs: &mut pvgpu_xen::XenStore) -> Result<(), String> {
    let me = xs.domid().map_err(|e| format!("cannot read this domain's id: {e}"))?;
    let root = pvgpu_xen::vgpu::backend_root(me);
    xs.watch(&root, "pvgpu-backend").map_err(|e| format!("cannot watch {root}: {e}"))?;
    tracing::info!(path = %root, "serving Xen guests' vgpu devices");
    Ok(())
}

/// One pass over the vgpu devices: a session for each frontend that is
/// ready.
fn scan_devices(xs: &mut pvgpu_xen::XenStore, sh: &Shared, active: &crate::xen::Active) {
    let mut start = |xs: &mut pvgpu_xen::XenStore, domid: u16, devid: u32| start_xen_session(xs, sh, active, domid, devid);
    let mut skipped = |device: &str, e: pvgpu_xen::XenError| {
        if log_limit::peer_triggered() {
            tracing::warn!(device, error = %e, "skipping a vgpu device this pass");
        }
    };
    if let Err(e) = crate::xen::scan(xs, &sh.session, sh.spawner.executor(), active, &mut start, &mut skipped) {
        if log_limit::peer_triggered() {
            tracing::warn!(error = %e, "scanning vgpu devices failed");
        }
    }
}

/// Starts the session of guest `domid`'s device `devid`, whose frontend
/// published its ring; returns its number.
fn start_xen_session(xs: &mut pvgpu_xen::XenStore, sh: &Shared, active: &crate::xen::Active, domid: u16, devid: u32) -> Option<u64> {
    // The supervisor reads what the guest published; its worker reads no
    // XenStore.
    let ring = match crate::xen::XenRing::read(xs, domid, devid, &sh.session) {
        Ok(r) => r,
        Err(e) => {
            if log_limit::peer_triggered() {
                tracing::warn!(domid, devid, error = %pvgpu_ring::report::Chain(&e), "refusing a Xen frontend's ring");
            }
            return None;
        }
    };
    let handover = Handover::Xen { domid, devid, ring };
    let peer = handover.owner().0;
    let member = xen_member(xs, sh, domid);
    let held = match &member {
        Some((name, quota)) => sh.pools.tenant_session(Transport::Xen, name, quota),
        None => sh.pools.session(Transport::Xen, &peer),
    };
    let (slot, seat) = match held {
        Ok(held) => held,
        Err(why) => {
            admission::log_refusal(&peer, Transport::Xen, &why);
            return None;
        }
    };
    let id = sh.stats.next_id();
    let set = active.clone();
    let close: OnEnd = Box::new(move || {
        // The device's XenStore side is the supervisor's: the worker holds
        // none once it serves.
        crate::xen::close_device(domid, devid);
        set.lock().unwrap_or_else(|p| p.into_inner()).remove(&(domid, devid));
    });
    let tenant = member.map(|(name, _)| crate::roster::TenantOf { name, key: None });
    let scope = tenant.as_ref().map(|t| crate::tenants::peer_of(&t.name)).or_else(|| xen_vm(xs, domid));
    let gpus = gpus_for(sh, tenant.as_ref().map(|t| t.name.as_str()));
    let (on_end, meter) = enroll(sh, id, &handover, &seat, tenant, Some(close));
    let on_ready: OnEnd = Box::new(move || crate::xen::connect_device(domid, devid));
    let start = Start { handover, id, slot, seat, on_ready: Some(on_ready), on_end: Some(on_end), meter, scope, gpus };
    match sh.spawner.spawn(start, sh.stop.clone()) {
        Ok(()) => Some(id),
        Err(e) => {
            sh.roster.remove(id);
            tracing::error!(session = id, error = %e, "cannot start a session");
            None
        }
    }
}

/// The virtual machine guest `domid` runs, as the scope of its sessions'
/// snapshots and handles ([`crate::admission::peer::xen_vm_scope`]): the
/// toolstack writes `/local/domain/DOMID/vm` (`/vm/UUID`) and
/// `/vm/UUID/uuid`, neither of which the guest may write. Where
/// `/vm/UUID` is gone, the UUID its path names (a migration to this host
/// that failed removes it with the incoming domain, which shared it).
/// `None` (the domain's own scope) where they are missing or malformed.
fn xen_vm(xs: &mut impl pvgpu_xen::XsAccess, domid: u16) -> Option<String> {
    let vm = xs.try_read(&format!("/local/domain/{domid}/vm")).ok().flatten()?;
    let vm = std::str::from_utf8(&vm).ok().filter(|p| p.starts_with("/vm/") && !p.contains(".."))?;
    match xs.try_read(&format!("{vm}/uuid")) {
        Ok(Some(uuid)) => crate::admission::peer::xen_vm_scope(&uuid),
        Ok(None) => crate::admission::peer::xen_vm_scope(&vm.as_bytes()["/vm/".len()..]),
        Err(_) => None,
    }
}

/// The tenant whose member guest `domid` is, by its domain name
/// (`domain:NAME`; the toolstack writes `/local/domain/DOMID/name`, which
/// the guest may read and not write), and its quota.
fn xen_member(xs: &mut pvgpu_xen::XenStore, sh: &Shared, domid: u16) -> Option<(String, pvgpu_ctl::api::Quota)> {
    use pvgpu_xen::XsAccess;
    let tenants = sh.admission.tenants.as_ref()?;
    let name = xs.try_read(&format!("/local/domain/{domid}/name")).ok().flatten()?;
    tenants.of_member(&format!("domain:{}", String::from_utf8_lossy(&name)))
}

#[cfg(test)]
mod tests {
    use super::xen_vm;
    use pvgpu_xen::XsAccess;
    use pvgpu_xen::xenstore::fake::{Fake, SharedFake};

    #[test]
    fn a_guest_s_virtual_machine_is_found_by_its_uuid_or_its_path() {
        let store = SharedFake::new(Fake::default());
        let mut xs = store.connect();
        let uuid = "79d806dc-ec54-11f1-b1c5-2acebac06069";
        assert_eq!(xen_vm(&mut xs, 2), None, "no vm path: the domain's own scope");
        xs.write("/local/domain/2/vm", format!("/vm/{uuid}").as_bytes()).unwrap();
        xs.write(&format!("/vm/{uuid}/uuid"), uuid.as_bytes()).unwrap();
        assert_eq!(xen_vm(&mut xs, 2).as_deref(), Some(&*format!("xen-vm:{uuid}")));
        // A failed migration to this host removed /vm/UUID with the
        // incoming domain: the path still names it.
        xs.rm(&format!("/vm/{uuid}")).unwrap();
        assert_eq!(xen_vm(&mut xs, 2).as_deref(), Some(&*format!("xen-vm:{uuid}")));
        xs.write("/local/domain/3/vm", b"/vm/not-a-uuid").unwrap();
        assert_eq!(xen_vm(&mut xs, 3), None);
        xs.write("/local/domain/4/vm", b"/elsewhere/x").unwrap();
        assert_eq!(xen_vm(&mut xs, 4), None);
    }
}
