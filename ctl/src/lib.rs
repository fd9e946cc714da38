//! The pvgpu control plane as its clients see it: the types of the
//! backend's control API ([`api`]), a client for it ([`client`]), and the
//! `pvgpu-ctl` command built on that client.
//!
//! The backend serves the API as HTTP/1.1 with JSON bodies on a Unix
//! socket only its owner may open (`pvgpu-backend --control unix:PATH`,
//! [`default_socket`] when not given). Every request is answered and the
//! connection closed; errors come as a status and `{"error": "..."}`.
//!
//! | Method and path            | Does                                   |
//! |----------------------------|----------------------------------------|
//! | `GET /v1/sessions`         | the live sessions ([`api::Session`])   |
//! | `GET /v1/sessions/ID`      | one session                            |
//! | `DELETE /v1/sessions/ID`   | ends a session (its worker is given the grace period, then killed) |
//! | `POST /v1/sessions/ID/checkpoint` | writes a snapshot at the session's next waited call ([`api::CheckpointRequest`]) |
//! | `POST /v1/restore`         | parks a snapshot for its guest ([`api::RestoreRequest`]) |
//! | `GET /v1/restores`         | snapshots waiting for their guests ([`api::Waiting`]) |
//!
//! See `docs/operations.md` ("The control socket").

pub mod api;
pub mod client;
pub mod snapshot;

use std::path::PathBuf;

/// Where a backend serves its control socket when `--control` is not
/// given, and where `pvgpu-ctl` looks for it: `$XDG_RUNTIME_DIR/pvgpu/`
/// for a user with a runtime directory, `/run/pvgpu/` for root, else
/// `/tmp/pvgpu-UID/`; the file is `control.sock`.
pub fn default_socket() -> PathBuf {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("pvgpu"),
        None => {
            let uid = nix::unistd::getuid();
            if uid.is_root() { PathBuf::from("/run/pvgpu") } else { PathBuf::from(format!("/tmp/pvgpu-{uid}")) }
        }
    };
    dir.join("control.sock")
}

/// A control address as the command line spells it: `unix:PATH`.
pub fn parse_address(s: &str) -> Result<PathBuf, String> {
    match s.strip_prefix("unix:") {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => Err(format!("{s:?} is not a control address: expected unix:PATH")),
    }
}
