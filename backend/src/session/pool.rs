//! Memory pools of the program's own (`cuMemPoolCreate`): made on a
//! context's device, allocated from on its streams, their attributes and
//! access, trimmed, destroyed. A pool is named by the session's id; the
//! driver's pool stays in the backend. Each pool belongs to the context it
//! was made in (the drop-in library makes it in a context of the pool's
//! device, the device's primary one unless the current one is there) and
//! goes with that context or the session. Its allocations count against
//! the quota as any other.

use super::{Alloc, AllocKind, Io, Session};
use crate::exec::pool::PoolOp;
use crate::exec::{CuRes, ExecContext, Executor};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, DptrRep, HandleRep, I32Rep, U64Rep};

/// A pool of the session.
pub(super) struct PoolEntry {
    /// The context it was made in.
    pub(super) ctx: u64,
    /// The executor's pool.
    pub(super) raw: u64,
    /// Made with a shareable handle type (`pool_ipc`).
    pub(super) shareable: bool,
    /// Imported from another process (`pool_ipc`): it gives allocations
    /// only by import.
    pub(super) imported: bool,
    /// What a checkpoint keeps to make it again: its size limit, the
    /// attributes set on it (reuse policies, release threshold) and the
    /// access set for other devices.
    pub(super) made: PoolMade,
}

/// How a pool was made and set up since.
#[derive(Default, Clone)]
pub(super) struct PoolMade {
    pub(super) max_size: u64,
    pub(super) attributes: std::collections::BTreeMap<u32, u64>,
    /// By the device's ordinal as the guest numbers it.
    pub(super) access: std::collections::BTreeMap<i32, u32>,
    /// When it was made, in the order of the session's modules, streams
    /// and events.
    pub(super) seq: u64,
}

fn entry<E: Executor>(s: &Session<E>, pool: u64) -> CuRes<(u64, u64)> {
    s.pools.get(pool).map(|p| (p.ctx, p.raw)).ok_or(CuError::INVALID_VALUE)
}

pub(super) fn mem_pool_create<E: Executor>(s: &mut Session<E>, r: proto::MemPoolCreate, _: &mut Io<'_>) -> CuRes<HandleRep> {
    create(s, r.ctx.get(), r.max_size.get(), false)
}

/// The session's pools, as a checkpoint keeps them (it holds no shared
/// ones).
pub(super) fn describe<E: Executor>(s: &Session<E>) -> Vec<pvgpu_ctl::snapshot::PoolRec> {
    s.pools
        .iter()
        .map(|(id, p)| pvgpu_ctl::snapshot::PoolRec {
            id,
            ctx: p.ctx,
            max_size: p.made.max_size,
            attributes: p.made.attributes.iter().map(|(&a, &v)| (a, v)).collect(),
            access: p.made.access.iter().map(|(&d, &f)| (d, f)).collect(),
            seq: p.made.seq,
        })
        .collect()
}

/// Makes a pool as a snapshot describes it, under the id the guest holds,
/// and sets it up again through the commands that set it up (checked as
/// they are).
pub(super) fn remake<E: Executor>(s: &mut Session<E>, id: u64, ctx: u64, made: PoolMade) -> CuRes<()> {
    if s.pools.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let raw = s.enter(ctx)?.pool(PoolOp::Create { max_size: made.max_size, shareable: false })?;
    let fresh = PoolMade { max_size: made.max_size, seq: made.seq, ..PoolMade::default() };
    if let Err(e) = s.pools.insert_at(id, PoolEntry { ctx, raw, shareable: false, imported: false, made: fresh }) {
        let _ = s.enter(ctx).and_then(|c| c.pool(PoolOp::Destroy(raw)));
        return Err(e);
    }
    let mut out = Vec::new();
    for (&attr, &value) in &made.attributes {
        let r = proto::MemPoolAttributeOf { pool: id.into(), attr: attr.into(), set: 1.into(), value: value.into() };
        mem_pool_attribute_of(s, r, &mut Io::internal(&mut out))?;
    }
    for (&dev, &flags) in &made.access {
        let r = proto::MemPoolAccessOf { pool: id.into(), dev: dev.into(), set: 1.into(), flags: flags.into(), reserved: 0.into() };
        mem_pool_access_of(s, r, &mut Io::internal(&mut out))?;
    }
    Ok(())
}

/// Makes a pool in `ctx` (`shareable`: another process of the guest may
/// import it).
pub(super) fn create<E: Executor>(s: &mut Session<E>, ctx: u64, max_size: u64, shareable: bool) -> CuRes<HandleRep> {
    if s.pools.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let raw = s.enter(ctx)?.pool(PoolOp::Create { max_size, shareable })?;
    let made = PoolMade { max_size, seq: s.next_made(), ..PoolMade::default() };
    adopt(s, PoolEntry { ctx, raw, shareable, imported: false, made })
}

/// Keeps a pool the executor made; destroys it if the session holds as
/// many objects as it may.
pub(super) fn adopt<E: Executor>(s: &mut Session<E>, p: PoolEntry) -> CuRes<HandleRep> {
    let (ctx, raw) = (p.ctx, p.raw);
    match s.pools.insert(p) {
        Ok(id) => Ok(HandleRep { handle: id.into() }),
        Err(e) => {
            let _ = s.enter(ctx).and_then(|c| c.pool(PoolOp::Destroy(raw)));
            Err(e)
        }
    }
}

pub(super) fn mem_pool_destroy<E: Executor>(s: &mut Session<E>, r: proto::MemPoolDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, raw) = entry(s, r.pool.get())?;
    s.enter(ctx)?.pool(PoolOp::Destroy(raw))?;
    s.pools.remove(r.pool.get());
    super::ipc::withdraw(s, pvgpu_ring::proto::IPC_POOL, r.pool.get());
    Ok(())
}

/// Allocates from a pool on a stream of `ctx`, within the quota and the
/// object limit; on a capturing stream the memory is the graph's, as a
/// stream-ordered allocation's is.
pub(super) fn mem_alloc_from_pool<E: Executor>(s: &mut Session<E>, r: proto::MemAllocFromPool, _: &mut Io<'_>) -> CuRes<DptrRep> {
    let (ctx, size, pool) = (r.ctx.get(), r.size.get(), r.pool.get());
    let (_, raw) = entry(s, pool)?;
    if s.pools.get(pool).is_some_and(|p| p.imported) {
        // An imported pool gives no new allocations; refused as the driver
        // refuses it (H100, driver 580).
        return Err(CuError::INVALID_VALUE);
    }
    if size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    if s.over_quota(size) || s.allocs.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let st = s.stream(r.stream.get(), ctx)?;
    let in_graph = match st {
        Some(st) => super::graph::capturing(s, ctx, st)?,
        None => false,
    };
    super::graph::refuse_during_capture(s, ctx, st, super::graph::graph_memory_allowed(s))?;
    let dptr = s.enter(ctx)?.pool(PoolOp::Alloc { pool: raw, size, stream: st })?;
    let kind = if in_graph { AllocKind::Graph } else { AllocKind::Pooled(pool) };
    s.allocs.insert(dptr, Alloc { len: size, ctx, kind });
    if !in_graph {
        s.mem_used += size;
    }
    Ok(DptrRep { dptr: dptr.into() })
}

/// The attributes a session may read and set, as of the default pool
/// ([`super::memory::pool_attribute_allowed`]).
pub(super) fn mem_pool_attribute_of<E: Executor>(s: &mut Session<E>, r: proto::MemPoolAttributeOf, _: &mut Io<'_>) -> CuRes<U64Rep> {
    let (ctx, raw) = entry(s, r.pool.get())?;
    let (attr, set) = (r.attr.get(), (r.set.get() != 0).then_some(r.value.get()));
    if !super::memory::pool_attribute_allowed(attr, set) {
        return Err(CuError::INVALID_VALUE);
    }
    let v = s.enter(ctx)?.pool(PoolOp::Attribute { pool: raw, attr, set })?;
    if let (Some(v), 1..=4) = (set, attr)
        && let Some(p) = s.pools.get_mut(r.pool.get())
    {
        p.made.attributes.insert(attr, v);
    }
    Ok(U64Rep { value: v.into() })
}

pub(super) fn mem_pool_access_of<E: Executor>(s: &mut Session<E>, r: proto::MemPoolAccessOf, _: &mut Io<'_>) -> CuRes<I32Rep> {
    let (ctx, raw) = entry(s, r.pool.get())?;
    let device = s.device(r.dev.get())?;
    let set = super::memory::access_flags(r.set.get(), r.flags.get())?;
    let flags = s.enter(ctx)?.pool(PoolOp::Access { pool: raw, device, set })?;
    if let (Some(f), Some(p)) = (set, s.pools.get_mut(r.pool.get())) {
        p.made.access.insert(r.dev.get(), f);
    }
    Ok(I32Rep { value: (flags as i32).into() })
}

/// Trims a pool of the session, or the default pool of a context's device.
pub(super) fn mem_pool_trim<E: Executor>(s: &mut Session<E>, r: proto::MemPoolTrim, _: &mut Io<'_>) -> CuRes<()> {
    let (ctx, pool) = match r.pool.get() {
        0 => (r.ctx.get(), None),
        id => entry(s, id).map(|(c, raw)| (c, Some(raw)))?,
    };
    s.enter(ctx)?.pool(PoolOp::Trim { pool, keep: r.keep.get() })?;
    Ok(())
}

/// Destroys the pools made in context `ctx` (all with `None`) while their
/// contexts exist, after freeing what the session still holds from them:
/// the driver would keep a pool with live allocations until they are
/// freed, and a session that ends frees nothing more.
pub(super) fn forget<E: Executor>(s: &mut Session<E>, ctx: Option<u64>) {
    let mine = |c: u64| ctx.is_none_or(|x| x == c);
    let held: Vec<(u64, u64)> = s
        .allocs
        .iter()
        .filter(|(_, a)| matches!(a.kind, AllocKind::Pooled(_) | AllocKind::PoolImported) && mine(a.ctx))
        .map(|(&d, a)| (d, a.ctx))
        .collect();
    for (dptr, c) in held {
        if s.enter(c).and_then(|x| x.mem_free(dptr)).is_ok()
            && let Some(a) = s.allocs.remove(&dptr)
            && matches!(a.kind, AllocKind::Pooled(_))
        {
            s.mem_used -= a.len;
        }
    }
    for p in s.pools.drain_where(|p| mine(p.ctx)) {
        let _ = s.enter(p.ctx).and_then(|x| x.pool(PoolOp::Destroy(p.raw)));
    }
}

#[cfg(test)]
mod tests {
    use super::super::Io;
    use super::super::RestoreError;
    use super::super::snapshot_fixture::{restore, session, snapshot};
    use super::*;

    #[test]
    fn a_pool_comes_back_with_its_settings_and_allocations() {
        let (mut s, ctx) = session();
        let mut out = Vec::new();
        let pool =
            mem_pool_create(&mut s, proto::MemPoolCreate { ctx: ctx.into(), max_size: (1 << 20).into() }, &mut Io::internal(&mut out))
                .unwrap()
                .handle
                .get();
        let set = proto::MemPoolAttributeOf { pool: pool.into(), attr: 4.into(), set: 1.into(), value: 4096.into() };
        mem_pool_attribute_of(&mut s, set, &mut Io::internal(&mut out)).unwrap();
        let alloc = proto::MemAllocFromPool { ctx: ctx.into(), pool: pool.into(), size: 8192.into(), stream: 0.into() };
        let d = mem_alloc_from_pool(&mut s, alloc, &mut Io::internal(&mut out)).unwrap().dptr.get();
        let file = snapshot(&mut s, |_| {});
        let mut back = restore(&file).unwrap();
        assert_eq!(back.allocs.get(&d).map(|a| a.kind), Some(AllocKind::Pooled(pool)));
        let get = |attr: u32| proto::MemPoolAttributeOf { pool: pool.into(), attr: attr.into(), set: 0.into(), value: 0.into() };
        assert_eq!(
            mem_pool_attribute_of(&mut back, get(4), &mut Io::internal(&mut out)).unwrap().value.get(),
            4096,
            "its release threshold"
        );
        assert_eq!(mem_pool_attribute_of(&mut back, get(7), &mut Io::internal(&mut out)).unwrap().value.get(), 8192, "its bytes in use");
        let over = proto::MemAllocFromPool { size: (1 << 20).into(), ..alloc };
        assert!(mem_alloc_from_pool(&mut back, over, &mut Io::internal(&mut out)).is_err(), "its size limit");

        let attribute = snapshot(&mut s, |m| m.state.pools[0].attributes.push((7, 1)));
        assert!(matches!(restore(&attribute), Err(RestoreError::Rebuild { .. })), "a read-only attribute set");
        let access = snapshot(&mut s, |m| m.state.pools[0].access.push((5, 3)));
        assert!(matches!(restore(&access), Err(RestoreError::Rebuild { .. })), "a device the session does not have");
        let orphan = snapshot(&mut s, |m| m.state.allocations[0].pool = Some(pool + 1));
        assert!(matches!(restore(&orphan), Err(RestoreError::Inconsistent(_))), "an allocation of a pool it does not hold");
    }
}
