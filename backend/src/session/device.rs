//! Devices and contexts: the hello, device queries (answered from what the
//! executor gathered at start-up), primary and created contexts.

use super::{Alloc, AllocKind, CtxEntry, Io, Session, policy};
use crate::exec::graph::ExecGraph;
use crate::exec::{CuRes, ExecContext, Executor};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::{CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, CU_LIMIT_PERSISTING_L2_CACHE_SIZE};
use pvgpu_ring::proto::{self, AttrPair, DevicePropsHead, DevicePropsRep, HandleRep, HelloRep, I32Rep, PROTOCOL_VERSION};

/// Most contexts one session may hold at once.
const MAX_CONTEXTS: usize = 64;

/// `Goodbye`: the serving loop ends the session after the reply.
pub(super) fn goodbye<E: Executor>(_: &mut Session<E>, _: proto::Goodbye, _: &mut Io<'_>) -> CuRes<()> {
    Ok(())
}

/// `Nop`: the round trip is the work.
pub(super) fn nop<E: Executor>(_: &mut Session<E>, _: proto::Nop, _: &mut Io<'_>) -> CuRes<()> {
    Ok(())
}

pub(super) fn hello<E: Executor>(s: &mut Session<E>, r: proto::Hello, _: &mut Io<'_>) -> CuRes<HelloRep> {
    if r.min_version.get() > PROTOCOL_VERSION || r.max_version.get() < PROTOCOL_VERSION {
        return Err(CuError::NOT_SUPPORTED);
    }
    if r.space.get() >= proto::MAX_SPACES {
        return Err(CuError::INVALID_VALUE);
    }
    s.set_space(r.space.get());
    s.features = r.features.get();
    s.hello = true;
    Ok(s.hello_rep())
}

/// A resume reaches a session only after its first request: the serving
/// loop takes a connection's opening `Resume` itself
/// ([`crate::session_loop`]).
pub(super) fn resume<E: Executor>(_: &mut Session<E>, _: proto::Resume, _: &mut Io<'_>) -> CuRes<HelloRep> {
    Err(CuError::INVALID_VALUE)
}

impl<E: Executor> Session<E> {
    /// What a hello (or a resume) is answered with.
    pub fn hello_rep(&self) -> HelloRep {
        HelloRep {
            version: PROTOCOL_VERSION.into(),
            space: self.space.into(),
            driver_version: self.exec.driver_version().into(),
            session_id: self.id.into(),
            executor: proto::fixed_str(self.exec.kind()),
            resume_token: self.token,
        }
    }
}

pub(super) fn init<E: Executor>(s: &mut Session<E>, _: proto::Init, _: &mut Io<'_>) -> CuRes<()> {
    s.initialized = true;
    Ok(())
}

pub(super) fn driver_get_version<E: Executor>(s: &mut Session<E>, _: proto::DriverGetVersion, _: &mut Io<'_>) -> CuRes<I32Rep> {
    Ok(I32Rep { value: s.exec.driver_version().into() })
}

pub(super) fn device_get_count<E: Executor>(s: &mut Session<E>, _: proto::DeviceGetCount, _: &mut Io<'_>) -> CuRes<I32Rep> {
    s.need_init()?;
    Ok(I32Rep { value: (s.gpus.len() as i32).into() })
}

pub(super) fn device_get<E: Executor>(s: &mut Session<E>, r: proto::DeviceGet, _: &mut Io<'_>) -> CuRes<I32Rep> {
    // The guest's device handle is its ordinal; `device` maps it to the
    // executor's at each use.
    s.device(r.device.get())?;
    Ok(I32Rep { value: r.device.get().into() })
}

pub(super) fn device_get_properties<E: Executor>(
    s: &mut Session<E>,
    r: proto::DeviceGetProperties,
    _: &mut Io<'_>,
) -> CuRes<DevicePropsRep> {
    let info = &s.exec.devices()[s.device(r.device.get())?];
    Ok(DevicePropsRep {
        head: DevicePropsHead {
            total_mem: info.total_mem.into(),
            uuid: info.uuid,
            name: proto::fixed_str(&info.name),
            attr_count: (info.attrs.len() as u32).into(),
            reserved: 0.into(),
        },
        attrs: info.attrs.iter().map(|&(a, v)| AttrPair { attr: a.into(), value: v.into() }).collect(),
    })
}

pub(super) fn device_get_attribute<E: Executor>(s: &mut Session<E>, r: proto::DeviceGetAttribute, _: &mut Io<'_>) -> CuRes<I32Rep> {
    let d = s.device(r.device.get())?;
    let v = s.exec.devices()[d].attr(r.attr.get()).ok_or(CuError::INVALID_VALUE)?;
    Ok(I32Rep { value: v.into() })
}

pub(super) fn primary_ctx_retain<E: Executor>(s: &mut Session<E>, r: proto::PrimaryCtxRetain, io: &mut Io<'_>) -> CuRes<HandleRep> {
    let d = s.device(r.device.get())?;
    let id = match s.primary.get_mut(&d) {
        Some((id, refs)) => {
            *refs = refs.checked_add(1).ok_or(CuError::INVALID_VALUE)?;
            *id
        }
        None => {
            let id = new_context(s, d, 0, true, io)?;
            s.primary.insert(d, (id, 1));
            id
        }
    };
    Ok(HandleRep { handle: id.into() })
}

pub(super) fn primary_ctx_release<E: Executor>(s: &mut Session<E>, r: proto::PrimaryCtxRelease, _: &mut Io<'_>) -> CuRes<()> {
    let d = s.device(r.device.get())?;
    let (id, refs) = s.primary.get_mut(&d).ok_or(CuError::INVALID_CONTEXT)?;
    *refs -= 1;
    if *refs == 0 {
        let id = *id;
        s.primary.remove(&d);
        destroy_context(s, id)?;
    }
    Ok(())
}

pub(super) fn ctx_create<E: Executor>(s: &mut Session<E>, r: proto::CtxCreate, io: &mut Io<'_>) -> CuRes<HandleRep> {
    let d = s.device(r.device.get())?;
    let flags = policy::ctx_flags(r.flags.get())?;
    let id = new_context(s, d, flags, false, io)?;
    Ok(HandleRep { handle: id.into() })
}

pub(super) fn ctx_destroy<E: Executor>(s: &mut Session<E>, r: proto::CtxDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let id = r.ctx.get();
    match s.ctxs.get(id) {
        Some(c) if !c.primary => destroy_context(s, id),
        // The primary context goes with its last release, never by destroy.
        _ => Err(CuError::INVALID_CONTEXT),
    }
}

pub(super) fn ctx_synchronize<E: Executor>(s: &mut Session<E>, r: proto::CtxSynchronize, _: &mut Io<'_>) -> CuRes<()> {
    s.enter(r.ctx.get())?.synchronize()?;
    s.synced = true;
    Ok(())
}

/// Peer access between the backend's devices. Enabling or disabling
/// names two contexts of the session on different devices (the same
/// device: `CUDA_ERROR_INVALID_DEVICE`, as the driver answers).
pub(super) fn peer_access<E: Executor>(s: &mut Session<E>, r: proto::PeerAccess, _: &mut Io<'_>) -> CuRes<I32Rep> {
    let v = match r.op.get() {
        proto::PEER_CAN_ACCESS => {
            let (d, p) = (s.device(r.dev.get())?, s.device(r.peer.get())?);
            s.exec.can_access_peer(d, p)?
        }
        proto::PEER_ATTRIBUTE => {
            let (d, p) = (s.device(r.dev.get())?, s.device(r.peer.get())?);
            s.exec.p2p_attribute(r.attr.get(), d, p)?
        }
        op => {
            let (ctx, peer) = (r.ctx.get(), r.peer_ctx.get());
            let pe = s.ctxs.get(peer).ok_or(CuError::INVALID_CONTEXT)?;
            let (peer_dev, peer_id) = (pe.device, pe.ctx.peer_id());
            let dev = s.ctxs.get(ctx).ok_or(CuError::INVALID_CONTEXT)?.device;
            if dev == peer_dev {
                return Err(CuError::INVALID_DEVICE);
            }
            s.enter(ctx)?.peer_access(peer_id, op == proto::PEER_ENABLE, r.flags.get())?;
            0
        }
    };
    Ok(I32Rep { value: v.into() })
}

/// Demotes persisting lines of the L2 cache: the device's, as the driver
/// does; it undoes only what set-asides asked for, so any session may.
pub(super) fn ctx_reset_l2<E: Executor>(s: &mut Session<E>, r: proto::CtxResetL2, _: &mut Io<'_>) -> CuRes<()> {
    s.enter(r.ctx.get())?.reset_persisting_l2()
}

pub(super) fn ctx_get_info<E: Executor>(s: &mut Session<E>, r: proto::CtxGetInfo, _: &mut Io<'_>) -> CuRes<proto::CtxInfoRep> {
    Ok(s.enter(r.ctx.get())?.info()?.into())
}

/// Sets a limit a snapshot names, checked as the guest's command is (the
/// persisting L2 set-aside was cut to the session's share when it was
/// set, and is cut again here).
pub(super) fn restore_limit<E: Executor>(s: &mut Session<E>, ctx: u64, limit: u32, value: u64, seq: u64) -> CuRes<()> {
    let r = proto::CtxLimit { ctx: ctx.into(), limit: limit.into(), set: 1.into(), value: value.into() };
    ctx_limit(s, r, &mut Io::internal(&mut Vec::new()))?;
    if let Some((_, at)) = s.ctxs.get_mut(ctx).and_then(|e| e.limits.get_mut(&limit)) {
        *at = seq;
    }
    Ok(())
}

pub(super) fn ctx_limit<E: Executor>(s: &mut Session<E>, r: proto::CtxLimit, _: &mut Io<'_>) -> CuRes<proto::U64Rep> {
    let set = r.set.get() != 0;
    if set {
        policy::ctx_limit(r.limit.get())?;
    }
    let (ctx, limit) = (r.ctx.get(), r.limit.get());
    let c = s.enter(ctx)?;
    if !set {
        return Ok(proto::U64Rep { value: c.get_limit(limit)?.into() });
    }
    let mut value = r.value.get();
    if limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE.0 {
        let dev = s.ctxs.get(ctx).ok_or(CuError::INVALID_CONTEXT)?.device;
        let max = s.exec.devices().get(dev).and_then(|d| d.attr(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE.0 as i32)).unwrap_or(0);
        value = policy::persisting_l2(value, max.max(0) as u64, s.limits.persisting_l2_percent);
    }
    let c = s.enter(ctx)?;
    // What the driver reserves for a limit (a stack for every thread that
    // can be resident, the heap, the printf buffer) counts against the
    // quota: a limit that does not fit is put back.
    let old = c.get_limit(limit)?;
    c.set_limit(limit, value)?;
    if !s.remeasure() {
        s.enter(ctx)?.set_limit(limit, old)?;
        s.remeasure();
        return Err(CuError::OUT_OF_MEMORY);
    }
    let seq = s.next_made();
    if let Some(e) = s.ctxs.get_mut(ctx) {
        e.limits.insert(limit, (value, seq));
    }
    Ok(proto::U64Rep { value: value.into() })
}

/// Creates a context, makes it current, and page-locks the data area
/// through it if no context of the session has yet.
fn new_context<E: Executor>(s: &mut Session<E>, device: usize, flags: u32, primary: bool, io: &Io<'_>) -> CuRes<u64> {
    if s.ctxs.len() >= MAX_CONTEXTS {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let mut ctx = s.exec.create_context(device, flags, s.space)?;
    ctx.attach_host_calls(s.host_calls.clone());
    let id = s.ctxs.insert(CtxEntry { primary, device, flags, ctx, limits: Default::default() })?;
    if let Some(l) = &s.limits.peer_ledger {
        l.note_device(device);
    }
    // Creating a context makes it current on this thread.
    s.current = Some(id);
    // What the driver reserves for a context counts against the quota.
    if !s.remeasure() {
        destroy_context(s, id)?;
        return Err(CuError::OUT_OF_MEMORY);
    }
    super::area_pin::at_new_context(s, id, io.area);
    super::mirror::register_all(s, id);
    Ok(id)
}

/// Page-locks the data area through context `id` if no context of the
/// session has yet.
pub(super) fn pin_area<E: Executor>(s: &mut Session<E>, id: u64, area: Option<&pvgpu_ring::region::DataArea>) {
    if let (None, Some(area), Some(entry)) = (s.area_pinned_by, area, s.ctxs.get_mut(id)) {
        // SAFETY: the connection owns the data area's mapping and outlives
        // the session, so the range stays mapped longer than any context of
        // the session.
        match unsafe { entry.ctx.register_host(area.base(), area.len()) } {
            Ok(device) => {
                s.area_pinned_by = Some(id);
                s.area_device = device;
                if let Some(d) = device {
                    // Kernels and copies may use it as device memory: it is
                    // the session's own shared memory.
                    s.allocs.insert(d, Alloc { len: area.len() as u64, ctx: id, kind: AllocKind::Area });
                    tracing::debug!(session = s.id, device = d, same = d == area.base() as u64, "data area mapped for the device");
                }
            }
            Err(e) => tracing::debug!(session = s.id, error = %e, "data area not page-locked; copies go through the driver's staging"),
        }
    }
}

/// Forgets everything of context `id`, then destroys it (which frees all
/// device memory, modules, streams and events made in it).
fn destroy_context<E: Executor>(s: &mut Session<E>, id: u64) -> CuRes<()> {
    if s.ctxs.get(id).is_none() {
        return Err(CuError::INVALID_CONTEXT);
    }
    // The driver finishes a context's work before destroying it, and what
    // its kernels printed comes out then (NVIDIA's device-side-launch
    // sample prints only this way): finished here first, before anything
    // of it is freed, and the output kept for the next reply, even when no
    // context is left to ask. A fault of that work is the context's, which
    // is going anyway.
    if let Ok(ctx) = s.enter(id) {
        let _ = ctx.synchronize();
    }
    super::graph::forget(s, Some(id));
    super::vmm::forget(s, Some(id));
    super::array::forget(s, Some(id));
    super::ipc::forget(s, Some(id));
    super::pool::forget(s, Some(id));
    super::mirror::context_going(s, id);
    super::pinning::context_going(s, id);
    let mut entry = s.ctxs.remove(id).ok_or(CuError::INVALID_CONTEXT)?;
    entry.ctx.take_output(&mut s.output_left);
    s.functions.drain_where(|f| f.ctx == id);
    let functions = &s.functions;
    s.function_ids.retain(|_, f| functions.get(*f).is_some());
    s.modules.drain_where(|m| m.ctx == id);
    s.streams.drain_where(|st| st.ctx == id);
    s.events.drain_where(|e| e.ctx == id);
    let freed: u64 =
        s.allocs.values().filter(|a| a.ctx == id && matches!(a.kind, AllocKind::Memory | AllocKind::Pooled(_))).map(|a| a.len).sum();
    s.allocs.retain(|_, a| a.ctx != id);
    s.mem_used -= freed;
    if s.current == Some(id) {
        s.current = None;
    }
    if s.area_pinned_by == Some(id) {
        // The registration goes with the context; the next one renews it.
        s.area_pinned_by = None;
        s.area_device = None;
    }
    drop(entry);
    s.remeasure();
    Ok(())
}

/// The data area's device address (0: the device cannot reach it).
pub(super) fn data_area_device<E: Executor>(s: &mut Session<E>, _: proto::DataAreaDevice, io: &mut Io<'_>) -> CuRes<proto::U64Rep> {
    super::area_pin::want_pool(s, io.area);
    Ok(proto::U64Rep { value: s.area_device.unwrap_or(0).into() })
}

/// Memory as the session sees it (its quota, its allocations) and the
/// device's gauges, for NVML in the guest.
pub(super) fn device_status<E: Executor>(s: &mut Session<E>, r: proto::DeviceStatus, _: &mut Io<'_>) -> CuRes<proto::DeviceStatusRep> {
    let d = s.device(r.device.get())?;
    let g = s.exec.gauges(d)?;
    let total = s.exec.devices()[d].total_mem;
    let unknown = |v: Option<u32>| v.unwrap_or(u32::MAX).into();
    Ok(proto::DeviceStatusRep {
        mem_total: s.limits.mem_quota.map_or(total, |q| q.min(total)).into(),
        mem_used: s.charged().into(),
        gpu_util: unknown(g.gpu_util),
        mem_util: unknown(g.mem_util),
        temperature: unknown(g.temperature),
        power_mw: unknown(g.power_mw),
        driver_version: proto::fixed_str(&g.driver_version),
        pcie_gen: unknown(g.link.generation),
        pcie_width: unknown(g.link.width),
        pcie_max_gen: unknown(g.link.max_gen),
        pcie_max_width: unknown(g.link.max_width),
    })
}

#[cfg(test)]
mod tests {
    use super::super::snapshot_fixture::{restore, session, snapshot};
    use super::*;

    /// `CU_LIMIT_STACK_SIZE`, `CU_LIMIT_PRINTF_FIFO_SIZE`.
    const STACK: u32 = 0;
    const PRINTF: u32 = 1;

    fn limit(s: &mut Session<crate::exec::host::HostExecutor>, ctx: u64, limit: u32, set: Option<u64>) -> u64 {
        let r =
            proto::CtxLimit { ctx: ctx.into(), limit: limit.into(), set: u32::from(set.is_some()).into(), value: set.unwrap_or(0).into() };
        ctx_limit(s, r, &mut Io::internal(&mut Vec::new())).unwrap().value.get()
    }

    #[test]
    fn limits_the_guest_set_come_back_with_its_context() {
        let (mut s, ctx) = session();
        limit(&mut s, ctx, STACK, Some(8192));
        limit(&mut s, ctx, PRINTF, Some(4 << 20));
        let file = snapshot(&mut s, |m| assert_eq!(m.state.contexts[0].limits.len(), 2));
        let mut back = restore(&file).unwrap();
        assert_eq!(limit(&mut back, ctx, STACK, None), 8192);
        assert_eq!(limit(&mut back, ctx, PRINTF, None), 4 << 20);
        let refused = snapshot(&mut s, |m| m.state.contexts[0].limits[0].limit = 99);
        assert!(restore(&refused).is_err(), "a limit a guest may not set");
    }
}
