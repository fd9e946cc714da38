//! What the control API's bodies hold. Field names are the JSON's; sizes
//! are in bytes and times in seconds, as Prometheus and most tools expect.

use serde::{Deserialize, Serialize};

/// A live session, as the backend's supervisor knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The session's number (counted from 1 since the backend started).
    pub id: u64,
    /// Who it serves: `uid:N` (local), `tcp:ADDRESS` (TCP and TLS), or
    /// `xen:DOMID`.
    pub peer: String,
    /// `local`, `tcp`, `tls` or `xen`.
    pub transport: String,
    /// The tenant whose key opened it (TCP and TLS with a tenant key).
    #[serde(default)]
    pub tenant: Option<String>,
    /// The id of that key.
    #[serde(default)]
    pub key: Option<String>,
    /// The ordinals of the devices it has made contexts on.
    pub devices: Vec<usize>,
    /// Device memory it holds now, as its quota counts it.
    pub memory_bytes: u64,
    /// Seconds since it was admitted.
    pub age_seconds: f64,
    /// When it was admitted, in seconds since the Unix epoch.
    pub started_unix_seconds: u64,
    /// Its GPU turn now under `--gpu-share weighted`: `holds GPU N`,
    /// `waits for GPU N`, or none.
    #[serde(default)]
    pub gpu_turn: Option<String>,
    /// GPU time it has held while others waited, under `--gpu-share
    /// weighted` (none otherwise).
    #[serde(default)]
    pub gpu_turn_seconds: Option<f64>,
    /// How it was rebuilt, where it was restored from a snapshot.
    #[serde(default)]
    pub restored: Option<Restored>,
}

/// How a session restored from a snapshot was rebuilt, by its worker, at
/// its guest's first call after the restore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restored {
    /// The session's number at the backend that checkpointed it.
    pub from_session: u64,
    /// When it served its guest again, in milliseconds since the Unix
    /// epoch.
    pub back_unix_ms: u64,
    /// Seconds from the guest's `Resume` to the session rebuilt (the
    /// snapshot claimed, read and rebuilt).
    pub rebuild_seconds: f64,
    /// Of those, making its contexts again.
    pub contexts_seconds: f64,
    /// Mapping and writing its device memory.
    pub memory_seconds: f64,
    /// Loading its modules and making its streams, events and arrays in
    /// their order.
    pub modules_seconds: f64,
    /// Its mirrors, arrays' elements and graphs.
    pub graphs_seconds: f64,
    /// Whether a worker prepared before the pause (`POST /v1/prepare`) had
    /// its contexts made and its modules loaded already.
    #[serde(default)]
    pub prepared: bool,
}

/// The body of every answer that is not a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong and what to do.
    pub error: String,
}

/// `POST /v1/sessions/ID/checkpoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRequest {
    /// Where to write the snapshot: an absolute path the backend creates
    /// (owner-only); it must not exist.
    pub file: String,
    /// Keep the session running on this backend afterwards (otherwise it
    /// leaves, and its guest waits for a restore).
    #[serde(default)]
    pub leave_running: bool,
    /// How long to wait for the session's next call that waits for a
    /// reply (where a checkpoint is taken); 60 s when absent.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// A leaving session hands its device memory over in place where it
    /// can, for a backend on the same GPU to restore without copying it
    /// (`pvgpu-ctl migrate` on one host): the snapshot then restores only
    /// with that memory, served beside it for the timeout
    /// ([`CheckpointReport::handed_from`]) and kept by this backend after.
    #[serde(default)]
    pub hand_over: bool,
    /// Write only what decides where a restore places things (contexts,
    /// address reservations, module images, streams, events, arrays,
    /// pools and limits in their order), without the device's bytes and
    /// without draining its work: a session keeps running, and the file
    /// serves only to prepare a target's worker before a migration's
    /// pause (`POST /v1/prepare`); it cannot be restored.
    #[serde(default)]
    pub skeleton: bool,
}

/// `POST /v1/prepare`: a worker rebuilds, from a skeleton checkpoint
/// ([`CheckpointRequest::skeleton`]), what decides where a restore places
/// things, and waits for the session's snapshot; the migration's pause is
/// then for the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrepareRequest {
    /// The skeleton (absolute path, owner-only).
    pub file: String,
    /// Seconds the prepared worker waits for its session's snapshot and
    /// program before it is dropped (default 60).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// A worker prepared for a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrepareReport {
    /// The session's number at the backend that wrote the skeleton.
    pub session: u64,
    /// Seconds the worker took to rebuild the skeleton.
    pub seconds: f64,
}

/// `POST /v1/restores/discard`: what a backend holds for a snapshot, let
/// go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscardRequest {
    /// The snapshot file, as `GET /v1/restores` names it.
    pub file: String,
}

/// What a discard let go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscardReport {
    /// A parked snapshot was dropped.
    pub parked: bool,
    /// Bytes of device memory kept on the GPU for a session that left,
    /// freed.
    pub kept_bytes: u64,
}

/// What a checkpoint wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointReport {
    /// The session.
    pub session: u64,
    /// The snapshot file.
    pub file: String,
    /// Bytes of device state in it.
    pub state_bytes: u64,
    /// Bytes of the file.
    pub file_bytes: u64,
    /// Seconds from the order to the report (room made for the file,
    /// waiting for the session's call, then writing).
    pub seconds: f64,
    /// Of those, seconds spent making room for the file before the
    /// session was asked (it ran on meanwhile; not part of its pause).
    #[serde(default)]
    pub room_seconds: f64,
    /// Of those, seconds the session was held for the checkpoint, from
    /// the call it was taken at to its report (its work drained, the
    /// file written): the checkpoint's part of its pause. The rest it ran
    /// on, up to that call. 0 from a backend that does not say.
    #[serde(default)]
    pub held_seconds: f64,
    /// Whether the session still runs here.
    pub left_running: bool,
    /// Bytes of device memory handed over in place, not written.
    #[serde(default)]
    pub handed_bytes: u64,
    /// Where that memory is served to the backend that restores the
    /// snapshot on the same GPU ([`RestoreRequest::handed_from`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_from: Option<String>,
}

/// `POST /v1/restore`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRequest {
    /// The snapshot file (absolute path).
    pub file: String,
    /// Where the backend that wrote it serves the device memory it handed
    /// over in place ([`CheckpointReport::handed_from`]), for a snapshot
    /// whose memory stayed on the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_from: Option<String>,
}

/// `POST /v1/moves`: a checkpointed session of this backend now lives at
/// another backend (`pvgpu-ctl migrate`); its guest's next `Resume` here
/// is told that address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRecord {
    /// The session's token, in hex (from its snapshot).
    pub token: String,
    /// Whose session it is (from its snapshot).
    pub peer: String,
    /// Where its guest finds it now, as `PVGPU_BACKEND` writes it
    /// (`local:PATH`, `tcp:HOST:PORT`, `tls:HOST:PORT`, `rdma:HOST:PORT`),
    /// at most 64 bytes.
    pub to: String,
}

/// A backend this one may move sessions to (`--peer`), as
/// `GET /v1/peers` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// The operator's name for it.
    pub name: String,
    /// Its control API (`unix:PATH` or `https://HOST:PORT`).
    pub control: String,
    /// Where guests reach it, as `PVGPU_BACKEND` writes it.
    pub address: String,
}

/// `POST /v1/sessions/{id}/migrate`: the backend moves the session to one
/// of its peers itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateRequest {
    /// The peer's name (`GET /v1/peers`).
    pub peer: String,
    /// Upload the snapshot even where the peer's control socket is on this
    /// host (always so over https).
    #[serde(default)]
    pub upload: bool,
    /// Copy the device memory into the snapshot even where the peer has
    /// the session's GPUs (otherwise it stays on the GPU, handed over in
    /// place).
    #[serde(default)]
    pub copy: bool,
    /// Restore into a fresh worker at the peer, not one prepared before the
    /// pause.
    #[serde(default)]
    pub cold: bool,
    /// Seconds to wait for the session's next call that waits (default 60).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Seconds to wait, after the move, for the session to serve its
    /// program at the peer, to report the whole pause (none: not waited).
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

/// A snapshot accepted for restore: its guest's next connection that
/// presents the session's token takes it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoreReport {
    /// The session's number where it was checkpointed.
    pub session: u64,
    /// Whose it is.
    pub peer: String,
    /// Bytes of device state.
    pub state_bytes: u64,
    /// The devices it used.
    pub devices: Vec<String>,
}

/// A restored snapshot waiting for its guest (`GET /v1/restores`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// Whose session it is.
    pub peer: String,
    /// The snapshot file.
    pub file: String,
    /// Bytes of the session's device memory this backend holds on the GPU
    /// for it (handed over in place).
    #[serde(default)]
    pub handed_bytes: u64,
    /// Not parked here: the session left this backend, which keeps only
    /// the memory it left on the GPU, until the snapshot is restored here
    /// or the backend it moved to takes it.
    #[serde(default)]
    pub kept: bool,
}

/// What a tenant may hold across all its sessions; `None`: no limit of
/// its own (the backend's limits still hold).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Device memory, in bytes.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Sessions at once.
    #[serde(default)]
    pub max_sessions: Option<u32>,
    /// The backend's GPUs (its ordinals) its sessions are given, in the
    /// order they see them; `None`: every GPU. Drained GPUs are left out
    /// of new sessions either way.
    #[serde(default)]
    pub gpus: Option<Vec<u32>>,
    /// Its share of GPU time against other tenants' under `--gpu-share
    /// weighted` (a weight, at least 1); `None`: 1, as a session outside
    /// every tenant has.
    #[serde(default)]
    pub gpu_share: Option<u32>,
}

/// `POST /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTenant {
    /// Its name: letters, digits, `.`, `_` and `-`, at most 64.
    pub name: String,
    /// What it may hold.
    #[serde(default)]
    pub quota: Quota,
    /// Local users (`uid:N`) and Xen guests (`domain:NAME`) whose sessions
    /// are the tenant's.
    #[serde(default)]
    pub members: Vec<String>,
}

/// A tenant: a name that keys belong to and quotas hold for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its name.
    pub name: String,
    /// What it may hold.
    pub quota: Quota,
    /// When it was made, in seconds since the Unix epoch.
    pub created_unix_seconds: u64,
    /// Keys that open sessions now (not revoked).
    pub live_keys: usize,
    /// Its sessions now.
    pub sessions: usize,
    /// Device memory its sessions hold now.
    pub memory_bytes: u64,
    /// Local users (`uid:N`) and Xen guests (`domain:NAME`) whose sessions
    /// are the tenant's, besides those opened with its keys.
    #[serde(default)]
    pub members: Vec<String>,
}

/// `POST /v1/tenants/NAME/keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueKey {
    /// Revoke the tenant's other keys for new connections (their live
    /// sessions go on).
    #[serde(default)]
    pub rotate: bool,
}

/// A key just issued: the only time its secret leaves the backend, which
/// keeps a verifier of it, not the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedKey {
    /// The key's public id.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// What the key file holds (`PVGPU_TCP_KEY` names such a file).
    pub key_file: String,
    /// Keys revoked by a rotation.
    pub revoked: Vec<String>,
}

/// A key as the backend keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// Its public id.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// When it was issued, in seconds since the Unix epoch.
    pub created_unix_seconds: u64,
    /// When it was revoked.
    pub revoked_unix_seconds: Option<u64>,
}

/// What a revocation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// Keys revoked now.
    pub keys: Vec<String>,
    /// Sessions opened with them, ended.
    pub sessions_ended: Vec<u64>,
}

/// One of the backend's GPUs (`GET /v1/devices`): whether it is drained,
/// who uses it, and its gauges as NVML reads them (none on the host
/// executor).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// The backend's ordinal (CUDA's, in the backend's environment).
    pub index: u32,
    /// New sessions are not given it.
    #[serde(default)]
    pub drained: bool,
    /// Live sessions with a context on it.
    #[serde(default)]
    pub sessions: Vec<u64>,
    /// Its UUID (`GPU-...`).
    pub uuid: String,
    /// The GPU at this index as the backend's executor sees it
    /// (`cuDeviceGetUuid`, 32 hex digits): what a session's device of this
    /// index is. NVML's `uuid` follows NVML's own order, whatever
    /// `CUDA_VISIBLE_DEVICES` the backend runs with; this one does not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub executor_uuid: String,
    /// Its model.
    pub name: String,
    /// Fraction of the last sample period a kernel ran.
    pub utilization_ratio: Option<f64>,
    /// Device memory in use.
    pub memory_used_bytes: Option<u64>,
    /// Device memory in all.
    pub memory_total_bytes: Option<u64>,
    /// Degrees Celsius.
    pub temperature_celsius: Option<f64>,
    /// Power drawn.
    pub power_watts: Option<f64>,
}

/// What every session has done since the backend started (`GET
/// /v1/summary`): the dashboard's charts take rates from two of these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Seconds since the Unix epoch when it was read.
    pub at_unix_seconds: f64,
    /// Sessions being served.
    pub sessions: usize,
    /// Commands received.
    pub commands: u64,
    /// Waited calls answered.
    pub replies: u64,
    /// Waited calls whose service time was taken, and the sum of those
    /// times.
    pub timed_replies: u64,
    /// See `timed_replies`.
    pub service_seconds: f64,
    /// Kernels launched.
    pub kernels: u64,
    /// Bytes copied host to device, device to host, device to device.
    pub copy_bytes: [u64; 3],
}
