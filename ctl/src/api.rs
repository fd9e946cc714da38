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
