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
//! | `POST /v1/restore`         | parks a snapshot for its guest ([`api::RestoreRequest`]; with `handed_from`, the device memory another backend of this GPU handed over in place) |
//! | `GET /v1/restores`         | snapshots waiting for their guests ([`api::Waiting`]) |
//! | `POST /v1/restore/upload` | parks a snapshot sent as the body (`Content-Length` bytes), kept in the backend's memory |
//! | `POST /v1/moves`           | records where a checkpointed session lives now ([`api::MoveRecord`]; [`migrate`]) |
//! | `POST /v1/sessions/ID/migrate` | the backend moves the session to one of its `--peer`s ([`api::MigrateRequest`], [`migrate::MigrateReport`]) |
//! | `GET /v1/peers`            | the backends sessions may be moved to by name ([`api::Peer`]) |
//! | `GET /v1/tenants`          | the tenants ([`api::Tenant`]), with `--state-dir` |
//! | `POST /v1/tenants`         | adds one ([`api::NewTenant`])          |
//! | `GET`, `DELETE /v1/tenants/NAME` | one tenant; removing it revokes its keys and ends its sessions |
//! | `PUT /v1/tenants/NAME/quota` | sets its quota ([`api::Quota`]: memory, sessions, GPUs) |
//! | `PUT`, `DELETE /v1/tenants/NAME/members/PEER` | makes a local user (`uid:N`) or Xen guest (`domain:NAME`) a member, or not |
//! | `GET /v1/tenants/NAME/keys` | its keys ([`api::Key`])               |
//! | `POST /v1/tenants/NAME/keys` | issues a key ([`api::IssueKey`], [`api::IssuedKey`]) |
//! | `DELETE /v1/tenants/NAME/keys[/ID]` | revokes its keys, or one ([`api::Revoked`]); their sessions end |
//! | `GET /v1/devices`          | the GPUs: drained or not, sessions on them, NVML's gauges ([`api::Gpu`]) |
//! | `POST`, `DELETE /v1/devices/N/drain` | drains GPU N (no new sessions are given it), or gives it back |
//! | `GET /v1/summary`          | what every session has done ([`api::Summary`]) |
//! | `GET /metrics`             | Prometheus' text format                |
//!
//! `pvgpu-backend --control-http HOST:PORT --control-token FILE` serves the
//! same API over HTTP, or HTTPS with `--control-tls-cert` (every request
//! with `Authorization: Bearer TOKEN`), and the web dashboard at `/`;
//! [`client::Control::at`] reaches it (`pvgpu-ctl --control https://...`).
//!
//! See `docs/operations.md` ("The control socket").

pub mod api;
pub mod client;
pub mod migrate;
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

/// A size as operators write it: `64MiB`, `64M`, `1.5GiB`, `4096`;
/// `K`, `M`, `G` and `T` are powers of 1024, with or without `iB`/`B`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("{s:?}: unknown unit (use B, KiB, MiB, GiB or TiB)")),
    };
    let n: f64 = num.parse().map_err(|_| format!("{s:?} is not a size like 64MiB"))?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse_as_operators_write_them() {
        use super::parse_size;
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2 TB"), Ok(2 << 40));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("MiB").is_err());
    }
}
