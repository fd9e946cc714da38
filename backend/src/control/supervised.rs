//! What the control API asks of the supervisor, done through the roster
//! and the spawner: listing and ending sessions, ordering checkpoints and
//! parking snapshots for restore ([`crate::checkpoints`]).

use super::tenant_admin::TenantDesk;
use super::{Refusal, Sessions, TenantAdmin};
use crate::metrics::Events;
use crate::metrics::board;
use crate::roster::Roster;
use crate::spawn::Spawner;
use pvgpu_ctl::api::{CheckpointReport, CheckpointRequest, RestoreReport, RestoreRequest, Session};
use pvgpu_ctl::snapshot::{self, Reader};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The supervisor, as the control API sees it.
pub struct Supervised {
    roster: Arc<Roster>,
    spawner: Arc<dyn Spawner>,
    tenants: Option<TenantDesk>,
    metrics: crate::metrics::Metrics,
    peers: Vec<crate::peers::Peer>,
    limits: super::room::Limits,
}

impl Supervised {
    /// The sessions of `roster`, run by `spawner`, and the tenants where
    /// the backend keeps them.
    pub fn new(
        roster: Arc<Roster>,
        spawner: Arc<dyn Spawner>,
        tenants: Option<TenantDesk>,
        metrics: crate::metrics::Metrics,
    ) -> Supervised {
        let limits = super::room::Limits { session: None, peer: None };
        Supervised { roster, spawner, tenants, metrics, peers: Vec::new(), limits }
    }

    /// The memory quotas a session restored here is held to (checked
    /// before a snapshot is taken: [`super::room`]).
    pub fn with_limits(mut self, limits: super::room::Limits) -> Supervised {
        self.limits = limits;
        self
    }

    /// The backends sessions may be moved to ([`Sessions::migrate`]).
    pub fn with_peers(mut self, peers: Vec<crate::peers::Peer>) -> Supervised {
        self.peers = peers;
        self
    }
}

/// Room for the snapshot of a session holding `memory` bytes of device
/// memory, made while it still runs: its pause is then for its copies, not
/// for the file's pages (`pvgpu_ctl::snapshot::make_room`). A room too
/// small only leaves the rest to be had as the file is written.
fn make_room(file: &std::fs::File, memory: u64, id: u64) {
    /// Room beyond the device memory, for module images and the rest.
    const SLACK: u64 = 64 << 20;
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get().min(8));
    let t = Instant::now();
    match pvgpu_ctl::snapshot::make_room(file, memory + SLACK, threads) {
        Ok(made) => {
            tracing::info!(session = id, bytes = memory + SLACK, made, secs = t.elapsed().as_secs_f64(), "room made for a snapshot")
        }
        Err(e) => tracing::warn!(session = id, error = %e, "no room made for the snapshot; its pages come as it is written"),
    }
}

/// Whose session the snapshot in `file` holds, and the bytes of device
/// memory it says were handed over in place (nothing where it cannot be
/// read).
fn handed_of(file: &File) -> (String, u64) {
    let len = file.metadata().map_or(0, |m| m.len());
    let mut r = std::io::BufReader::new(file);
    if r.rewind().is_err() {
        return (String::new(), 0);
    }
    Reader::open(r, len).map_or((String::new(), 0), |(_, m)| (m.peer.clone(), handed_bytes(&m)))
}

/// Bytes of device memory `meta` says were handed over in place.
fn handed_bytes(meta: &snapshot::Meta) -> u64 {
    meta.state.handed.iter().map(|h| h.length).sum()
}

fn absolute(file: &str) -> Result<PathBuf, Refusal> {
    let p = PathBuf::from(file);
    if p.is_absolute() { Ok(p) } else { Err(Refusal::new(400, format!("{file:?} is not an absolute path"))) }
}

impl Supervised {
    fn take_checkpoint(&self, id: u64, req: CheckpointRequest) -> Result<CheckpointReport, Refusal> {
        self.roster.get(id).ok_or_else(|| Refusal::new(404, format!("No live session {id} (`pvgpu-ctl sessions` lists them)")))?;
        let path = absolute(&req.file)?;
        let file = OpenOptions::new().write(true).read(true).create_new(true).mode(0o600).open(&path).map_err(|e| {
            let status = if e.kind() == std::io::ErrorKind::AlreadyExists { 409 } else { 400 };
            Refusal::new(status, format!("Cannot create {}: {e} (a checkpoint writes a new file)", path.display()))
        })?;
        let keep = file.try_clone().map_err(|e| Refusal::new(500, format!("cannot duplicate the file: {e}")))?;
        let t = Instant::now();
        // Memory handed over in place is not written (where it cannot be,
        // the rest of the file's pages come as it is written).
        let memory = if req.hand_over || req.skeleton { 0 } else { self.roster.get(id).map_or(0, |s| s.memory_bytes) };
        make_room(&file, memory, id);
        let room_seconds = t.elapsed().as_secs_f64();
        let desk = self.spawner.desk();
        // A skeleton leaves nothing and hands nothing over.
        let kind = crate::checkpoints::OrderKind {
            stay: req.leave_running || req.skeleton,
            hand_over: req.hand_over && !req.leave_running && !req.skeleton,
            skeleton: req.skeleton,
        };
        let done = desk.order(id, file, kind);
        // A session its spawner does not list yet (a worker serves as soon
        // as it has its connection, a moment before) is told once listed;
        // only one gone from the roster is refused. Refusing the first as
        // "ending" failed CI's checkpoint tests under load.
        if !self.spawner.nudge(id) && self.roster.get(id).is_none() {
            desk.withdraw(id);
            let _ = std::fs::remove_file(&path);
            return Err(Refusal::new(404, format!("Session {id} is ending")));
        }
        let wait = Duration::from_secs(req.timeout_seconds.unwrap_or(60));
        tracing::info!(session = id, file = %path.display(), stay = req.leave_running, "checkpoint ordered");
        match done.recv_timeout(wait) {
            Ok(Ok(written)) => {
                if !kind.stay {
                    // Its worker may still let go of its context a moment.
                    self.roster.depart(id);
                }
                let (handed_bytes, handed_from) = self.serve_handed(&keep, &path, written.token, written.handed, wait);
                Ok(CheckpointReport {
                    session: id,
                    file: path.display().to_string(),
                    state_bytes: written.bytes,
                    file_bytes: keep.metadata().map_or(0, |m| m.len()),
                    seconds: t.elapsed().as_secs_f64(),
                    room_seconds,
                    held_seconds: written.held.as_secs_f64(),
                    left_running: req.leave_running,
                    handed_bytes,
                    handed_from,
                })
            }
            Ok(Err(_)) => {
                let mut why = String::new();
                let _ = (&keep).rewind().and_then(|()| (&keep).take(4096).read_to_string(&mut why));
                let _ = std::fs::remove_file(&path);
                Err(Refusal::new(409, format!("Session {id} was not checkpointed: {why}")))
            }
            Err(_) => {
                desk.withdraw(id);
                let _ = std::fs::remove_file(&path);
                Err(Refusal::new(
                    504,
                    format!(
                        "Session {id} made no call that waits for a reply within {} s (a checkpoint is taken at one); nothing was written and it goes on. An idle program's library makes such a call when asked, unless the library is too old to be asked over TCP, TLS or RDMA (upgrade the program's pvgpu library) or the program is held in a call that does not return; retry with a longer --timeout.",
                        wait.as_secs()
                    ),
                ))
            }
        }
    }

    /// Keeps the memory a checkpoint handed over in place and serves it at
    /// `<snapshot>.handed` for `life` (the backend that restores the
    /// snapshot fetches it): its bytes, and where it is served.
    fn serve_handed(
        &self,
        file: &File,
        path: &Path,
        token: crate::ipc::Token,
        handed: Vec<std::os::fd::OwnedFd>,
        life: Duration,
    ) -> (u64, Option<String>) {
        if handed.is_empty() {
            return (0, None);
        }
        let (peer, bytes) = handed_of(file);
        let desk = self.spawner.desk().clone();
        desk.keep_handed(token, crate::checkpoints::Kept { fds: handed, peer, path: path.to_path_buf(), bytes });
        let at = PathBuf::from(format!("{}.handed", path.display()));
        match crate::handed_memory::serve(desk, token, at.clone(), life) {
            Ok(()) => (bytes, Some(at.display().to_string())),
            Err(e) => {
                tracing::warn!(error = %e, at = %at.display(), "cannot serve the memory handed over; restore the snapshot at this backend");
                (bytes, None)
            }
        }
    }

    fn park_snapshot(&self, req: RestoreRequest) -> Result<RestoreReport, Refusal> {
        let path = absolute(&req.file)?;
        let (file, meta) = open_snapshot(&path)?;
        self.park(file, meta, path, req.handed_from.as_deref())
    }

    /// The memory `meta`'s session handed over in place: kept here (it
    /// left this backend), or fetched from where the backend it left
    /// serves it.
    fn handed_memory(
        &self,
        meta: &snapshot::Meta,
        token: &crate::ipc::Token,
        from: Option<&str>,
        path: &Path,
    ) -> Result<Vec<std::os::fd::OwnedFd>, Refusal> {
        if meta.state.handed.is_empty() {
            return Ok(Vec::new());
        }
        let want = meta.state.handed.len();
        let fds = match (self.spawner.desk().take_handed(token), from) {
            (Some(kept), _) if kept.fds.len() != want => {
                let came = kept.fds.len();
                self.spawner.desk().put_back_handed(*token, kept);
                return Err(Refusal::new(409, format!("{}: this backend holds {came} pieces of its memory handed over, of {want}", path.display())));
            }
            (Some(kept), _) => kept.fds,
            (None, Some(from)) => crate::handed_memory::fetch(Path::new(from), want).map_err(|e| {
                Refusal::new(409, format!("{}: its device memory was handed over in place and cannot be had from {from}: {e}; restore it at the backend that wrote it", path.display()))
            })?,
            (None, None) => {
                return Err(Refusal::new(
                    409,
                    format!("{}: its device memory was handed over in place (it stayed on the GPU) and this backend does not hold it; restore it at the backend that wrote it", path.display()),
                ));
            }
        };
        Ok(fds)
    }

    /// Parks a checked snapshot (`path` names it for operators), with the
    /// memory handed over in place `handed_from` serves where it has some.
    fn park(&self, file: File, meta: snapshot::Meta, path: PathBuf, handed_from: Option<&str>) -> Result<RestoreReport, Refusal> {
        if meta.skeleton {
            return Err(Refusal::new(
                422,
                format!("{} is a session's skeleton, which prepares a worker (POST /v1/prepare); it holds no session", path.display()),
            ));
        }
        let token = self.admissible(&meta, &path)?;
        self.room_for(&meta, &path)?;
        let report = RestoreReport {
            session: meta.session,
            peer: meta.peer.clone(),
            state_bytes: meta.state_bytes,
            devices: meta.devices.iter().map(|d| format!("{}: {}", d.ordinal, d.name)).collect(),
        };
        // Last: memory fetched is the target's from here on.
        let handed = (self.handed_memory(&meta, &token, handed_from, &path)?, handed_bytes(&meta));
        tracing::info!(file = %path.display(), peer = %meta.peer, session = meta.session, handed = handed.0.len(), "snapshot parked until its guest comes back");
        let held = super::room::held(&meta);
        self.spawner.desk().park(token, meta.peer, file, path, handed, held);
        self.spawner.parked(&token, &meta.state);
        Ok(report)
    }

    /// Prepares a worker from the skeleton `req` names.
    fn prepare_worker(&self, req: &pvgpu_ctl::api::PrepareRequest) -> Result<pvgpu_ctl::api::PrepareReport, Refusal> {
        let t = Instant::now();
        let path = absolute(&req.file)?;
        let (file, meta) = open_snapshot(&path)?;
        if !meta.skeleton {
            return Err(Refusal::new(422, format!("{} is not a skeleton (a checkpoint with \"skeleton\": true)", path.display())));
        }
        self.admissible(&meta, &path)?;
        self.room_for(&meta, &path)?;
        let wait = Duration::from_secs(req.timeout_seconds.unwrap_or(60));
        self.spawner
            .prepare(&file, &meta, wait)
            .map_err(|why| Refusal::new(409, format!("no worker was prepared from {}: {why}", path.display())))?;
        tracing::info!(peer = %meta.peer, session = meta.session, secs = t.elapsed().as_secs_f64(), "worker prepared for a session on its way");
        Ok(pvgpu_ctl::api::PrepareReport { session: meta.session, seconds: t.elapsed().as_secs_f64() })
    }

    /// Whether `meta`'s session fits the quotas here ([`super::room`]).
    fn room_for(&self, meta: &snapshot::Meta, path: &Path) -> Result<(), Refusal> {
        let tenants = self.tenants.as_ref().map(|t| &*t.tenants);
        let token = snapshot::token_from_hex(&meta.token);
        let parked = self.spawner.desk().parked_usage(&meta.peer, token.as_ref());
        super::room::check(meta, path, self.limits, (&self.roster, parked), tenants)
    }

    /// Whether `meta`'s session could run here: its executor, its GPUs
    /// and their models, those its peer gets here; its token.
    fn admissible(&self, meta: &snapshot::Meta, path: &Path) -> Result<crate::ipc::Token, Refusal> {
        if meta.executor != self.spawner.executor() {
            return Err(Refusal::new(
                422,
                format!("{} ran on the {} executor; this backend runs {}", path.display(), meta.executor, self.spawner.executor()),
            ));
        }
        let token = snapshot::token_from_hex(&meta.token)
            .ok_or_else(|| Refusal::new(400, format!("{}: a malformed session token", path.display())))?;
        // A GPU the session used or saw that this backend lacks: refused
        // now, while the file is the operator's, not when its program
        // comes back (the models are checked then, in the worker).
        let count = self.metrics.devices().count();
        let named = meta.devices.iter().map(|d| d.ordinal).chain(meta.gpus.iter().flatten().copied());
        if let Some(missing) = named.filter(|&o| o >= count).max() {
            return Err(Refusal::new(
                422,
                format!(
                    "{} needs this backend's GPU {missing} (its program saw or used it), and this backend has {count}; restore it where the session's GPUs are",
                    path.display()
                ),
            ));
        }
        if let Some(why) = other_model(meta, &self.metrics.gpus(), &self.spawner.device_uuids()) {
            return Err(Refusal::new(422, format!("{}: {why}; restore it where the same GPU models are", path.display())));
        }
        // The GPUs its peer (its tenant) gets here now: the program's
        // device handles are places in the list it saw.
        let quota = meta.peer.strip_prefix("tenant:").and_then(|t| self.tenants.as_ref()?.tenants.quota(t));
        let here = self.metrics.devices().for_session(quota.as_ref().and_then(|q| q.gpus.as_deref()));
        if let Some(why) = other_gpus(meta, here, count) {
            return Err(Refusal::new(
                422,
                format!("{}: {why}; restore it once they are (undrain a GPU, or give the tenant its GPUs back)", path.display()),
            ));
        }
        Ok(token)
    }
}

impl Sessions for Supervised {
    fn list(&self) -> Vec<Session> {
        self.roster.list()
    }

    fn get(&self, id: u64) -> Option<Session> {
        self.roster.get(id)
    }

    fn end(&self, id: u64) -> Option<Session> {
        let s = self.roster.get(id)?;
        tracing::info!(session = id, peer = %s.peer, "ending a session (control socket)");
        self.spawner.end(id);
        Some(s)
    }

    fn checkpoint(&self, id: u64, req: CheckpointRequest) -> Result<CheckpointReport, Refusal> {
        let e = self.metrics.events();
        let r = self.take_checkpoint(id, req);
        match &r {
            Ok(report) => {
                Events::count(&e.checkpoints_written, 1);
                Events::count(&e.checkpoint_bytes, report.state_bytes);
            }
            Err(_) => Events::count(&e.checkpoints_failed, 1),
        }
        r
    }

    fn restore_upload(&self, body: &mut dyn std::io::Read, len: Option<u64>) -> Result<RestoreReport, Refusal> {
        let r = receive_snapshot(body, len).and_then(|(file, meta)| {
            let label = PathBuf::from(format!("(uploaded, {} bytes)", len.unwrap_or_default()));
            self.park(file, meta, label, None)
        });
        let e = self.metrics.events();
        Events::count(if r.is_ok() { &e.restores_accepted } else { &e.restores_refused }, 1);
        r
    }

    fn restore(&self, req: RestoreRequest) -> Result<RestoreReport, Refusal> {
        let r = self.park_snapshot(req);
        let e = self.metrics.events();
        Events::count(if r.is_ok() { &e.restores_accepted } else { &e.restores_refused }, 1);
        r
    }

    fn devices(&self) -> Vec<pvgpu_ctl::api::Gpu> {
        let devices = self.metrics.devices();
        let gauges = self.metrics.gpus();
        let live = self.roster.list();
        let uuids = self.spawner.device_uuids();
        (0..devices.count())
            .map(|i| {
                let mut g = board(&gauges, i, uuids.get(i)).cloned().unwrap_or_else(|| pvgpu_ctl::api::Gpu {
                    index: i as u32,
                    name: format!("{} executor device {i}", self.spawner.executor()),
                    ..Default::default()
                });
                g.drained = devices.is_drained(i);
                g.executor_uuid = uuids.get(i).map(|u| pvgpu_ctl::snapshot::hex(u)).unwrap_or_default();
                g.sessions = live.iter().filter(|s| s.devices.contains(&i)).map(|s| s.id).collect();
                g
            })
            .collect()
    }

    fn drain(&self, ordinal: usize, on: bool) -> Result<pvgpu_ctl::api::Gpu, Refusal> {
        self.metrics.devices().set_drained(ordinal, on).map_err(|e| Refusal::new(e.status(), e.to_string()))?;
        self.devices().into_iter().nth(ordinal).ok_or_else(|| Refusal::new(404, format!("No GPU {ordinal}")))
    }

    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(&self.metrics)
    }

    fn tenants(&self) -> Option<&dyn TenantAdmin> {
        self.tenants.as_ref().map(|t| t as &dyn TenantAdmin)
    }

    fn discard(&self, req: pvgpu_ctl::api::DiscardRequest) -> Result<pvgpu_ctl::api::DiscardReport, Refusal> {
        let (parked, kept_bytes) = self.spawner.desk().discard(Path::new(&req.file));
        if !parked && kept_bytes == 0 {
            return Err(Refusal::new(
                404,
                format!("This backend holds nothing for {} (`pvgpu-ctl restores` lists what it holds)", req.file),
            ));
        }
        tracing::info!(file = %req.file, parked, kept_bytes, "what a snapshot held here was discarded; its program cannot go on from it");
        Ok(pvgpu_ctl::api::DiscardReport { parked, kept_bytes })
    }

    fn prepare(&self, req: pvgpu_ctl::api::PrepareRequest) -> Result<pvgpu_ctl::api::PrepareReport, Refusal> {
        self.prepare_worker(&req)
    }

    fn check(&self, meta: snapshot::Meta) -> Result<(), Refusal> {
        let named = PathBuf::from(format!("session {} of {}", meta.session, meta.peer));
        self.admissible(&meta, &named)?;
        self.room_for(&meta, &named)
    }

    fn record_move(&self, req: pvgpu_ctl::api::MoveRecord) -> Result<(), Refusal> {
        let token = snapshot::token_from_hex(&req.token).ok_or_else(|| Refusal::new(400, "a malformed session token".into()))?;
        if !crate::peers::guest_address(&req.to) {
            return Err(Refusal::new(
                400,
                format!(
                    "{:?} is not an address a guest can be sent to (local:PATH, tcp:HOST:PORT or tls:HOST:PORT, at most 64 bytes)",
                    req.to
                ),
            ));
        }
        self.spawner.desk().record_move(token, req.peer, req.to);
        Events::count(&self.metrics.events().migrations_out, 1);
        Ok(())
    }

    fn peers(&self) -> Vec<pvgpu_ctl::api::Peer> {
        self.peers.iter().map(|p| p.listed.clone()).collect()
    }

    fn migrate(&self, id: u64, req: pvgpu_ctl::api::MigrateRequest) -> Result<pvgpu_ctl::migrate::MigrateReport, Refusal> {
        let r = super::migrate::migrate(self, &self.peers, id, req);
        if r.is_err() {
            Events::count(&self.metrics.events().migrations_failed, 1);
        }
        r
    }

    fn waiting(&self) -> Vec<pvgpu_ctl::api::Waiting> {
        self.spawner.desk().parked()
    }
}

/// Opens a snapshot for restore: a file only its owner may change, whole
/// (digest checked), with a description that parses.
/// A GPU the snapshot used that is another model here, as NVML names it
/// (where the backend reads NVML; the worker checks the model and memory
/// again when the program comes back).
fn other_model(meta: &snapshot::Meta, gpus: &[crate::metrics::GpuReading], uuids: &[[u8; 16]]) -> Option<String> {
    meta.devices.iter().find_map(|d| {
        let here = board(gpus, d.ordinal, uuids.get(d.ordinal))?;
        (here.name != d.name)
            .then(|| format!("the session used GPU {}, a {}, and this backend's GPU {} is a {}", d.ordinal, d.name, d.ordinal, here.name))
    })
}

/// The snapshot's program saw other GPUs than its peer gets here now
/// (`here`: the session's list, `None` all `count` GPUs), as the worker
/// would find when the program comes back: a tenant's GPUs changed, or one
/// was drained.
fn other_gpus(meta: &snapshot::Meta, here: Option<Vec<usize>>, count: usize) -> Option<String> {
    let saw = meta.gpus.clone().unwrap_or_else(|| (0..count).collect());
    let here = here.unwrap_or_else(|| (0..count).collect());
    (saw != here).then(|| format!("its program saw this backend's GPUs {saw:?}, and its peer {} gets {here:?} here now", meta.peer))
}

fn open_snapshot(path: &Path) -> Result<(File, snapshot::Meta), Refusal> {
    let bad = |status, why: String| Refusal::new(status, format!("{}: {why}; nothing was restored", path.display()));
    let mut file = File::open(path).map_err(|e| bad(400, e.to_string()))?;
    let md = file.metadata().map_err(|e| bad(400, e.to_string()))?;
    if md.mode() & 0o022 != 0 {
        return Err(bad(403, "others may write it (a snapshot must be its owner's only: chmod 600)".into()));
    }
    // Before the check: a writer since then breaks it (crate::file_guard).
    crate::file_guard::lease(&file);
    let meta = check_snapshot(&mut file, md.len()).map_err(|(status, why)| bad(status, why))?;
    Ok((file, meta))
}

/// Checks a snapshot of `len` bytes: its digest, then its description.
fn check_snapshot(file: &mut File, len: u64) -> Result<snapshot::Meta, (u16, String)> {
    snapshot::verify_file(file, len).map_err(|e| (422, e.to_string()))?;
    // The check reads at offsets; the description from the start.
    file.rewind().map_err(|e| (400, e.to_string()))?;
    let (_, meta) = Reader::open(std::io::BufReader::new(&mut *file), len).map_err(|e| (422, e.to_string()))?;
    Ok(meta)
}

/// Takes an uploaded snapshot of `len` bytes into memory of this process
/// (a sealed-off memory file, not a path anyone else can open) and checks it.
fn receive_snapshot(body: &mut dyn std::io::Read, len: Option<u64>) -> Result<(File, snapshot::Meta), Refusal> {
    let len = len.ok_or_else(|| Refusal::new(411, "An uploaded snapshot needs its Content-Length".into()))?;
    let bad = |status, why: String| Refusal::new(status, format!("the uploaded snapshot: {why}; nothing was restored"));
    let flags = nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING;
    let fd = nix::sys::memfd::memfd_create("pvgpu-snapshot", flags).map_err(|e| bad(507, format!("no memory file: {e}")))?;
    let mut file = File::from(fd);
    let got = std::io::copy(&mut body.take(len), &mut file).map_err(|e| bad(400, e.to_string()))?;
    if got != len {
        return Err(bad(400, format!("{got} of its {len} bytes came")));
    }
    // Sealed before the check: what the worker reads is what was checked.
    crate::file_guard::seal(&file).map_err(|e| bad(500, format!("cannot seal the memory file: {e}")))?;
    let meta = check_snapshot(&mut file, len).map_err(|(status, why)| bad(status, why))?;
    Ok((file, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, name: &str) -> crate::metrics::GpuReading {
        crate::metrics::GpuReading {
            index,
            drained: false,
            sessions: vec![],
            uuid: format!("GPU-{index}"),
            executor_uuid: String::new(),
            name: name.into(),
            utilization_ratio: None,
            memory_used_bytes: None,
            memory_total_bytes: None,
            temperature_celsius: None,
            power_watts: None,
        }
    }

    #[test]
    fn a_snapshot_whose_gpus_changed_is_refused_when_handed_over() {
        let meta: snapshot::Meta = serde_json::from_value(serde_json::json!({
            "created_unix_seconds": 0, "session": 1, "peer": "tenant:bob", "token": "00".repeat(16), "executor": "host",
            "devices": [], "gpus": [0, 1],
            "state_bytes": 0, "state": {"initialized": true, "contexts": [], "current": null, "allocations": [],
            "modules": [], "streams": [], "events": [], "pending_error": null}
        }))
        .unwrap();
        assert_eq!(other_gpus(&meta, None, 2), None, "every GPU, as before");
        assert_eq!(other_gpus(&meta, Some(vec![0, 1]), 4), None);
        let why = other_gpus(&meta, Some(vec![0]), 2).unwrap();
        assert!(why.contains("[0, 1]") && why.contains("tenant:bob gets [0]"), "{why}");
        assert!(other_gpus(&meta, Some(vec![1, 0]), 2).is_some(), "another order is other handles");
        assert!(other_gpus(&meta, None, 3).is_some(), "a GPU more");
    }

    #[test]
    fn a_snapshot_of_another_gpu_model_is_refused_when_handed_over() {
        let meta: snapshot::Meta = serde_json::from_value(serde_json::json!({
            "created_unix_seconds": 0, "session": 1, "peer": "uid:0", "token": "00".repeat(16), "executor": "cuda",
            "devices": [{"ordinal": 1, "name": "NVIDIA H100 80GB HBM3", "total_memory_bytes": 1}],
            "state_bytes": 0, "state": {"initialized": true, "contexts": [], "current": null, "allocations": [],
            "modules": [], "streams": [], "events": [], "pending_error": null}
        }))
        .unwrap();
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(other_model(&meta, &[gpu(0, "NVIDIA H200"), gpu(1, h100)], &[]), None);
        let why = other_model(&meta, &[gpu(0, h100), gpu(1, "NVIDIA H200")], &[]).unwrap();
        assert!(why.contains("GPU 1 is a NVIDIA H200"), "{why}");
        assert_eq!(other_model(&meta, &[], &[]), None, "without NVML the worker checks");
        // A backend run with CUDA_VISIBLE_DEVICES=1: its GPU 1 is NVML's 0.
        let mut first = gpu(0, h100);
        first.uuid = "GPU-d094f2eb-4547-d5f8-4334-d399797fcef9".into();
        let uuids = [[0; 16], [0xd0, 0x94, 0xf2, 0xeb, 0x45, 0x47, 0xd5, 0xf8, 0x43, 0x34, 0xd3, 0x99, 0x79, 0x7f, 0xce, 0xf9]];
        assert_eq!(crate::metrics::nvml_uuid(&uuids[1]), "GPU-d094f2eb-4547-d5f8-4334-d399797fcef9");
        let boards = [first, gpu(1, "NVIDIA H200")];
        assert_eq!(other_model(&meta, &boards, &uuids), None, "the board with the executor's UUID");
        assert_eq!(board(&boards, 1, uuids.get(1)).map(|g| g.index), Some(0));
        assert_eq!(board(&boards, 1, Some(&[7; 16])).map(|g| g.index), Some(1), "none has it: NVML's of that index");
    }
}
