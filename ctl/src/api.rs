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
    /// The ordinals of the devices it has made contexts on.
    pub devices: Vec<usize>,
    /// Device memory it holds now, as its quota counts it.
    pub memory_bytes: u64,
    /// Seconds since it was admitted.
    pub age_seconds: f64,
    /// When it was admitted, in seconds since the Unix epoch.
    pub started_unix_seconds: u64,
}

/// The body of every answer that is not a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong and what to do.
    pub error: String,
}

/// `POST /v1/sessions/ID/checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Seconds from the order to the report (waiting for the session's
    /// call, then writing).
    pub seconds: f64,
    /// Whether the session still runs here.
    pub left_running: bool,
}

/// `POST /v1/restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRequest {
    /// The snapshot file (absolute path).
    pub file: String,
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
}
