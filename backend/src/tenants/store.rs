//! The tenants' database: an SQLite file under `--state-dir`, changed in
//! transactions, so a backend killed in the middle of a change finds the
//! state before it or after it.

use super::StateError;
use pvgpu_ctl::api::{Key, Quota};
use pvgpu_ring::tcp_auth::{KeyId, KeyVerifier};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::Path;

/// The schema version this backend writes (`PRAGMA user_version`).
const SCHEMA: i64 = 3;

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS tenants (
    name         TEXT PRIMARY KEY,
    memory_bytes INTEGER,           -- NULL: no limit of its own
    max_sessions INTEGER,
    created      INTEGER NOT NULL,  -- seconds since the Unix epoch
    gpus         TEXT,              -- NULL: every GPU; else ordinals, comma-separated
    gpu_share    INTEGER            -- NULL: 1; a weight in GPU time
) STRICT;
CREATE TABLE IF NOT EXISTS members (
    peer   TEXT PRIMARY KEY,        -- uid:N, domain:NAME
    tenant TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE
) STRICT;
CREATE TABLE IF NOT EXISTS drained (
    ordinal INTEGER PRIMARY KEY,    -- a GPU no new session is given
    since   INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS keys (
    id         TEXT PRIMARY KEY,    -- 16 hex digits, public
    tenant     TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,
    stored_key BLOB NOT NULL,       -- SHA-256 of the client key
    server_key BLOB NOT NULL,
    created    INTEGER NOT NULL,
    revoked    INTEGER              -- NULL: live
) STRICT;
CREATE INDEX IF NOT EXISTS keys_by_tenant ON keys(tenant);
";

/// A tenant row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRow {
    pub name: String,
    pub quota: Quota,
    pub created: u64,
}

/// A live key row: whose, and how to check it.
#[derive(Debug, Clone)]
pub struct LiveKey {
    pub tenant: String,
    pub verifier: KeyVerifier,
}

/// The open database.
pub struct Store {
    db: Connection,
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn to_sql(v: Option<u64>) -> Result<Option<i64>, StateError> {
    v.map(|n| i64::try_from(n).map_err(|_| StateError::TooLarge(n))).transpose()
}

impl Store {
    /// Opens (or makes) the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StateError> {
        let db = Connection::open(path)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.pragma_update(None, "foreign_keys", true)?;
        db.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA {
            return Err(StateError::Newer { path: path.to_path_buf(), version });
        }
        let tx = db.unchecked_transaction()?;
        if version == 1 {
            // Version 1 had no GPU list; its tenants may use every GPU.
            tx.execute_batch("ALTER TABLE tenants ADD COLUMN gpus TEXT")?;
        }
        if (1..=2).contains(&version) {
            // Versions 1 and 2 had no GPU share; their tenants weigh 1.
            tx.execute_batch("ALTER TABLE tenants ADD COLUMN gpu_share INTEGER")?;
        }
        tx.execute_batch(CREATE)?;
        tx.pragma_update(None, "user_version", SCHEMA)?;
        tx.commit()?;
        Ok(Store { db })
    }

    /// Every tenant, by name.
    pub fn tenants(&self) -> Result<Vec<TenantRow>, StateError> {
        let mut q = self.db.prepare("SELECT name, memory_bytes, max_sessions, created, gpus, gpu_share FROM tenants ORDER BY name")?;
        let rows = q.query_map([], |r| {
            Ok(TenantRow {
                name: r.get(0)?,
                quota: Quota {
                    memory_bytes: r.get::<_, Option<i64>>(1)?.map(|n| n as u64),
                    max_sessions: r.get(2)?,
                    gpus: r.get::<_, Option<String>>(4)?.map(|g| gpus_from_sql(&g)),
                    gpu_share: r.get(5)?,
                },
                created: r.get::<_, i64>(3)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every member peer (`uid:N`, `domain:NAME`) and its tenant.
    pub fn members(&self) -> Result<Vec<(String, String)>, StateError> {
        let mut q = self.db.prepare("SELECT peer, tenant FROM members ORDER BY peer")?;
        let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Makes `peer` a member of `tenant` (`add`) or of none.
    pub fn set_member(&mut self, tenant: &str, peer: &str, add: bool) -> Result<(), StateError> {
        let tx = self.db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_tenant(&tx, tenant)?;
        let owner: Option<String> = tx.query_row("SELECT tenant FROM members WHERE peer = ?1", [peer], |r| r.get(0)).optional()?;
        match (add, owner) {
            (true, Some(other)) if other != tenant => return Err(StateError::Member { peer: peer.to_string(), tenant: other }),
            (true, Some(_)) => {}
            (true, None) => {
                tx.execute("INSERT INTO members (peer, tenant) VALUES (?1, ?2)", params![peer, tenant])?;
            }
            (false, Some(owner)) if owner == tenant => {
                tx.execute("DELETE FROM members WHERE peer = ?1", [peer])?;
            }
            (false, _) => return Err(StateError::NoMember { peer: peer.to_string(), tenant: tenant.to_string() }),
        }
        Ok(tx.commit()?)
    }

    /// The GPUs drained, lowest first.
    pub fn drained(&self) -> Result<Vec<usize>, StateError> {
        let mut q = self.db.prepare("SELECT ordinal FROM drained ORDER BY ordinal")?;
        let rows = q.query_map([], |r| r.get::<_, i64>(0))?;
        Ok(rows.filter_map(|r| r.map(|n| usize::try_from(n).ok()).transpose()).collect::<Result<_, _>>()?)
    }

    /// Marks GPU `ordinal` drained, or not.
    pub fn set_drained(&mut self, ordinal: usize, drained: bool) -> Result<(), StateError> {
        if drained {
            self.db.execute("INSERT OR IGNORE INTO drained (ordinal, since) VALUES (?1, ?2)", params![ordinal as i64, now() as i64])?;
        } else {
            self.db.execute("DELETE FROM drained WHERE ordinal = ?1", [ordinal as i64])?;
        }
        Ok(())
    }

    /// Every live key with its tenant and verifier.
    pub fn live_keys(&self) -> Result<Vec<(KeyId, LiveKey)>, StateError> {
        let mut q = self.db.prepare("SELECT id, tenant, stored_key, server_key FROM keys WHERE revoked IS NULL")?;
        let rows =
            q.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, Vec<u8>>(2)?, r.get::<_, Vec<u8>>(3)?)))?;
        let mut keys = Vec::new();
        for row in rows {
            let (id, tenant, stored, server) = row?;
            // A row this backend did not write is skipped, not trusted.
            let (Ok(id), Ok(stored_key), Ok(server_key)) = (id.parse::<KeyId>(), stored.try_into(), server.try_into()) else {
                tracing::warn!(key = %id, "the state database holds a malformed key; it opens nothing");
                continue;
            };
            keys.push((id, LiveKey { tenant, verifier: KeyVerifier { stored_key, server_key } }));
        }
        Ok(keys)
    }

    /// The keys of `tenant`, newest first.
    pub fn keys(&self, tenant: &str) -> Result<Vec<Key>, StateError> {
        let mut q = self.db.prepare("SELECT id, created, revoked FROM keys WHERE tenant = ?1 ORDER BY created DESC, id")?;
        let rows = q.query_map([tenant], |r| {
            Ok(Key {
                id: r.get(0)?,
                tenant: tenant.to_string(),
                created_unix_seconds: r.get::<_, i64>(1)? as u64,
                revoked_unix_seconds: r.get::<_, Option<i64>>(2)?.map(|n| n as u64),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Adds a tenant.
    pub fn add_tenant(&mut self, name: &str, quota: &Quota, members: &[String]) -> Result<(), StateError> {
        let tx = self.db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let exists: Option<i64> = tx.query_row("SELECT 1 FROM tenants WHERE name = ?1", [name], |r| r.get(0)).optional()?;
        if exists.is_some() {
            return Err(StateError::Exists(name.to_string()));
        }
        tx.execute(
            "INSERT INTO tenants (name, memory_bytes, max_sessions, created, gpus, gpu_share) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                name,
                to_sql(quota.memory_bytes)?,
                quota.max_sessions,
                now() as i64,
                gpus_to_sql(quota.gpus.as_deref()),
                quota.gpu_share
            ],
        )?;
        for peer in members {
            let owner: Option<String> = tx.query_row("SELECT tenant FROM members WHERE peer = ?1", [peer], |r| r.get(0)).optional()?;
            if let Some(tenant) = owner {
                return Err(StateError::Member { peer: peer.clone(), tenant });
            }
            tx.execute("INSERT INTO members (peer, tenant) VALUES (?1, ?2)", params![peer, name])?;
        }
        Ok(tx.commit()?)
    }

    /// Sets a tenant's quota.
    pub fn set_quota(&mut self, name: &str, quota: &Quota) -> Result<(), StateError> {
        let n = self.db.execute(
            "UPDATE tenants SET memory_bytes = ?2, max_sessions = ?3, gpus = ?4, gpu_share = ?5 WHERE name = ?1",
            params![name, to_sql(quota.memory_bytes)?, quota.max_sessions, gpus_to_sql(quota.gpus.as_deref()), quota.gpu_share],
        )?;
        if n == 0 { Err(StateError::NoTenant(name.to_string())) } else { Ok(()) }
    }

    /// Removes a tenant and its keys; returns the keys that were live.
    pub fn remove_tenant(&mut self, name: &str) -> Result<Vec<String>, StateError> {
        let tx = self.db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let live = live_ids(&tx, name)?;
        if tx.execute("DELETE FROM tenants WHERE name = ?1", [name])? == 0 {
            return Err(StateError::NoTenant(name.to_string()));
        }
        tx.commit()?;
        Ok(live)
    }

    /// Records a new key of `tenant`; with `rotate`, revokes its other
    /// live keys in the same transaction. Returns those revoked.
    pub fn add_key(&mut self, tenant: &str, id: KeyId, v: &KeyVerifier, rotate: bool) -> Result<Vec<String>, StateError> {
        let tx = self.db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_tenant(&tx, tenant)?;
        let revoked = if rotate { revoke_in(&tx, tenant, None)? } else { Vec::new() };
        tx.execute(
            "INSERT INTO keys (id, tenant, stored_key, server_key, created) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id.to_string(), tenant, &v.stored_key[..], &v.server_key[..], now() as i64],
        )?;
        tx.commit()?;
        Ok(revoked)
    }

    /// Revokes key `id` of `tenant`, or all its live keys; returns those
    /// revoked now.
    pub fn revoke(&mut self, tenant: &str, id: Option<&str>) -> Result<Vec<String>, StateError> {
        let tx = self.db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_tenant(&tx, tenant)?;
        if let Some(id) = id {
            let owner: Option<String> = tx.query_row("SELECT tenant FROM keys WHERE id = ?1", [id], |r| r.get(0)).optional()?;
            if owner.as_deref() != Some(tenant) {
                return Err(StateError::NoKey { tenant: tenant.to_string(), id: id.to_string() });
            }
        }
        let revoked = revoke_in(&tx, tenant, id)?;
        tx.commit()?;
        Ok(revoked)
    }
}

/// A GPU list as the database keeps it: ordinals, comma-separated.
fn gpus_to_sql(gpus: Option<&[u32]>) -> Option<String> {
    gpus.map(|g| g.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","))
}

/// The list back; an entry this backend did not write is left out.
fn gpus_from_sql(s: &str) -> Vec<u32> {
    s.split(',').filter_map(|n| n.trim().parse().ok()).collect()
}

fn require_tenant(tx: &rusqlite::Transaction<'_>, name: &str) -> Result<(), StateError> {
    let found: Option<i64> = tx.query_row("SELECT 1 FROM tenants WHERE name = ?1", [name], |r| r.get(0)).optional()?;
    found.map(|_| ()).ok_or_else(|| StateError::NoTenant(name.to_string()))
}

fn live_ids(tx: &rusqlite::Transaction<'_>, tenant: &str) -> Result<Vec<String>, StateError> {
    let mut q = tx.prepare("SELECT id FROM keys WHERE tenant = ?1 AND revoked IS NULL ORDER BY id")?;
    let ids = q.query_map([tenant], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(ids)
}

fn revoke_in(tx: &rusqlite::Transaction<'_>, tenant: &str, id: Option<&str>) -> Result<Vec<String>, StateError> {
    let live: Vec<String> = live_ids(tx, tenant)?.into_iter().filter(|k| id.is_none_or(|one| one == k)).collect();
    for k in &live {
        tx.execute("UPDATE keys SET revoked = ?2 WHERE id = ?1", params![k, now() as i64])?;
    }
    Ok(live)
}
