//! The supervisor's roster of live sessions: whom each serves, over what,
//! since when, and its seat in its peer's ledger (what it holds, on which
//! devices), for the control socket ([`crate::control`]).

use crate::handover::Transport;
use crate::ledger::LedgerView;
use pvgpu_ctl::api;
use pvgpu_ring::tcp_auth::KeyId;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

struct Entry {
    peer: String,
    /// The tenant and key a TCP peer opened with.
    tenant: Option<(String, KeyId)>,
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
            tenant: self.tenant.as_ref().map(|(name, _)| name.clone()),
            key: self.tenant.as_ref().map(|(_, key)| key.to_string()),
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
    pub fn add(&self, id: u64, peer: String, transport: Transport, seat: LedgerView, tenant: Option<(String, KeyId)>) {
        let entry = Entry { peer, tenant, transport, started: SystemTime::now(), since: Instant::now(), seat };
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

    /// The sessions opened with any of `keys`.
    pub fn opened_with(&self, keys: &[String]) -> Vec<u64> {
        let is_one = |k: &KeyId| keys.iter().any(|s| *s == k.to_string());
        self.lock().iter().filter(|(_, e)| e.tenant.as_ref().is_some_and(|(_, k)| is_one(k))).map(|(id, _)| *id).collect()
    }

    /// Tenant `name`'s sessions.
    pub fn of_tenant(&self, name: &str) -> Vec<u64> {
        self.lock().iter().filter(|(_, e)| e.tenant.as_ref().is_some_and(|(t, _)| t == name)).map(|(id, _)| *id).collect()
    }

    /// Tenant `name`'s sessions now, and the device memory they hold.
    pub fn tenant_usage(&self, name: &str) -> (usize, u64) {
        let live = self.lock();
        let mine = live.values().filter(|e| e.tenant.as_ref().is_some_and(|(t, _)| t == name));
        mine.fold((0, 0), |(n, bytes), e| (n + 1, bytes + e.seat.held()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}
