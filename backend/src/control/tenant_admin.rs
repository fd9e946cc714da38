//! Tenants and keys as the control API changes them: the database
//! ([`crate::tenants`]), and what a change means for live sessions (a
//! revoked key's sessions end, a new memory quota holds from their next
//! allocation).

use super::{Refusal, TenantAdmin};
use crate::ledger::Ledgers;
use crate::roster::Roster;
use crate::spawn::Spawner;
use crate::tenants::{StateError, TenantInfo, Tenants, peer_of};
use pvgpu_ctl::api::{self, IssueKey, NewTenant, Quota};
use std::sync::Arc;

/// The supervisor's tenants, with what the control API needs to apply a
/// change to live sessions.
pub struct TenantDesk {
    /// The tenants' state.
    pub tenants: Arc<Tenants>,
    /// The live sessions.
    pub roster: Arc<Roster>,
    /// What ends them.
    pub spawner: Arc<dyn Spawner>,
    /// What they hold, per tenant.
    pub ledgers: Arc<Ledgers>,
    /// The memory cap of a tenant without a memory quota of its own
    /// (`--peer-mem-quota`, or none).
    pub default_cap: u64,
}

fn refusal(e: StateError) -> Refusal {
    Refusal::new(e.status(), e.to_string())
}

impl TenantDesk {
    fn describe(&self, t: TenantInfo) -> api::Tenant {
        let (sessions, memory_bytes) = self.roster.tenant_usage(&t.name);
        api::Tenant {
            name: t.name,
            quota: t.quota,
            created_unix_seconds: t.created,
            live_keys: t.live_keys,
            sessions,
            memory_bytes,
            members: t.members,
        }
    }

    /// Ends the live sessions opened with `keys`.
    fn end_sessions(&self, keys: Vec<String>) -> api::Revoked {
        let ended = self.roster.opened_with(&keys);
        self.end(&ended, "its key was revoked");
        api::Revoked { keys, sessions_ended: ended }
    }

    fn end(&self, ids: &[u64], why: &str) {
        for id in ids {
            tracing::info!(session = id, why, "ending a session");
            self.spawner.end(*id);
        }
    }
}

impl TenantAdmin for TenantDesk {
    fn list(&self) -> Vec<api::Tenant> {
        self.tenants.list().into_iter().map(|t| self.describe(t)).collect()
    }

    fn get(&self, name: &str) -> Result<api::Tenant, Refusal> {
        self.tenants.get(name).map(|t| self.describe(t)).map_err(refusal)
    }

    fn add(&self, req: NewTenant) -> Result<api::Tenant, Refusal> {
        self.tenants.add(&req.name, req.quota, &req.members).map(|t| self.describe(t)).map_err(refusal)
    }

    fn set_quota(&self, name: &str, quota: Quota) -> Result<api::Tenant, Refusal> {
        let t = self.tenants.set_quota(name, quota.clone()).map_err(refusal)?;
        self.ledgers.set_cap(&peer_of(name), quota.memory_bytes.unwrap_or(self.default_cap));
        Ok(self.describe(t))
    }

    fn remove(&self, name: &str) -> Result<api::Revoked, Refusal> {
        let keys = self.tenants.remove(name).map_err(refusal)?;
        // Sessions of keys rotated out earlier end too.
        let ended = self.roster.of_tenant(name);
        self.end(&ended, "its tenant was removed");
        Ok(api::Revoked { keys, sessions_ended: ended })
    }

    fn set_member(&self, name: &str, peer: &str, add: bool) -> Result<api::Tenant, Refusal> {
        self.tenants.set_member(name, peer, add).map(|t| self.describe(t)).map_err(refusal)
    }

    fn issue(&self, name: &str, req: IssueKey) -> Result<api::IssuedKey, Refusal> {
        let (key, revoked) = self.tenants.issue(name, req.rotate).map_err(refusal)?;
        Ok(api::IssuedKey { id: key.id().to_string(), tenant: name.to_string(), key_file: key.file_text().to_string(), revoked })
    }

    fn keys(&self, name: &str) -> Result<Vec<api::Key>, Refusal> {
        self.tenants.keys(name).map_err(refusal)
    }

    fn revoke(&self, name: &str, id: Option<&str>) -> Result<api::Revoked, Refusal> {
        let keys = self.tenants.revoke(name, id).map_err(refusal)?;
        Ok(self.end_sessions(keys))
    }
}
