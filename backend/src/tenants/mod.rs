//! Tenants: names that TCP keys belong to, with quotas that hold across
//! all of a tenant's sessions (`--state-dir`).
//!
//! A TCP or TLS peer that opens with a tenant key
//! ([`pvgpu_ring::tcp_auth::TenantKey`]) counts as `tenant:NAME`: its
//! sessions share the tenant's session limit and one memory ledger capped
//! by the tenant's memory quota ([`crate::ledger`]), whatever addresses
//! they come from. The backend keeps a verifier of each key, never the key.
//! State lives in an SQLite database ([`store`]); admission reads an
//! in-memory copy, replaced after each change.

mod store;

use pvgpu_ctl::api::{Key, Quota};
use pvgpu_ring::tcp_auth::{KeyId, KeyVerifier, TenantKey};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use store::{LiveKey, Store, TenantRow};

/// Why a change to the tenants' state failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The state directory cannot be made or used.
    #[error("Cannot use the state directory {path}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The database failed.
    #[error("The state database failed: {0}")]
    Db(#[from] rusqlite::Error),
    /// The database was written by a newer backend.
    #[error("{path} has schema version {version}, newer than this backend's; run the newer backend, or point --state-dir elsewhere")]
    Newer {
        /// The database.
        path: PathBuf,
        /// Its version.
        version: i64,
    },
    /// No tenant of that name.
    #[error("No tenant {0:?} (`pvgpu-ctl tenant list` lists them)")]
    NoTenant(String),
    /// A tenant of that name exists.
    #[error("Tenant {0:?} exists already")]
    Exists(String),
    /// Not a tenant name.
    #[error("{0:?} is not a tenant name: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")]
    BadName(String),
    /// The tenant has no such key.
    #[error("Tenant {tenant:?} has no key {id} (`pvgpu-ctl key list {tenant}` lists them)")]
    NoKey {
        /// The tenant.
        tenant: String,
        /// The key asked for.
        id: String,
    },
    /// A quota past what the database stores.
    #[error("{0} bytes is larger than any quota can be")]
    TooLarge(u64),
    /// A GPU share out of range.
    #[error("a GPU share of {0} is out of range: use a weight from 1 to {MAX_SHARE}")]
    BadShare(u32),
    /// The peer belongs to another tenant.
    #[error("{peer} belongs to tenant {tenant:?}; remove it there first")]
    Member {
        /// The peer.
        peer: String,
        /// Its tenant.
        tenant: String,
    },
    /// The peer is not the tenant's.
    #[error("{peer} is not a member of tenant {tenant:?}")]
    NoMember {
        /// The peer.
        peer: String,
        /// The tenant.
        tenant: String,
    },
    /// Not a peer a tenant may have.
    #[error("{0:?} is not a member peer: use uid:N (a local user) or domain:NAME (a Xen guest by its domain name)")]
    BadPeer(String),
    /// No random bytes for a key.
    #[error("Cannot make a key: {0}")]
    Random(std::io::Error),
}

impl StateError {
    /// The HTTP status the control API answers with.
    pub fn status(&self) -> u16 {
        match self {
            StateError::NoTenant(_) | StateError::NoKey { .. } | StateError::NoMember { .. } => 404,
            StateError::Exists(_) | StateError::Member { .. } => 409,
            StateError::BadName(_) | StateError::TooLarge(_) | StateError::BadPeer(_) | StateError::BadShare(_) => 400,
            StateError::Dir { .. } | StateError::Db(_) | StateError::Newer { .. } | StateError::Random(_) => 500,
        }
    }
}

/// What admission reads: tenants and live keys, replaced whole after each
/// change.
#[derive(Default)]
struct View {
    tenants: HashMap<String, TenantRow>,
    keys: HashMap<KeyId, LiveKey>,
    /// Member peers (`uid:N`, `domain:NAME`) and their tenants.
    members: HashMap<String, String>,
}

/// A tenant's record as the control API reports it (without live usage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantInfo {
    /// Its name.
    pub name: String,
    /// Its quota.
    pub quota: Quota,
    /// When it was made.
    pub created: u64,
    /// Its keys that are not revoked.
    pub live_keys: usize,
    /// Local users and Xen guests whose sessions are its.
    pub members: Vec<String>,
}

/// The tenants of one backend.
pub struct Tenants {
    store: Mutex<Store>,
    view: RwLock<Arc<View>>,
    path: PathBuf,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tenants({})", self.path.display())
    }
}

/// The file under the state directory.
pub const DB_FILE: &str = "state.sqlite3";

/// The peer a tenant's sessions count as.
pub fn peer_of(tenant: &str) -> String {
    format!("tenant:{tenant}")
}

/// Largest GPU share a tenant may have.
pub const MAX_SHARE: u32 = 1000;

fn check_share(q: &Quota) -> Result<(), StateError> {
    match q.gpu_share {
        Some(n) if !(1..=MAX_SHARE).contains(&n) => Err(StateError::BadShare(n)),
        _ => Ok(()),
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl Tenants {
    /// Opens the state under `dir`, made (owner-only) if missing.
    pub fn open(dir: &Path) -> Result<Tenants, StateError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir_err = |source| StateError::Dir { path: dir.to_path_buf(), source };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(dir_err)?;
        let mode = std::fs::metadata(dir).map_err(dir_err)?.permissions().mode();
        if mode & 0o022 != 0 {
            let e = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "others may write it (chmod 700)");
            return Err(dir_err(e));
        }
        let path = dir.join(DB_FILE);
        let store = Store::open(&path)?;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        let t = Tenants { store: Mutex::new(store), view: RwLock::default(), path };
        t.reload(&t.lock())?;
        Ok(t)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn view(&self) -> Arc<View> {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn reload(&self, store: &Store) -> Result<(), StateError> {
        let tenants = store.tenants()?.into_iter().map(|t| (t.name.clone(), t)).collect();
        let keys = store.live_keys()?.into_iter().collect();
        let members = store.members()?.into_iter().collect();
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(View { tenants, keys, members });
        Ok(())
    }

    /// Runs a change on the database, then refreshes what admission reads.
    fn change<T>(&self, f: impl FnOnce(&mut Store) -> Result<T, StateError>) -> Result<T, StateError> {
        let mut store = self.lock();
        let r = f(&mut store)?;
        self.reload(&store)?;
        Ok(r)
    }

    /// The verifier of live key `id` (admission).
    pub fn verifier(&self, id: KeyId) -> Option<KeyVerifier> {
        self.view().keys.get(&id).map(|k| k.verifier.clone())
    }

    /// The tenant of live key `id`, and its quota.
    pub fn of_key(&self, id: KeyId) -> Option<(String, Quota)> {
        let v = self.view();
        let tenant = &v.keys.get(&id)?.tenant;
        Some((tenant.clone(), v.tenants.get(tenant)?.quota.clone()))
    }

    /// The tenant whose member `peer` is (`uid:N` of a local user,
    /// `domain:NAME` of a Xen guest), and its quota.
    pub fn of_member(&self, peer: &str) -> Option<(String, Quota)> {
        let v = self.view();
        let tenant = v.members.get(peer)?;
        Some((tenant.clone(), v.tenants.get(tenant)?.quota.clone()))
    }

    /// The quota of tenant `name`.
    pub fn quota(&self, name: &str) -> Option<Quota> {
        self.view().tenants.get(name).map(|t| t.quota.clone())
    }

    /// Tenant `name`'s GPU share (1 where it has none set, or is gone).
    pub fn gpu_share(&self, name: &str) -> u32 {
        self.view().tenants.get(name).and_then(|t| t.quota.gpu_share).unwrap_or(1)
    }

    /// Makes `peer` a member of `tenant` (`add`), or takes it out.
    pub fn set_member(&self, tenant: &str, peer: &str, add: bool) -> Result<TenantInfo, StateError> {
        if !valid_member(peer) {
            return Err(StateError::BadPeer(peer.to_string()));
        }
        self.change(|s| s.set_member(tenant, peer, add))?;
        tracing::info!(tenant, peer, add, "tenant membership changed");
        self.get(tenant)
    }

    /// The GPUs drained, as the database keeps them.
    pub fn drained(&self) -> Result<Vec<usize>, StateError> {
        self.lock().drained()
    }

    /// Records GPU `ordinal` drained, or not.
    pub fn set_drained(&self, ordinal: usize, drained: bool) -> Result<(), StateError> {
        self.lock().set_drained(ordinal, drained)
    }

    /// Every tenant, by name.
    pub fn list(&self) -> Vec<TenantInfo> {
        let v = self.view();
        let mut all: Vec<TenantInfo> = v.tenants.values().map(|t| info(&v, t)).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Tenant `name`.
    pub fn get(&self, name: &str) -> Result<TenantInfo, StateError> {
        let v = self.view();
        v.tenants.get(name).map(|t| info(&v, t)).ok_or_else(|| StateError::NoTenant(name.to_string()))
    }

    /// Adds tenant `name`, with `members` (local users and Xen guests
    /// whose sessions are its).
    pub fn add(&self, name: &str, quota: Quota, members: &[String]) -> Result<TenantInfo, StateError> {
        if !valid_name(name) {
            return Err(StateError::BadName(name.to_string()));
        }
        if let Some(bad) = members.iter().find(|m| !valid_member(m)) {
            return Err(StateError::BadPeer(bad.clone()));
        }
        check_share(&quota)?;
        self.change(|s| s.add_tenant(name, &quota, members))?;
        tracing::info!(tenant = name, ?quota, "tenant added");
        self.get(name)
    }

    /// Sets tenant `name`'s quota.
    pub fn set_quota(&self, name: &str, quota: Quota) -> Result<TenantInfo, StateError> {
        check_share(&quota)?;
        self.change(|s| s.set_quota(name, &quota))?;
        tracing::info!(tenant = name, ?quota, "tenant quota changed");
        self.get(name)
    }

    /// Removes tenant `name` and its keys; returns the keys that were live.
    pub fn remove(&self, name: &str) -> Result<Vec<String>, StateError> {
        let keys = self.change(|s| s.remove_tenant(name))?;
        tracing::info!(tenant = name, keys = keys.len(), "tenant removed");
        Ok(keys)
    }

    /// Issues a new key to `tenant`; with `rotate`, its other keys are
    /// revoked. Returns the key and those revoked.
    pub fn issue(&self, tenant: &str, rotate: bool) -> Result<(TenantKey, Vec<String>), StateError> {
        let key = TenantKey::generate().map_err(StateError::Random)?;
        let revoked = self.change(|s| s.add_key(tenant, key.id(), &key.verifier(), rotate))?;
        tracing::info!(tenant, key = %key.id(), revoked = revoked.len(), "key issued");
        Ok((key, revoked))
    }

    /// Revokes key `id` of `tenant`, or all its keys; returns those
    /// revoked now.
    pub fn revoke(&self, tenant: &str, id: Option<&str>) -> Result<Vec<String>, StateError> {
        let revoked = self.change(|s| s.revoke(tenant, id))?;
        tracing::info!(tenant, keys = ?revoked, "keys revoked");
        Ok(revoked)
    }

    /// The keys of `tenant`, newest first.
    pub fn keys(&self, tenant: &str) -> Result<Vec<Key>, StateError> {
        let store = self.lock();
        if !self.view().tenants.contains_key(tenant) {
            return Err(StateError::NoTenant(tenant.to_string()));
        }
        store.keys(tenant)
    }
}

fn info(v: &View, t: &TenantRow) -> TenantInfo {
    let mut members: Vec<String> = v.members.iter().filter(|(_, tenant)| **tenant == t.name).map(|(p, _)| p.clone()).collect();
    members.sort();
    TenantInfo {
        name: t.name.clone(),
        quota: t.quota.clone(),
        created: t.created,
        live_keys: v.keys.values().filter(|k| k.tenant == t.name).count(),
        members,
    }
}

/// A member peer: `uid:N` (a local user) or `domain:NAME` (a Xen guest
/// by its domain name, as `xl list` shows it).
fn valid_member(peer: &str) -> bool {
    if let Some(uid) = peer.strip_prefix("uid:") {
        return uid.parse::<u32>().is_ok();
    }
    peer.strip_prefix("domain:").is_some_and(|name| {
        (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pvgpu-tenants-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn tenants_and_keys_persist_and_revoked_keys_open_nothing() {
        let d = dir("persist");
        let t = Tenants::open(&d).unwrap();
        let quota = Quota { memory_bytes: Some(64 << 20), max_sessions: Some(2), gpus: Some(vec![1, 0]), gpu_share: Some(3) };
        t.add("alice", quota.clone(), &[]).unwrap();
        assert!(matches!(t.add("alice", quota.clone(), &[]), Err(StateError::Exists(_))));
        assert!(matches!(t.add("../x", quota.clone(), &[]), Err(StateError::BadName(_))));
        t.add("bob", Quota::default(), &[]).unwrap();
        assert!(matches!(t.add("carol", Quota::default(), &["uid:x".into()]), Err(StateError::BadPeer(_))));
        t.set_member("alice", "uid:1000", true).unwrap();
        t.set_member("alice", "domain:lab-vm", true).unwrap();
        assert!(matches!(t.set_member("bob", "uid:1000", true), Err(StateError::Member { .. })), "one tenant per peer");
        assert!(matches!(t.set_member("bob", "tcp:1.2.3.4", true), Err(StateError::BadPeer(_))));
        assert!(matches!(t.set_member("bob", "domain:a/b", true), Err(StateError::BadPeer(_))));
        t.set_drained(1, true).unwrap();
        let (k1, revoked) = t.issue("alice", false).unwrap();
        assert!(revoked.is_empty());
        assert!(t.verifier(k1.id()) == Some(k1.verifier()));
        assert_eq!(t.of_key(k1.id()), Some(("alice".into(), quota)));
        assert!(matches!(t.issue("nobody", false), Err(StateError::NoTenant(_))));
        drop(t);
        // A new backend finds the same state.
        let t = Tenants::open(&d).unwrap();
        assert_eq!(t.get("alice").unwrap().live_keys, 1);
        assert_eq!(t.quota("alice").unwrap().gpus, Some(vec![1, 0]), "the GPU list and its order persist");
        assert_eq!(t.get("alice").unwrap().members, ["domain:lab-vm", "uid:1000"]);
        assert_eq!(t.of_member("uid:1000").map(|(n, _)| n), Some("alice".into()));
        assert_eq!(t.drained().unwrap(), [1]);
        t.set_member("alice", "uid:1000", false).unwrap();
        assert!(t.of_member("uid:1000").is_none());
        assert!(matches!(t.set_member("alice", "uid:1000", false), Err(StateError::NoMember { .. })));
        t.remove("bob").unwrap();
        assert!(t.verifier(k1.id()).is_some());
        let (k2, revoked) = t.issue("alice", true).unwrap();
        assert_eq!(revoked, [k1.id().to_string()]);
        assert!(t.verifier(k1.id()).is_none(), "a rotated-out key opens nothing");
        let keys = t.keys("alice").unwrap();
        assert_eq!(keys.len(), 2);
        assert!(keys.iter().any(|k| k.id == k1.id().to_string() && k.revoked_unix_seconds.is_some()));
        assert!(matches!(t.revoke("alice", Some("0000000000000000")), Err(StateError::NoKey { .. })));
        assert_eq!(t.revoke("alice", None).unwrap(), [k2.id().to_string()]);
        assert!(t.verifier(k2.id()).is_none());
        t.set_quota("alice", Quota::default()).unwrap();
        assert_eq!(t.get("alice").unwrap().quota, Quota::default());
        t.issue("alice", false).unwrap();
        assert_eq!(t.remove("alice").unwrap().len(), 1);
        assert!(t.list().is_empty());
        drop(t);
        assert!(Tenants::open(&d).unwrap().list().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A state directory `name` holding a database an older backend made
    /// with `sql`.
    fn older_database(name: &str, sql: &str) -> PathBuf {
        let d = dir(name);
        std::fs::create_dir_all(&d).unwrap();
        rusqlite::Connection::open(d.join(DB_FILE)).unwrap().execute_batch(sql).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    #[test]
    fn a_version_1_database_is_upgraded_in_place() {
        let d = older_database(
            "upgrade",
            "CREATE TABLE tenants (name TEXT PRIMARY KEY, memory_bytes INTEGER, max_sessions INTEGER, created INTEGER NOT NULL) STRICT;
             INSERT INTO tenants VALUES ('old', 4096, 3, 1);
             PRAGMA user_version = 1;",
        );
        let t = Tenants::open(&d).unwrap();
        assert_eq!(
            t.quota("old"),
            Some(Quota { memory_bytes: Some(4096), max_sessions: Some(3), gpus: None, gpu_share: None }),
            "every GPU, as before"
        );
        t.set_member("old", "uid:7", true).unwrap();
        assert_eq!(t.of_member("uid:7").map(|(n, _)| n), Some("old".into()));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_version_2_database_gains_gpu_shares() {
        let d = older_database(
            "upgrade2",
            "CREATE TABLE tenants (name TEXT PRIMARY KEY, memory_bytes INTEGER, max_sessions INTEGER, created INTEGER NOT NULL, gpus TEXT) STRICT;
             INSERT INTO tenants VALUES ('old', NULL, NULL, 1, '1,0');
             PRAGMA user_version = 2;",
        );
        let t = Tenants::open(&d).unwrap();
        assert_eq!(t.quota("old").unwrap().gpus, Some(vec![1, 0]), "its GPUs kept");
        assert_eq!(t.gpu_share("old"), 1, "a share of 1, as before");
        t.set_quota("old", Quota { gpu_share: Some(5), ..Quota::default() }).unwrap();
        assert!(matches!(t.set_quota("old", Quota { gpu_share: Some(1001), ..Quota::default() }), Err(StateError::BadShare(1001))));
        drop(t);
        assert_eq!(Tenants::open(&d).unwrap().gpu_share("old"), 5, "the share outlives a reopen");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
