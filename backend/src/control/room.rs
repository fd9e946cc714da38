//! Whether the session a snapshot describes fits this backend's memory
//! and session quotas: checked for a migration's skeleton before the
//! pause (`POST /v1/prepare`) and for every snapshot handed over, so that
//! a session the quotas here would not hold is refused by name (HTTP 422)
//! while it still runs, or can be taken back, where it was, not lost when
//! its rebuild fails here.

use super::Refusal;
use crate::roster::Roster;
use crate::tenants::Tenants;
use pvgpu_ctl::snapshot::Meta;
use std::path::Path;

/// The quotas a restored session is held to here.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Device memory of one session (`--mem-quota`).
    pub session: Option<u64>,
    /// Device memory of one peer's sessions together, where its tenant
    /// has no memory quota (`--peer-mem-quota`).
    pub peer: Option<u64>,
}

/// The device memory a snapshot's session holds at least, as a quota
/// counts it once rebuilt: what the snapshot says it held, and no less
/// than its allocations and the physical memory it has not released
/// (what the driver reserves for it counts besides).
pub fn held(meta: &Meta) -> u64 {
    let allocations = meta.state.allocations.iter().map(|a| a.length);
    let physical = meta.state.physical.iter().filter(|p| !p.released).map(|p| p.length);
    allocations.chain(physical).fold(0, u64::saturating_add).max(meta.held_bytes)
}

/// Refuses `meta`'s session (`path` names it) where it would pass a quota
/// here: its own, or its peer's (its tenant's) with the sessions the peer
/// has here now, live in `roster` or `parked` (snapshots restored here
/// whose programs have not come back yet: how many, and the memory their
/// sessions hold).
pub(super) fn check(
    meta: &Meta,
    path: &Path,
    limits: Limits,
    (roster, parked): (&Roster, (usize, u64)),
    tenants: Option<&Tenants>,
) -> Result<(), Refusal> {
    let need = held(meta);
    let refused = |why: String| Err(Refusal::new(422, format!("{}: {why}; restore it where its quotas hold it", path.display())));
    if let Some(cap) = limits.session.filter(|&cap| need > cap) {
        return refused(format!("the session holds {need} bytes of device memory, more than a session may hold here ({cap}, --mem-quota)"));
    }
    let quota = meta.peer.strip_prefix("tenant:").and_then(|t| tenants?.quota(t));
    let (live, live_bytes) = roster.peer_usage(&meta.peer);
    let (sessions, used) = (live + parked.0, live_bytes.saturating_add(parked.1));
    let cap = quota.as_ref().and_then(|q| q.memory_bytes).or(limits.peer);
    if let Some(cap) = cap.filter(|&cap| need.saturating_add(used) > cap) {
        return refused(format!(
            "the session holds {need} bytes of device memory, and the sessions of {} hold {used} of the {cap} they may hold here together",
            meta.peer
        ));
    }
    if quota.and_then(|q| q.max_sessions).is_some_and(|max| sessions >= max as usize) {
        return refused(format!("{} has {sessions} sessions here, as many as its quota allows", meta.peer));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvgpu_ctl::snapshot::{Allocation, Physical, State};

    fn state(allocs: &[u64], physical: &[(u64, bool)]) -> State {
        State {
            allocations: allocs
                .iter()
                .map(|&length| Allocation { ctx: 1, address: 0, length, blob: 0, pool: None, handed: false })
                .collect(),
            physical: physical.iter().map(|&(length, released)| Physical { id: 1, ctx: 1, length, flags: 0, released }).collect(),
            ..State::default()
        }
    }

    fn meta(state: State, held_bytes: u64) -> Meta {
        Meta {
            created_unix_seconds: 0,
            session: 1,
            peer: "uid:7".into(),
            token: String::new(),
            executor: "host".into(),
            devices: Vec::new(),
            gpus: None,
            space: 0,
            state_bytes: 0,
            state,
            skeleton: false,
            held_bytes,
        }
    }

    #[test]
    fn a_session_holds_its_allocations_and_the_physical_memory_it_kept() {
        assert_eq!(held(&meta(state(&[100, 28], &[(1 << 20, false), (4096, true)]), 0)), 128 + (1 << 20));
        assert_eq!(held(&meta(State::default(), 0)), 0);
        assert_eq!(held(&meta(State::default(), 5000)), 5000, "a skeleton says what it held");
    }

    #[test]
    fn a_session_over_its_own_quota_or_its_peers_is_refused_by_name() {
        let roster = Roster::default();
        let here = (&roster, (0, 0));
        let meta = meta(state(&[64 << 20], &[]), 0);
        let path = Path::new("/s.pvgpu");
        let open = Limits { session: None, peer: None };
        assert!(check(&meta, path, open, here, None).is_ok());
        let small = Limits { session: Some(32 << 20), peer: None };
        let e = check(&meta, path, small, here, None).unwrap_err();
        assert!(e.status == 422 && e.message.contains("--mem-quota") && e.message.contains("/s.pvgpu"), "{}", e.message);
        let peer = Limits { session: None, peer: Some(48 << 20) };
        let e = check(&meta, path, peer, here, None).unwrap_err();
        assert!(e.status == 422 && e.message.contains("uid:7"), "{}", e.message);
        let exact = Limits { session: Some(64 << 20), peer: Some(64 << 20) };
        assert!(check(&meta, path, exact, here, None).is_ok(), "exactly the quota");
        // Another of the peer's sessions parked here, its program not back
        // yet, counts as if it were.
        let e = check(&meta, path, exact, (&roster, (1, 1 << 20)), None).unwrap_err();
        assert!(e.status == 422 && e.message.contains("hold 1048576 of the 67108864"), "{}", e.message);
    }
}
