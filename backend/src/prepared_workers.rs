//! Workers prepared before a migration's pause, in the supervisor
//! (`POST /v1/prepare`): each has made the session its skeleton describes
//! (contexts, modules; `crate::session::Premade`) and waits for a session
//! as an idle worker of the pool does.
//!
//! Once the session's snapshot is parked here and goes on from the
//! skeleton ([`pvgpu_ctl::snapshot::skeleton::continues`]), the next
//! connection of the session's peer is handed to that worker instead of a
//! fresh one: the program's `Resume`, which then rebuilds only the rest. A
//! connection that is not that `Resume` (another program of the same peer
//! came first) is served there as by any worker, what was made ahead
//! dropped; the program's own then gets a fresh worker. A prepared worker
//! nobody takes is ended when its time is up.

use crate::worker_pool::Idle;
use pvgpu_ctl::snapshot::State;
use std::sync::Mutex;
use std::time::Instant;

/// Most workers prepared at once.
pub const MAX_PREPARED: usize = 8;

/// A worker made ahead for a session.
struct Ready {
    token: [u8; 16],
    /// Whose session: only a connection of this peer is handed to it.
    peer: String,
    skeleton: State,
    idle: Idle,
    /// Ended after this.
    until: Instant,
    /// The session's snapshot is parked and goes on from the skeleton.
    parked: bool,
}

/// The supervisor's prepared workers.
#[derive(Default)]
pub struct Prepared {
    ready: Mutex<Vec<Ready>>,
}

impl Prepared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Ready>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether another may be prepared now.
    pub fn has_room(&self) -> bool {
        self.lock().len() < MAX_PREPARED
    }

    /// Keeps `idle`, prepared from `skeleton`, for session `token` of
    /// `peer` until `until`; a worker prepared before for the same session
    /// is ended.
    pub fn keep(&self, token: [u8; 16], peer: String, skeleton: State, idle: Idle, until: Instant) {
        let mut ready = self.lock();
        if let Some(i) = ready.iter().position(|r| r.token == token) {
            ready.swap_remove(i).idle.kill();
        }
        ready.push(Ready { token, peer, skeleton, idle, until, parked: false });
    }

    /// Session `token`'s snapshot, of `state`, was parked: its worker takes
    /// the peer's next connection if the snapshot goes on from what it
    /// made, and is ended otherwise.
    pub fn parked(&self, token: &[u8; 16], state: &State) {
        let mut ready = self.lock();
        let Some(i) = ready.iter().position(|r| r.token == *token) else { return };
        match pvgpu_ctl::snapshot::skeleton::continues(&ready[i].skeleton, state) {
            Ok(()) => ready[i].parked = true,
            Err(why) => {
                tracing::info!(why, "a session's snapshot does not go on from its skeleton; its prepared worker is ended");
                ready.swap_remove(i).idle.kill();
            }
        }
    }

    /// The worker prepared for a parked session of `peer`, for its next
    /// connection.
    pub fn take_for(&self, peer: &str) -> Option<Idle> {
        let mut ready = self.lock();
        let i = ready.iter_mut().position(|r| r.parked && r.peer == peer && r.idle.alive())?;
        Some(ready.swap_remove(i).idle)
    }

    /// Ends the workers whose time is up, or that exited.
    pub fn expire(&self) {
        let now = Instant::now();
        let mut ready = self.lock();
        let mut i = 0;
        while i < ready.len() {
            if ready[i].until <= now || !ready[i].idle.alive() {
                let r = ready.swap_remove(i);
                tracing::info!(peer = %r.peer, "a worker prepared for a session that did not come is ended");
                r.idle.kill();
            } else {
                i += 1;
            }
        }
    }

    /// Prepares `idle` from the skeleton `meta` in `file`, waiting up to
    /// `wait` for it, and keeps it for as long; why not, where not (the
    /// worker is then ended).
    pub fn prepare(
        &self,
        idle: Idle,
        file: &std::fs::File,
        meta: &pvgpu_ctl::snapshot::Meta,
        wait: std::time::Duration,
    ) -> Result<(), String> {
        let token = pvgpu_ctl::snapshot::token_from_hex(&meta.token).ok_or("a malformed session token")?;
        match idle.prepare(file, wait) {
            Ok(Ok(())) => {
                self.keep(token, meta.peer.clone(), meta.state.clone(), idle, Instant::now() + wait);
                Ok(())
            }
            Ok(Err(why)) => {
                idle.kill();
                Err(format!("the worker could not make the skeleton's session: {why}"))
            }
            Err(e) => {
                idle.kill();
                Err(format!("the worker did not prepare: {e}"))
            }
        }
    }

    /// Ends them all (the backend stops).
    pub fn end_all(&self) {
        for r in self.lock().drain(..) {
            r.idle.kill();
        }
    }
}
