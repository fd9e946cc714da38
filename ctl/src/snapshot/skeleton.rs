//! Skeleton checkpoints: what decides where a restore places things,
//! written while the session runs (`CheckpointRequest::skeleton`), so that
//! a migration's target makes the session's contexts and loads its
//! modules before the pause (`POST /v1/prepare`).
//!
//! A skeleton holds the contexts, the program's address reservations and,
//! in the order they were made, modules (their images only), streams,
//! events, arrays (without elements), pools and limits: a restore makes
//! exactly these in this order, since the driver places what it makes
//! after what it made before. It holds no device bytes, no allocations, no
//! graphs; [`crate::snapshot::Meta::skeleton`] marks it, and no backend
//! restores it as a session.
//!
//! The snapshot taken at the pause may go on from its skeleton only as the
//! session went on: the same contexts, every reservation still held, and
//! every object of the skeleton still there as it was, any new one made
//! after all of them ([`continues`]). Otherwise the prepared worker is
//! dropped and the session is rebuilt by a fresh one, as without it.

use super::State;

/// Why `full` does not go on from `skeleton` (the session's state at the
/// pause against its skeleton taken before), or `Ok` where a worker that
/// rebuilt the skeleton may rebuild `full` from there.
pub fn continues(skeleton: &State, full: &State) -> Result<(), String> {
    let ctx = |c: &super::Context| (c.id, c.device, c.flags, c.primary);
    if skeleton.contexts.iter().map(ctx).ne(full.contexts.iter().map(ctx)) {
        return Err("its contexts changed".into());
    }
    if let Some(r) = skeleton.reservations.iter().find(|r| !full.reservations.contains(r)) {
        return Err(format!("its reservation at {:#x} was released", r.address));
    }
    let before = made(skeleton);
    let last = before.iter().map(|m| m.0).max().unwrap_or(0);
    let after = made(full);
    for m in &before {
        if !after.contains(m) {
            return Err(format!("{} {:#x} (made {}) is gone or changed", m.1, m.2, m.0));
        }
    }
    if let Some(m) = after.iter().find(|m| m.0 <= last && !before.contains(m)) {
        return Err(format!("{} {:#x} was made before the skeleton's last object and is not in it", m.1, m.2));
    }
    Ok(())
}

/// An object a restore makes in order, as its record says it (an array's
/// blobs left out: a skeleton names none).
#[derive(Debug, PartialEq)]
enum Record<'s> {
    /// A module: its context (its image is checked where it is loaded).
    Module(u64),
    Queue(&'s super::Queue),
    Array(super::ArrayRec),
    Pool(&'s super::PoolRec),
    Limit(&'s super::LimitRec),
}

/// What a restore makes in order: when (the session's count), what, its
/// handle, and its record.
fn made(s: &State) -> Vec<(u64, &'static str, u64, Record<'_>)> {
    let mut out = Vec::new();
    out.extend(s.modules.iter().map(|m| (m.seq, "module", m.id, Record::Module(m.ctx))));
    out.extend(s.streams.iter().map(|q| (q.seq, "stream", q.id, Record::Queue(q))));
    out.extend(s.events.iter().map(|q| (q.seq, "event", q.id, Record::Queue(q))));
    out.extend(s.arrays.iter().map(|a| (a.seq, "array", a.id, Record::Array(super::ArrayRec { blobs: Vec::new(), ..a.clone() }))));
    out.extend(s.pools.iter().map(|p| (p.seq, "memory pool", p.id, Record::Pool(p))));
    for c in &s.contexts {
        out.extend(c.limits.iter().map(|l| (l.seq, "limit of context", c.id, Record::Limit(l))));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Context, LimitRec, Module, Queue, Reservation, State};
    use super::continues;

    fn state() -> State {
        let mut s = State::default();
        s.contexts.push(Context { id: 1, device: 0, flags: 0, primary: true, retains: 1, limits: Vec::new() });
        s.reservations.push(Reservation { ctx: 1, address: 0x7000_0000, length: 2 << 20 });
        s.modules.push(Module { id: 10, ctx: 1, image: 0, functions: vec![], globals: vec![], unlooked: vec![], seq: 1 });
        s.streams.push(Queue { id: 20, ctx: 1, flags: 1, priority: 0, seq: 2 });
        s.events.push(Queue { id: 30, ctx: 1, flags: 2, priority: 0, seq: 3 });
        s
    }

    #[test]
    fn a_session_that_only_grew_goes_on_from_its_skeleton() {
        let skeleton = state();
        let mut full = state();
        assert_eq!(continues(&skeleton, &full), Ok(()));
        full.modules.push(Module { id: 11, ctx: 1, image: 5, functions: vec![], globals: vec![], unlooked: vec![], seq: 4 });
        full.modules[0].image = 3;
        full.streams.push(Queue { id: 21, ctx: 1, flags: 0, priority: -1, seq: 5 });
        full.reservations.push(Reservation { ctx: 1, address: 0x9000_0000, length: 2 << 20 });
        full.contexts[0].limits.push(LimitRec { limit: 1, value: 4096, seq: 6 });
        assert_eq!(continues(&skeleton, &full), Ok(()), "new objects after the skeleton's, blobs renumbered");
    }

    #[test]
    fn what_went_or_changed_since_the_skeleton_is_named() {
        let skeleton = state();
        type Change = fn(&mut State);
        let cases: [(&str, Change); 6] = [
            ("contexts", |s| s.contexts[0].flags = 4),
            ("released", |s| s.reservations.clear()),
            ("stream 0x14", |s| s.streams.clear()),
            ("event 0x1e", |s| s.events[0].flags = 0),
            ("limit of context", |s| s.contexts[0].limits.push(LimitRec { limit: 1, value: 1, seq: 2 })),
            ("module 0xa", |s| s.modules[0].seq = 9),
        ];
        for (want, change) in cases {
            let mut full = state();
            change(&mut full);
            let why = continues(&skeleton, &full).expect_err(want);
            assert!(why.contains(want), "{want}: {why}");
        }
    }
}
