//! The supervisor's roster of live sessions: whom each serves, over what,
//! since when, and its seat in its peer's ledger (what it holds, on which
//! devices), for the control socket ([`crate::control`]).

use crate::handover::Transport;
use crate::ledger::LedgerView;
use crate::meter::{Meter, Reading};
use pvgpu_ctl::api;
use pvgpu_ring::tcp_auth::KeyId;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

struct Entry {
    peer: String,
    /// The tenant it belongs to, and the key it opened with.
    tenant: Option<TenantOf>,
    transport: Transport,
    started: SystemTime,
    since: Instant,
    seat: LedgerView,
    meter: Option<Arc<Meter>>,
    /// Checkpointed and gone from this backend: its worker only lets go
    /// of what it held; not listed, and never checkpointed again.
    departed: bool,
}

impl Entry {
    fn describe(&self, id: u64) -> api::Session {
        api::Session {
            id,
            peer: self.peer.clone(),
            transport: self.transport.name().into(),
            tenant: self.tenant.as_ref().map(|t| t.name.clone()),
            key: self.tenant.as_ref().and_then(|t| t.key).map(|k| k.to_string()),
            devices: self.seat.devices(),
            memory_bytes: self.seat.held(),
            age_seconds: self.since.elapsed().as_secs_f64(),
            started_unix_seconds: self.started.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            gpu_turn: self.meter.as_ref().and_then(|m| m.turn().describe()),
            gpu_turn_seconds: self.meter.as_ref().and_then(|m| m.turn().held_for()).map(|d| d.as_secs_f64()),
            restored: self.meter.as_ref().and_then(|m| m.restored()),
        }
    }
}

/// The tenant a session belongs to: by the key its TCP or TLS peer
/// opened with, or because its local user or Xen guest is a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantOf {
    /// The tenant's name.
    pub name: String,
    /// The key it opened with (none for a member peer).
    pub key: Option<KeyId>,
}

/// Whom sessions are counted under in the backend's totals: their tenant
/// (none for sessions without one) and transport.
pub type Group = (Option<String>, Transport);

/// Every session from its admission until it has ended, and the totals of
/// those that ended.
#[derive(Default)]
pub struct Roster {
    live: Mutex<BTreeMap<u64, Entry>>,
    /// What ended sessions counted, by group.
    retired: Mutex<HashMap<Group, Reading>>,
    /// Sessions admitted since the backend started, by group.
    started: Mutex<HashMap<Group, u64>>,
}

/// A live session as `/metrics` reports it.
pub struct LiveSession {
    /// Its number.
    pub id: u64,
    /// Its group.
    pub group: Group,
    /// Device memory it holds.
    pub memory_bytes: u64,
}

impl Roster {
    /// Runs `f` over the live sessions' GPU turns ([`crate::share`]):
    /// each spends its tenant's time, at the tenant's share (`share_of`),
    /// or its own at share 1. Sessions without a meter take no turns.
    pub fn with_turns(&self, share_of: &dyn Fn(&str) -> u32, f: &mut dyn FnMut(&[crate::share::Seen<'_>])) {
        use crate::share::{Group, Seen};
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let seen: Vec<Seen<'_>> = live
            .iter()
            .filter_map(|(id, e)| {
                let (group, share) = match &e.tenant {
                    Some(t) => (Group::Tenant(t.name.clone()), share_of(&t.name)),
                    None => (Group::Session(*id), 1),
                };
                Some(Seen { id: *id, group, share, turn: e.meter.as_ref()?.turn() })
            })
            .collect();
        f(&seen);
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Enters session `id`, admitted now.
    pub fn add(&self, id: u64, peer: String, transport: Transport, seat: LedgerView, tenant: Option<TenantOf>, meter: Option<Arc<Meter>>) {
        let group = (tenant.as_ref().map(|t| t.name.clone()), transport);
        *lock(&self.started).entry(group).or_default() += 1;
        let entry = Entry { peer, tenant, transport, started: SystemTime::now(), since: Instant::now(), seat, meter, departed: false };
        self.lock().insert(id, entry);
    }

    /// Takes session `id` off (it has ended, or never started); what its
    /// meter counted joins its group's totals.
    pub fn remove(&self, id: u64) {
        let Some(e) = self.lock().remove(&id) else { return };
        if let Some(m) = &e.meter {
            let group = (e.tenant.map(|t| t.name), e.transport);
            lock(&self.retired).entry(group).or_default().add(&m.read());
        }
    }

    /// What every group's sessions counted, ended and live, with the
    /// sessions admitted per group; and each live session.
    pub fn totals(&self) -> (HashMap<Group, Reading>, HashMap<Group, u64>, Vec<LiveSession>) {
        // The live list first: a session ending meanwhile is then counted
        // in its retired totals or not at all, never twice.
        let live = self.lock();
        let mut totals = lock(&self.retired).clone();
        let mut sessions = Vec::with_capacity(live.len());
        for (id, e) in live.iter() {
            let group = (e.tenant.as_ref().map(|t| t.name.clone()), e.transport);
            if let Some(m) = &e.meter {
                totals.entry(group.clone()).or_default().add(&m.read());
            }
            sessions.push(LiveSession { id: *id, group, memory_bytes: e.seat.held() });
        }
        drop(live);
        (totals, lock(&self.started).clone(), sessions)
    }

    /// Marks session `id` as gone from this backend (checkpointed, and
    /// not staying): what it counted stays until its worker ends, but it
    /// is not listed any more.
    pub fn depart(&self, id: u64) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.departed = true;
        }
    }

    /// The live sessions, lowest number first.
    pub fn list(&self) -> Vec<api::Session> {
        self.lock().iter().filter(|(_, e)| !e.departed).map(|(id, e)| e.describe(*id)).collect()
    }

    /// Session `id`, if it is live (and has not departed).
    pub fn get(&self, id: u64) -> Option<api::Session> {
        self.lock().get(&id).filter(|e| !e.departed).map(|e| e.describe(id))
    }

    /// The sessions opened with any of `keys`.
    pub fn opened_with(&self, keys: &[String]) -> Vec<u64> {
        let is_one = |k: &KeyId| keys.iter().any(|s| *s == k.to_string());
        self.lock().iter().filter(|(_, e)| e.tenant.as_ref().and_then(|t| t.key.as_ref()).is_some_and(&is_one)).map(|(id, _)| *id).collect()
    }

    /// Tenant `name`'s sessions.
    pub fn of_tenant(&self, name: &str) -> Vec<u64> {
        self.lock().iter().filter(|(_, e)| e.tenant.as_ref().is_some_and(|t| t.name == name)).map(|(id, _)| *id).collect()
    }

    /// Tenant `name`'s sessions now, and the device memory they hold.
    pub fn tenant_usage(&self, name: &str) -> (usize, u64) {
        self.usage(|e| e.tenant.as_ref().is_some_and(|t| t.name == name))
    }

    /// What the live sessions of `peer` hold, as [`Roster::tenant_usage`]:
    /// a tenant's (`tenant:NAME`), or a peer's outside every tenant.
    pub fn peer_usage(&self, peer: &str) -> (usize, u64) {
        match peer.strip_prefix("tenant:") {
            Some(name) => self.tenant_usage(name),
            None => self.usage(|e| e.tenant.is_none() && e.peer == peer),
        }
    }

    fn usage(&self, whose: impl Fn(&Entry) -> bool) -> (usize, u64) {
        let live = self.lock();
        // A departed session's memory went with it (or is freed soon).
        let mine = live.values().filter(|e| !e.departed && whose(e));
        mine.fold((0, 0), |(n, bytes), e| (n + 1, bytes + e.seat.held()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        lock(&self.live)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
