//! The control socket: the backend's control API (HTTP/1.1 and JSON, see
//! [`pvgpu_ctl`]) on a Unix socket only the backend's user may open.
//!
//! This room sits above the supervisor and reaches it through one narrow
//! trait, [`Sessions`]; it parses nothing a guest sends. Requests come
//! from the host's operator (or root), one at a time on the control
//! thread, and each is answered and its connection closed.

mod dashboard;
mod https;
mod metrics_http;
mod migrate;
pub(crate) mod room;
mod routes;
mod socket;
mod supervised;
mod tenant_admin;
mod tenant_routes;

use pvgpu_ctl::api::{self, CheckpointReport, CheckpointRequest, RestoreReport, RestoreRequest, Session};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

pub use metrics_http::{MetricsError, MetricsServer};
pub use socket::SocketError;
pub use supervised::Supervised;
pub use tenant_admin::TenantDesk;

/// What the control API may ask of the supervisor.
pub trait Sessions: Send + Sync {
    /// The live sessions, lowest number first.
    fn list(&self) -> Vec<Session>;
    /// Session `id`, if live.
    fn get(&self, id: u64) -> Option<Session>;
    /// Ends session `id`; returns it as it was, or `None` if not live.
    fn end(&self, id: u64) -> Option<Session>;
    /// Checkpoints session `id`; waits for it.
    fn checkpoint(&self, id: u64, req: CheckpointRequest) -> Result<CheckpointReport, Refusal>;
    /// Parks a snapshot for its guest to take back.
    fn restore(&self, req: RestoreRequest) -> Result<RestoreReport, Refusal>;
    /// Parks a snapshot uploaded as a request's body (`len` bytes, as its
    /// Content-Length says) for its guest to take back.
    fn restore_upload(&self, body: &mut dyn std::io::Read, len: Option<u64>) -> Result<RestoreReport, Refusal> {
        let _ = (body, len);
        Err(Refusal::new(404, "This backend does not take uploaded snapshots".into()))
    }
    /// Lets go of what the backend holds for a snapshot (parked, or device
    /// memory kept for a session that left).
    fn discard(&self, req: api::DiscardRequest) -> Result<api::DiscardReport, Refusal> {
        Err(Refusal::new(404, format!("This backend holds nothing for {}", req.file)))
    }
    /// Prepares a worker from a session's skeleton, before its migration's
    /// pause; waits for it.
    fn prepare(&self, req: api::PrepareRequest) -> Result<api::PrepareReport, Refusal> {
        Err(Refusal::new(404, format!("This backend prepares no workers ({})", req.file)))
    }
    /// Whether the session `meta` describes could be restored here (its
    /// GPUs, their models, its quotas), before it leaves where it runs.
    fn check(&self, meta: pvgpu_ctl::snapshot::Meta) -> Result<(), Refusal> {
        Err(Refusal::new(404, format!("This backend checks no sessions (session {})", meta.session)))
    }
    /// Records where a session this backend checkpointed lives now.
    fn record_move(&self, req: pvgpu_ctl::api::MoveRecord) -> Result<(), Refusal> {
        let _ = req;
        Err(Refusal::new(404, "This backend does not record moves".into()))
    }
    /// The backends this one may move sessions to.
    fn peers(&self) -> Vec<api::Peer> {
        Vec::new()
    }
    /// Moves session `id` to one of the peers; waits for it.
    fn migrate(&self, id: u64, req: api::MigrateRequest) -> Result<pvgpu_ctl::migrate::MigrateReport, Refusal> {
        Err(Refusal::new(404, format!("This backend moves no sessions (session {id} to {})", req.peer)))
    }
    /// The parked snapshots.
    fn waiting(&self) -> Vec<pvgpu_ctl::api::Waiting> {
        Vec::new()
    }
    /// Tenants and keys, where the backend keeps them (`--state-dir`).
    fn tenants(&self) -> Option<&dyn TenantAdmin> {
        None
    }
    /// What `/metrics` reports.
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        None
    }
    /// The backend's GPUs: drained or not, who uses them, their gauges.
    fn devices(&self) -> Vec<api::Gpu> {
        self.metrics().map(|m| m.gpus()).unwrap_or_default()
    }
    /// Drains GPU `ordinal` (`on`: new sessions are not given it), or gives
    /// it back; returns it as it is now.
    fn drain(&self, ordinal: usize, on: bool) -> Result<api::Gpu, Refusal> {
        let _ = on;
        Err(Refusal::new(404, format!("This backend does not drain GPUs (GPU {ordinal})")))
    }
}

/// What the control API may ask about tenants and their keys.
pub trait TenantAdmin: Send + Sync {
    /// Every tenant, by name, with what it holds now.
    fn list(&self) -> Vec<api::Tenant>;
    /// Tenant `name`.
    fn get(&self, name: &str) -> Result<api::Tenant, Refusal>;
    /// Adds a tenant.
    fn add(&self, req: api::NewTenant) -> Result<api::Tenant, Refusal>;
    /// Sets a tenant's quota; its live sessions are held to it from their
    /// next allocation.
    fn set_quota(&self, name: &str, quota: api::Quota) -> Result<api::Tenant, Refusal>;
    /// Makes `peer` (`uid:N`, `domain:NAME`) a member of tenant `name`
    /// (`add`), or takes it out: its next sessions are the tenant's, or
    /// its own again.
    fn set_member(&self, name: &str, peer: &str, add: bool) -> Result<api::Tenant, Refusal>;
    /// Removes a tenant: its keys are revoked and its sessions ended.
    fn remove(&self, name: &str) -> Result<api::Revoked, Refusal>;
    /// Issues a key.
    fn issue(&self, name: &str, req: api::IssueKey) -> Result<api::IssuedKey, Refusal>;
    /// A tenant's keys.
    fn keys(&self, name: &str) -> Result<Vec<api::Key>, Refusal>;
    /// Revokes key `id` of tenant `name` (or all its keys): new
    /// connections with it are refused and its live sessions end.
    fn revoke(&self, name: &str, id: Option<&str>) -> Result<api::Revoked, Refusal>;
}

/// A request the supervisor would not or could not carry out: the HTTP
/// status and what to tell the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// What happened and what to do.
    pub message: String,
}

impl Refusal {
    /// A refusal with `status`.
    pub fn new(status: u16, message: String) -> Refusal {
        Refusal { status, message }
    }
}

/// How often the control thread looks at the backend's stop flag.
const TICK: Duration = Duration::from_millis(100);

/// A control socket being served; dropping it stops it and removes the
/// socket file.
pub struct ControlServer {
    /// The socket file (none for HTTP over TCP).
    path: Option<PathBuf>,
    /// The TCP address (HTTP over TCP).
    addr: Option<std::net::SocketAddr>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Over TLS: the directory of the inner HTTP server's socket.
    _inner: Option<https::PrivateDir>,
}

impl ControlServer {
    /// Binds the control socket at `path` and serves `sessions` on a thread
    /// of its own until the server is dropped.
    pub fn start(path: &Path, sessions: Arc<dyn Sessions>) -> Result<ControlServer, SocketError> {
        let server = socket::bind(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mine = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pvgpu-control".into())
            .spawn(move || serve(&server, sessions, None, &mine))
            .map_err(|e| SocketError::Io { path: path.to_path_buf(), source: e })?;
        tracing::info!(path = %path.display(), "control socket (pvgpu-ctl --control unix:PATH)");
        Ok(ControlServer { path: Some(path.to_path_buf()), addr: None, stop, threads: vec![thread], _inner: None })
    }

    /// Serves the control API and the web dashboard over HTTP at `addr`
    /// (`host:port`, port 0 picks one): every API request must carry
    /// `Authorization: Bearer TOKEN` with `token`'s bytes; the dashboard's
    /// page asks for it.
    pub fn start_http(addr: &str, token: pvgpu_ring::tcp_auth::TcpKey, sessions: Arc<dyn Sessions>) -> Result<ControlServer, SocketError> {
        let err = |message: String| SocketError::Serve { path: PathBuf::from(addr), message };
        let server = tiny_http::Server::http(addr).map_err(|e| err(e.to_string()))?;
        let bound = server.server_addr().to_ip().ok_or_else(|| err("not an IP address".into()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mine = stop.clone();
        let token = Arc::new(token);
        let thread = std::thread::Builder::new()
            .name("pvgpu-control-http".into())
            .spawn(move || serve(&server, sessions, Some(token), &mine))
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(address = %bound, "control API and dashboard over HTTP (a bearer token is required)");
        Ok(ControlServer { path: None, addr: Some(bound), stop, threads: vec![thread], _inner: None })
    }

    /// [`ControlServer::start_http`] inside TLS with `tls`'s certificate:
    /// TLS ends on a listener of its own, which relays each connection to
    /// the HTTP server on a Unix socket only the backend's user may open.
    pub fn start_https(
        addr: &str,
        token: pvgpu_ring::tcp_auth::TcpKey,
        tls: Arc<rustls::ServerConfig>,
        sessions: Arc<dyn Sessions>,
    ) -> Result<ControlServer, SocketError> {
        let err = |message: String| SocketError::Serve { path: PathBuf::from(addr), message };
        let dir = https::PrivateDir::new().map_err(|e| err(format!("no private directory for the inner socket: {e}")))?;
        let inner = dir.0.join("http.sock");
        let server = socket::bind(&inner)?;
        let listener = std::net::TcpListener::bind(addr).map_err(|e| err(e.to_string()))?;
        let bound = listener.local_addr().map_err(|e| err(e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let token = Arc::new(token);
        let mine = stop.clone();
        let serving = std::thread::Builder::new()
            .name("pvgpu-control-https".into())
            .spawn(move || serve(&server, sessions, Some(token), &mine))
            .map_err(|e| err(e.to_string()))?;
        let (mine, path) = (stop.clone(), inner.clone());
        let accepting = std::thread::Builder::new()
            .name("pvgpu-control-tls-accept".into())
            .spawn(move || https::accept_loop(listener, tls, path, &mine))
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(address = %bound, "control API and dashboard over HTTPS (a bearer token is required)");
        Ok(ControlServer { path: Some(inner), addr: Some(bound), stop, threads: vec![serving, accepting], _inner: Some(dir) })
    }

    /// The TCP address of an HTTP control server.
    pub fn addr(&self) -> Option<std::net::SocketAddr> {
        self.addr
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The bearer token HTTP requests must carry (none on the Unix socket,
/// which only the backend's user can open).
type Guard = Option<Arc<pvgpu_ring::tcp_auth::TcpKey>>;

fn serve(server: &tiny_http::Server, sessions: Arc<dyn Sessions>, guard: Guard, stop: &AtomicBool) {
    each_request(server, stop, "control socket", |request| {
        // Over HTTP, the page's files and refusals are answered on this
        // thread: a stranger's requests start no thread.
        let Some(request) = routes::answer_unless_authorized(request, guard.as_deref()) else { return };
        // A checkpoint waits for its session: each request that passed has
        // a thread of its own (only the operator, or a holder of the token
        // over HTTP, gets here).
        let sessions = sessions.clone();
        let r = std::thread::Builder::new().name("pvgpu-control-req".into()).spawn(move || routes::answer(request, sessions.as_ref()));
        if let Err(e) = r {
            tracing::warn!(error = %e, "control socket: cannot start a thread for a request");
        }
    });
}

/// Hands each request `server` receives to `handle` until `stop` is set
/// (looked at every [`TICK`]); `what` names the server in logs.
fn each_request(server: &tiny_http::Server, stop: &AtomicBool, what: &str, mut handle: impl FnMut(tiny_http::Request)) {
    while !stop.load(Ordering::SeqCst) {
        match server.recv_timeout(TICK) {
            Ok(Some(request)) => handle(request),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "{what}: receiving a request failed");
                std::thread::sleep(TICK);
            }
        }
    }
}
