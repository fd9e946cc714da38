//! The backend's GPUs as admission hands them out: a new session is given
//! its tenant's GPUs (all of them for a session without a tenant, or a
//! tenant without a list), less those drained for maintenance.
//!
//! The list a session is given is fixed at its start: the session numbers
//! those GPUs 0, 1, ... in that order ([`crate::config::SessionLimits::gpus`])
//! and cannot name any other. Draining a GPU changes what later sessions
//! are given; live ones keep theirs until they end (the operator waits
//! them out, or ends them). Drains are kept in the state database where
//! the backend has one (`--state-dir`), so a restarted backend keeps them.

use crate::tenants::{StateError, Tenants};
use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

/// Why a drain could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// No such GPU.
    #[error("This backend has {count} GPU(s), numbered from 0; there is no GPU {ordinal} (`pvgpu-ctl devices` lists them)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many the backend has.
        count: usize,
    },
    /// The state database failed.
    #[error(transparent)]
    State(#[from] StateError),
}

impl DeviceError {
    /// The HTTP status the control API answers with.
    pub fn status(&self) -> u16 {
        match self {
            DeviceError::NoDevice { .. } => 404,
            DeviceError::State(e) => e.status(),
        }
    }
}

/// The backend's GPUs and which are drained.
pub struct Devices {
    count: usize,
    drained: RwLock<BTreeSet<usize>>,
    store: Option<Arc<Tenants>>,
}

impl Devices {
    /// `count` GPUs (the executor's), with the drains `store` keeps.
    pub fn new(count: usize, store: Option<Arc<Tenants>>) -> Result<Devices, StateError> {
        let drained = match &store {
            Some(s) => s.drained()?.into_iter().collect(),
            None => BTreeSet::new(),
        };
        Ok(Devices { count, drained: RwLock::new(drained), store })
    }

    /// How many GPUs the backend has.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether GPU `ordinal` is drained.
    pub fn is_drained(&self, ordinal: usize) -> bool {
        self.read().contains(&ordinal)
    }

    /// Drains GPU `ordinal` (`on`), or gives it back to new sessions.
    pub fn set_drained(&self, ordinal: usize, on: bool) -> Result<(), DeviceError> {
        if ordinal >= self.count {
            return Err(DeviceError::NoDevice { ordinal, count: self.count });
        }
        let mut drained = self.drained.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = &self.store {
            s.set_drained(ordinal, on)?;
        }
        if on {
            drained.insert(ordinal);
        } else {
            drained.remove(&ordinal);
        }
        tracing::info!(gpu = ordinal, drained = on, "GPU drain changed");
        Ok(())
    }

    /// The GPUs a new session is given, in the order it numbers them:
    /// `tenant`'s list (or all), less those drained and those the backend
    /// lacks. `None`: every GPU, in the backend's order. An empty list
    /// leaves the session without a device (its program's `cuInit` sees
    /// none, as with an empty `CUDA_VISIBLE_DEVICES`).
    pub fn for_session(&self, tenant: Option<&[u32]>) -> Option<Vec<usize>> {
        let drained = self.read();
        if tenant.is_none() && drained.is_empty() {
            return None;
        }
        let all: Vec<usize> = (0..self.count).collect();
        let wanted: Vec<usize> = tenant.map_or(all, |list| list.iter().map(|&g| g as usize).collect());
        let mut seen = BTreeSet::new();
        Some(wanted.into_iter().filter(|g| *g < self.count && !drained.contains(g) && seen.insert(*g)).collect())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeSet<usize>> {
        self.drained.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// A session's GPU list as a worker's `--gpus` takes it: ordinals,
/// comma-separated, or `none`.
pub fn list_arg(gpus: &[usize]) -> String {
    if gpus.is_empty() { "none".into() } else { gpus.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",") }
}

/// A worker's `--gpus` back into the list.
pub fn parse_list_arg(s: &str) -> Result<Vec<usize>, String> {
    if s == "none" {
        return Ok(Vec::new());
    }
    s.split(',').map(|n| n.trim().parse::<usize>().map_err(|_| format!("{n:?} is not a GPU ordinal"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_get_their_tenants_gpus_less_the_drained_ones() {
        let d = Devices::new(3, None).unwrap();
        assert_eq!(d.for_session(None), None, "nothing drained, no list: every GPU");
        assert_eq!(d.for_session(Some(&[2, 0, 2, 7])), Some(vec![2, 0]), "the tenant's order; repeats and missing GPUs left out");
        d.set_drained(0, true).unwrap();
        assert!(d.is_drained(0));
        assert_eq!(d.for_session(None), Some(vec![1, 2]));
        assert_eq!(d.for_session(Some(&[0])), Some(vec![]), "a tenant whose only GPU is drained gets none");
        assert!(matches!(d.set_drained(3, true), Err(DeviceError::NoDevice { ordinal: 3, count: 3 })));
        d.set_drained(0, false).unwrap();
        assert_eq!(d.for_session(None), None);
        for list in [vec![], vec![2, 0]] {
            assert_eq!(parse_list_arg(&list_arg(&list)).unwrap(), list);
        }
        assert!(parse_list_arg("1,x").is_err());
    }

    #[test]
    fn drains_persist_in_the_state_database() {
        let dir = std::env::temp_dir().join(format!("pvgpu-devices-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = Arc::new(Tenants::open(&dir).unwrap());
        Devices::new(2, Some(t.clone())).unwrap().set_drained(1, true).unwrap();
        drop(t);
        let t = Arc::new(Tenants::open(&dir).unwrap());
        assert!(Devices::new(2, Some(t)).unwrap().is_drained(1), "a restarted backend keeps the drain");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
