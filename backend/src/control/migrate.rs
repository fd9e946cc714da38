//! A session moved to a peer backend on the operator's request (`POST
//! /v1/sessions/{id}/migrate`, the dashboard's Move button): the backend
//! plays the part `pvgpu-ctl migrate` plays, checkpointing and recording
//! the move itself and handing the snapshot to the peer's control API.

use super::supervised::Supervised;
use super::{Refusal, Sessions};
use pvgpu_ctl::api::{CheckpointReport, CheckpointRequest, MigrateRequest, MoveRecord, RestoreRequest};
use pvgpu_ctl::client::CtlError;
use pvgpu_ctl::migrate::{MigrateError, MigrateReport, Source};

/// The backend as the source of a migration: its own supervisor, not its
/// control API.
struct Local<'a>(&'a Supervised);

fn refused(r: Refusal) -> CtlError {
    CtlError::Refused { status: r.status, message: r.message }
}

impl Source for Local<'_> {
    fn checkpoint(&self, session: u64, req: &CheckpointRequest) -> Result<CheckpointReport, CtlError> {
        self.0.checkpoint(session, req.clone()).map_err(refused)
    }

    fn record_move(&self, req: &MoveRecord) -> Result<(), CtlError> {
        self.0.record_move(req.clone()).map_err(refused)
    }

    fn gpus(&self) -> Result<Vec<pvgpu_ctl::api::Gpu>, CtlError> {
        Ok(self.0.devices())
    }

    fn session(&self, id: u64) -> Result<pvgpu_ctl::api::Session, CtlError> {
        self.0.get(id).ok_or(CtlError::Refused { status: 404, message: format!("No live session {id}") })
    }

    fn restore(&self, req: &RestoreRequest) -> Result<pvgpu_ctl::api::RestoreReport, CtlError> {
        self.0.restore(req.clone()).map_err(refused)
    }
}

/// Moves session `id` of `supervised` to the peer `req` names.
pub(super) fn migrate(
    supervised: &Supervised,
    peers: &[crate::peers::Peer],
    id: u64,
    req: MigrateRequest,
) -> Result<MigrateReport, Refusal> {
    let Some(peer) = peers.iter().find(|p| p.listed.name == req.peer) else {
        let names: Vec<&str> = peers.iter().map(|p| p.listed.name.as_str()).collect();
        return Err(Refusal::new(404, format!("No peer {:?}: this backend knows {names:?} (--peer)", req.peer)));
    };
    if supervised.get(id).is_none() {
        return Err(Refusal::new(404, format!("No live session {id} (`pvgpu-ctl sessions` lists them)")));
    }
    let timeout = req.timeout_seconds.unwrap_or(60);
    let dir = pvgpu_ctl::migrate::default_dir();
    tracing::info!(session = id, peer = %peer.listed.name, "moving a session (control API)");
    let how = pvgpu_ctl::migrate::How { upload: req.upload, copy: req.copy, cold: req.cold, unchecked: false };
    let moved = pvgpu_ctl::migrate::migrate(&Local(supervised), &peer.control, id, &peer.listed.address, &dir, timeout, how);
    moved
        .map(|mut report| {
            if let Some(w) = req.wait_seconds {
                pvgpu_ctl::migrate::wait_back(&peer.control, &mut report, std::time::Duration::from_secs(w.min(600)));
            }
            report
        })
        .map_err(|e| {
            let status = match &e {
                // The session's own refusal (not found, nothing it may take, ...)
                // keeps its status; the peer's failures are a bad gateway.
                MigrateError::Checkpoint(CtlError::Refused { status, .. }) => *status,
                _ => 502,
            };
            tracing::warn!(session = id, peer = %peer.listed.name, error = %e.report(), "moving a session failed");
            Refusal::new(status, e.report())
        })
}
