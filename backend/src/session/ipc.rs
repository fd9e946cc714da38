//! Interprocess handles: memory, events and shareable physical memory
//! another session of the same guest may open ([`crate::ipc`]); memory
//! pools and their allocations are in [`super::pool_ipc`].
//!
//! Rules enforced here, besides the registry's scope:
//! - only memory the session allocated with `cuMemAlloc` is exported, and
//!   as a whole allocation (an address inside one names it); exporting it
//!   again gives the same handle, as the driver does;
//! - only events made with `CU_EVENT_INTERPROCESS` are exported, and only
//!   physical memory made with a shareable handle type;
//! - an export is withdrawn when what it names is freed or destroyed, or
//!   its context goes, so a handle never outlives its memory;
//! - opened memory is a range copies and kernels may touch until it is
//!   closed; it (and imported physical memory) counts against the
//!   exporter's quota, not the opener's;
//!   opening a handle again in the same context gives the same address
//!   and needs as many closes.

use super::{Alloc, AllocKind, Io, Owned, Session};
use crate::exec::{CuRes, ExecContext, Executor};
use crate::ipc::Token;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{
    self, HandleRep, IPC_EVENT, IPC_MEMORY, IPC_PHYSICAL, IpcHandle, IpcHandleRep, IpcOpenRep, MEM_SHAREABLE, MemCreateRep,
};
use std::collections::{HashMap, HashSet};

/// `CU_EVENT_INTERPROCESS`.
const EVENT_INTERPROCESS: u32 = 0x4;

/// What a session exported and opened.
#[derive(Default)]
pub(super) struct Ipc {
    /// Exports by kind (`IPC_MEMORY`: an allocation's address, `IPC_EVENT`:
    /// an event id, `IPC_PHYSICAL`: a physical allocation id): their token.
    exported: HashMap<(u32, u64), Token>,
    /// Events made interprocess.
    interprocess: HashSet<u64>,
    /// Memory opened, by address: its context, token and open count.
    opened: HashMap<u64, Opened>,
}

impl Ipc {
    /// Whether it holds nothing (a checkpoint covers only such sessions).
    pub(super) fn is_empty(&self) -> bool {
        self.exported.is_empty() && self.interprocess.is_empty() && self.opened.is_empty()
    }
}

struct Opened {
    ctx: u64,
    token: Token,
    count: u32,
}

pub(super) fn broker<E: Executor>(s: &Session<E>) -> CuRes<std::sync::Arc<crate::ipc::Broker>> {
    s.limits.ipc.clone().ok_or(CuError::NOT_SUPPORTED)
}

fn handle(kind: u32, token: Token, size: u64) -> IpcHandleRep {
    IpcHandleRep { handle: IpcHandle::new(kind, token, size) }
}

/// The handle of `size` bytes of `kind` named by `key`: the one given
/// before, or a new export of what `object` makes.
pub(super) fn export<E: Executor>(
    s: &mut Session<E>,
    kind: u32,
    key: u64,
    size: u64,
    object: impl FnOnce(&mut Session<E>) -> CuRes<crate::ipc::IpcObject>,
) -> CuRes<IpcHandleRep> {
    let broker = broker(s)?;
    if let Some(t) = s.ipc.exported.get(&(kind, key)) {
        return Ok(handle(kind, *t, size));
    }
    let token = broker.export(kind, size, object(s)?)?;
    s.ipc.exported.insert((kind, key), token);
    Ok(handle(kind, token, size))
}

/// What `key` of `kind` named is gone: its export, if any, goes.
pub(super) fn withdraw<E: Executor>(s: &mut Session<E>, kind: u32, key: u64) {
    if let Some(t) = s.ipc.exported.remove(&(kind, key))
        && let Some(b) = &s.limits.ipc
    {
        b.revoke(&t);
    }
}

pub(super) fn ipc_get_mem_handle<E: Executor>(s: &mut Session<E>, r: proto::IpcGetMemHandle, _: &mut Io<'_>) -> CuRes<IpcHandleRep> {
    let ptr = r.ptr.get();
    let (&base, &a) = s.allocs.range(..=ptr).next_back().filter(|(b, a)| ptr < *b + a.len).ok_or(CuError::INVALID_VALUE)?;
    if a.kind != AllocKind::Memory {
        return Err(CuError::INVALID_VALUE);
    }
    export(s, IPC_MEMORY, base, a.len, |s| s.enter(a.ctx)?.ipc_export_mem(base))
}

pub(super) fn ipc_open_mem_handle<E: Executor>(s: &mut Session<E>, r: proto::IpcOpenMemHandle, _: &mut Io<'_>) -> CuRes<IpcOpenRep> {
    let broker = broker(s)?;
    let ctx = r.ctx.get();
    s.enter(ctx)?;
    let token = r.handle.token(IPC_MEMORY).ok_or(CuError::INVALID_VALUE)?;
    if let Some((&ptr, o)) = s.ipc.opened.iter_mut().find(|(_, o)| o.token == token && o.ctx == ctx) {
        o.count += 1;
        let size = s.allocs.get(&ptr).map_or(0, |a| a.len);
        return Ok(IpcOpenRep { ptr: ptr.into(), size: size.into() });
    }
    if s.ipc.opened.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let (claimed, object) = broker.import(IPC_MEMORY, &token)?;
    let (ptr, mapped) = s.enter(ctx)?.ipc_open_mem(&object, claimed, r.flags.get())?;
    let size = claimed.min(mapped);
    s.allocs.insert(ptr, Alloc { len: size, ctx, kind: AllocKind::Opened });
    s.ipc.opened.insert(ptr, Opened { ctx, token, count: 1 });
    Ok(IpcOpenRep { ptr: ptr.into(), size: size.into() })
}

pub(super) fn ipc_close_mem_handle<E: Executor>(s: &mut Session<E>, r: proto::IpcCloseMemHandle, _: &mut Io<'_>) -> CuRes<()> {
    let ptr = r.ptr.get();
    let o = s.ipc.opened.get_mut(&ptr).ok_or(CuError::INVALID_VALUE)?;
    if o.count > 1 {
        o.count -= 1;
        return Ok(());
    }
    let ctx = o.ctx;
    s.enter(ctx)?.ipc_close_mem(ptr)?;
    s.ipc.opened.remove(&ptr);
    s.allocs.remove(&ptr);
    Ok(())
}

pub(super) fn ipc_get_event_handle<E: Executor>(s: &mut Session<E>, r: proto::IpcGetEventHandle, _: &mut Io<'_>) -> CuRes<IpcHandleRep> {
    let id = r.event.get();
    let (ctx, ev) = s.events.get(id).map(|e| (e.ctx, e.value)).ok_or(CuError::INVALID_HANDLE)?;
    if !s.ipc.interprocess.contains(&id) {
        // As the driver answers.
        return Err(CuError::INVALID_HANDLE);
    }
    export(s, IPC_EVENT, id, 0, |s| s.enter(ctx)?.ipc_export_event(ev))
}

pub(super) fn ipc_open_event_handle<E: Executor>(s: &mut Session<E>, r: proto::IpcOpenEventHandle, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let broker = broker(s)?;
    let ctx = r.ctx.get();
    s.enter(ctx)?;
    let token = r.handle.token(IPC_EVENT).ok_or(CuError::INVALID_VALUE)?;
    let (_, object) = broker.import(IPC_EVENT, &token)?;
    let ev = s.enter(ctx)?.ipc_open_event(&object)?;
    let seq = s.next_made();
    match s.events.insert(Owned { ctx, value: ev, flags: 0, priority: 0, seq }) {
        Ok(id) => Ok(HandleRep { handle: id.into() }),
        Err(e) => {
            let _ = s.enter(ctx)?.event_destroy(ev);
            Err(e)
        }
    }
}

pub(super) fn mem_export<E: Executor>(s: &mut Session<E>, r: proto::MemExport, _: &mut Io<'_>) -> CuRes<IpcHandleRep> {
    let id = r.handle.get();
    let (ctx, raw, size, flags) = super::vmm::phys(s, id).ok_or(CuError::INVALID_VALUE)?;
    if flags & MEM_SHAREABLE == 0 {
        // Made without a shareable handle type, as the driver refuses it.
        return Err(CuError::INVALID_VALUE);
    }
    export(s, IPC_PHYSICAL, id, size, |s| s.enter(ctx)?.vmm_export(raw))
}

pub(super) fn mem_import<E: Executor>(s: &mut Session<E>, r: proto::MemImport, _: &mut Io<'_>) -> CuRes<MemCreateRep> {
    let broker = broker(s)?;
    let ctx = r.ctx.get();
    s.enter(ctx)?;
    let token = r.handle.token(IPC_PHYSICAL).ok_or(CuError::INVALID_VALUE)?;
    let (size, object) = broker.import(IPC_PHYSICAL, &token)?;
    let raw = s.enter(ctx)?.vmm_import(&object, size)?;
    // Counted in the exporter's quota, as opened memory is.
    let id = super::vmm::adopt(s, ctx, size, raw, MEM_SHAREABLE, false)?;
    Ok(MemCreateRep { handle: id.into(), size: size.into(), flags: MEM_SHAREABLE.into(), reserved: 0.into() })
}

/// An event was made: whether it may be exported.
pub(super) fn event_made<E: Executor>(s: &mut Session<E>, id: u64, flags: u32) {
    if flags & EVENT_INTERPROCESS != 0 {
        s.ipc.interprocess.insert(id);
    }
}

/// Event `id` was destroyed: its export goes.
pub(super) fn event_gone<E: Executor>(s: &mut Session<E>, id: u64) {
    s.ipc.interprocess.remove(&id);
    withdraw(s, IPC_EVENT, id);
}

/// Context `ctx` is going (every context when `None`): exports of what it
/// held go, and what it opened is closed.
pub(super) fn forget<E: Executor>(s: &mut Session<E>, ctx: Option<u64>) {
    let mine = |c: u64| ctx.is_none_or(|x| x == c);
    // The context each export's object lives in (`None`: already gone).
    let owner = |kind: u32, key: u64| match kind {
        IPC_MEMORY => s.allocs.get(&key).map(|a| a.ctx),
        IPC_EVENT => s.events.get(key).map(|e| e.ctx),
        proto::IPC_POOL => s.pools.get(key).map(|p| p.ctx),
        proto::IPC_POOL_POINTER => s.allocs.get(&key).map(|a| a.ctx),
        _ => super::vmm::phys(s, key).map(|p| p.0),
    };
    let gone: Vec<(u32, u64)> = s.ipc.exported.keys().copied().filter(|&(k, key)| owner(k, key).is_none_or(mine)).collect();
    for (kind, key) in gone {
        withdraw(s, kind, key);
    }
    let events = &s.events;
    s.ipc.interprocess.retain(|id| events.get(*id).is_some_and(|e| !mine(e.ctx)));
    let opened: Vec<(u64, u64)> = s.ipc.opened.iter().filter(|(_, o)| mine(o.ctx)).map(|(&p, o)| (p, o.ctx)).collect();
    for (p, c) in opened {
        let _ = s.enter(c).and_then(|x| x.ipc_close_mem(p));
        s.ipc.opened.remove(&p);
        s.allocs.remove(&p);
    }
}
