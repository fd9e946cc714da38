//! The supervisor's roster of live sessions: whom each serves, over what,
//! since when, and its seat in its peer's ledger (what it holds, on which
//! devices), for the control socket ([`crate::control`]).

use crate::handover::Transport;
use crate::ledger::LedgerView;
use pvgpu_ctl::api;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

struct Entry {
    peer: String,
    transport: Transport,
    started: SystemTime,
    since: Instant,
    seat: LedgerView,
}

impl Entry {
    fn describe(&self, id: u64) -> api::Session {
        api::Session {
            id,
            peer: self.peer.clone(),
            transport: self.transport.name().into(),
            devices: self.seat.devices(),
            memory_bytes: self.seat.held(),
            age_seconds: self.since.elapsed().as_secs_f64(),
            started_unix_seconds: self.started.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        }
    }
}

/// Every session from its admission until it has ended.
#[derive(Default)]
pub struct Roster {
    live: Mutex<BTreeMap<u64, Entry>>,
}

impl Roster {
    /// Enters session `id`, admitted now.
    pub fn add(&self, id: u64, peer: String, transport: Transport, seat: LedgerView) {
        let entry = Entry { peer, transport, started: SystemTime::now(), since: Instant::now(), seat };
        self.lock().insert(id, entry);
    }

    /// Takes session `id` off (it has ended, or never started).
    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// The live sessions, lowest number first.
    pub fn list(&self) -> Vec<api::Session> {
        self.lock().iter().map(|(id, e)| e.describe(*id)).collect()
    }

    /// Session `id`, if it is live.
    pub fn get(&self, id: u64) -> Option<api::Session> {
        self.lock().get(&id).map(|e| e.describe(id))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}
