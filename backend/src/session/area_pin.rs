//! The ring's data area, page-locked when it is first needed.
//!
//! Page-locking the whole area (64 MiB of copy staging and the 256 MiB
//! pool the program's `cuMemAllocHost` draws from, by default) with the
//! session's first context took over 100 ms of every program's start on
//! the H100, whether or not it ever copied much or allocated page-locked
//! memory. A frontend that sends [`proto::AreaPinOnDemand`] tells the
//! backend where its staging ends, and each part is page-locked when it is
//! first needed:
//!
//! - the staging, for copies only (never mapped for the device), at the
//!   first copy of 64 KiB or more through it, in that copy's context, as
//!   [`super::pinning`] page-locks such memory;
//! - the pool, mapped for the device as the whole area was, when the
//!   program first asks for the area's device address (the frontend does
//!   at its first `cuMemAllocHost`), through the current context or, with
//!   none, the next one made; its registration goes with that context, and
//!   the next context renews it.
//!
//! A frontend that does not send it gets the whole area page-locked with
//! the first context, as before ([`super::device::pin_area`]).

use super::pinning::CopyPin;
use super::{Alloc, AllocKind, Io, Session};
use crate::exec::{CuRes, ExecContext, Executor};
use crate::staging::STAGE_MIN;
use pvgpu_ring::CuError;
use pvgpu_ring::proto;
use pvgpu_ring::region::DataArea;

/// A data area page-locked part by part.
pub(super) struct OnDemand {
    /// Bytes of copy staging at the start of the area.
    staging: u64,
    /// The staging, page-locked for copies ([`super::pinning`]).
    staging_pin: CopyPin,
    /// The program allocates page-locked memory: the pool is page-locked
    /// through the next context, unless one holds it.
    pool_wanted: bool,
    /// The driver refused the pool: not tried again (copies work without).
    pool_refused: bool,
}

/// The area's copy staging, for [`super::pinning`].
pub(super) fn staging_pin<E: Executor>(s: &mut Session<E>) -> Option<&mut CopyPin> {
    s.on_demand.as_mut().map(|d| &mut d.staging_pin)
}

pub(super) fn area_pin_on_demand<E: Executor>(s: &mut Session<E>, r: proto::AreaPinOnDemand, io: &mut Io<'_>) -> CuRes<()> {
    let area = io.area.ok_or(CuError::NOT_SUPPORTED)?;
    let staging = r.staging.get();
    if staging > area.len() as u64 || staging % 4096 != 0 || s.on_demand.is_some() {
        return Err(CuError::INVALID_VALUE);
    }
    // Too late where the first context page-locked the whole area already.
    if s.area_pinned_by.is_none() {
        let staging_pin = CopyPin::new(area.base(), staging as usize);
        s.on_demand = Some(OnDemand { staging, staging_pin, pool_wanted: false, pool_refused: false });
    }
    Ok(())
}

/// How the area is page-locked, for a checkpoint: part by part, or
/// (`None`) whole with the first context.
pub(super) fn describe<E: Executor>(s: &Session<E>) -> Option<pvgpu_ctl::snapshot::AreaRec> {
    s.on_demand.as_ref().map(|d| pvgpu_ctl::snapshot::AreaRec { staging: d.staging, pool_wanted: d.pool_wanted })
}

/// A restored session's area page-locked part by part as its checkpoint
/// says, before its first context is made again. The pool of the
/// connection's area is page-locked when the program asks for the area's
/// device address, even where its checkpoint's was: the area is the new
/// connection's, and the program's library asks anew at its first
/// page-locked allocation on it (the ones before are in the old
/// connection's area). Page-locking the pool ahead cost a training's
/// migration 0.12-0.17 s of its pause on the H200, for memory the program
/// may never allocate. A record that does not fit this connection's area
/// is refused.
pub(super) fn restore<E: Executor>(
    s: &mut Session<E>,
    rec: Option<&pvgpu_ctl::snapshot::AreaRec>,
    area: Option<&DataArea>,
) -> Result<(), super::RestoreError> {
    let (Some(rec), Some(area)) = (rec, area) else { return Ok(()) };
    if rec.staging > area.len() as u64 || rec.staging % 4096 != 0 {
        return Err(super::RestoreError::Inconsistent(format!("{} bytes of copy staging in a data area of {}", rec.staging, area.len())));
    }
    let staging_pin = CopyPin::new(area.base(), rec.staging as usize);
    s.on_demand = Some(OnDemand { staging: rec.staging, staging_pin, pool_wanted: false, pool_refused: false });
    Ok(())
}

/// Context `id` was made: the whole area is page-locked through it (a
/// frontend that did not ask otherwise), or the pool if it is wanted.
pub(super) fn at_new_context<E: Executor>(s: &mut Session<E>, id: u64, area: Option<&DataArea>) {
    match &s.on_demand {
        None => super::device::pin_area(s, id, area),
        Some(d) if d.pool_wanted => pin_pool(s, id, area),
        Some(_) => {}
    }
}

/// The program asks for the area's device address: the pool is wanted,
/// page-locked now through the current context if there is one.
pub(super) fn want_pool<E: Executor>(s: &mut Session<E>, area: Option<&DataArea>) {
    let Some(d) = &mut s.on_demand else { return };
    d.pool_wanted = true;
    let ctx = s.current.or_else(|| s.ctxs.iter().map(|(id, _)| id).next());
    if let Some(id) = ctx {
        pin_pool(s, id, area);
    }
}

/// Page-locks the pool (the area past the staging) through context `id`
/// and maps it for the device, unless some context holds it.
fn pin_pool<E: Executor>(s: &mut Session<E>, id: u64, area: Option<&DataArea>) {
    let (Some(d), Some(area)) = (&s.on_demand, area) else { return };
    let (staging, len) = (d.staging as usize, area.len().saturating_sub(d.staging as usize));
    if s.area_pinned_by.is_some() || d.pool_refused || len == 0 {
        return;
    }
    let Ok(c) = s.enter(id) else { return };
    // SAFETY: the connection owns the data area's mapping and outlives the
    // session; `staging` is within the area (checked when it was set).
    let r = unsafe { c.register_host(area.base().add(staging), len) };
    match r {
        Ok(device) => {
            s.area_pinned_by = Some(id);
            // Where the device reaches the area's start, were all of it
            // mapped as the pool is.
            s.area_device = device.and_then(|dev| dev.checked_sub(staging as u64));
            if let Some(dev) = device {
                s.allocs.insert(dev, Alloc { len: len as u64, ctx: id, kind: AllocKind::Area });
            }
        }
        Err(e) => {
            if let Some(d) = &mut s.on_demand {
                d.pool_refused = true;
            }
            tracing::debug!(session = s.id, error = %e, "page-locked pool not page-locked; copies go through the driver's staging");
        }
    }
}

/// A copy of `len` bytes at `offset` of the area is about to run in
/// context `ctx`: page-locks the staging through it if the copy lies in
/// the staging and is large, unless some context holds it.
pub(super) fn before_copy<E: Executor>(s: &mut Session<E>, ctx: u64, offset: u64, len: usize) {
    let Some(d) = &s.on_demand else { return };
    let in_staging = offset.checked_add(len as u64).is_some_and(|end| end <= d.staging);
    if in_staging && len >= STAGE_MIN {
        super::pinning::pin(s, ctx, staging_pin);
    }
}

#[cfg(test)]
mod tests {
    use super::super::device;
    use super::*;
    use crate::config::SessionLimits;
    use crate::exec::host::HostExecutor;
    use pvgpu_ring::region::SharedRegion;
    use std::sync::Arc;

    const AREA: usize = 8 << 20;
    const STAGING: u64 = 2 << 20;

    struct Fixture {
        exec: Arc<HostExecutor>,
        area: DataArea,
        out: Vec<u8>,
    }

    impl Fixture {
        fn new() -> (Fixture, Session<HostExecutor>) {
            let exec = Arc::new(HostExecutor::new(64 << 20));
            let area = SharedRegion::heap(AREA).area(0, AREA).unwrap();
            let mut f = Fixture { exec: exec.clone(), area, out: Vec::new() };
            let mut s = Session::new(exec, 1, SessionLimits::default());
            device::init(&mut s, proto::Init {}, &mut f.io()).unwrap();
            (f, s)
        }

        fn io(&mut self) -> Io<'_> {
            Io { area: Some(&self.area), out: &mut self.out, reply_room: None, staged: 0 }
        }

        fn ctx(&mut self, s: &mut Session<HostExecutor>) -> u64 {
            let r = proto::CtxCreate { device: 0.into(), flags: 0.into() };
            device::ctx_create(s, r, &mut self.io()).unwrap().handle.get()
        }

        fn device_address(&mut self, s: &mut Session<HostExecutor>) -> u64 {
            device::data_area_device(s, proto::DataAreaDevice {}, &mut self.io()).unwrap().value.get()
        }
    }

    #[test]
    fn each_part_of_the_area_is_page_locked_when_first_needed() {
        let (mut f, mut s) = Fixture::new();
        let ask = |s: &mut Session<HostExecutor>, f: &mut Fixture| {
            area_pin_on_demand(s, proto::AreaPinOnDemand { staging: STAGING.into() }, &mut f.io())
        };
        ask(&mut s, &mut f).unwrap();
        assert!(ask(&mut s, &mut f).is_err(), "the layout is told once");
        let a = f.ctx(&mut s);
        assert_eq!((s.area_pinned_by, f.exec.pinned_ranges()), (None, 0), "nothing with the first context");
        let area = f.area.clone();
        before_copy(&mut s, a, 0, STAGE_MIN - 1);
        before_copy(&mut s, a, STAGING - 4096, STAGE_MIN);
        assert_eq!(f.exec.pinned_ranges(), 0, "a small copy, or one past the staging, leaves it alone");
        before_copy(&mut s, a, 4096, STAGE_MIN);
        assert_eq!(f.exec.pinned_ranges(), 1, "the staging, at the first large copy through it");
        let pool = area.base() as u64 + STAGING;
        assert!(s.allocs.range(pool..).next().is_none(), "the pool is not mapped before it is asked for");
        assert_eq!(f.device_address(&mut s), area.base() as u64, "the pool mapped where the area's start would be");
        assert_eq!((s.area_pinned_by, s.allocs.get(&pool).map(|a| a.len)), (Some(a), Some((AREA as u64) - STAGING)));
        let mut io = f.io();
        device::ctx_destroy(&mut s, proto::CtxDestroy { ctx: a.into() }, &mut io).unwrap();
        assert_eq!((s.area_pinned_by, f.exec.pinned_ranges()), (None, 0), "both undone with their context");
        let b = f.ctx(&mut s);
        assert_eq!(s.area_pinned_by, Some(b), "the wanted pool comes back with the next context");
        before_copy(&mut s, b, 0, STAGE_MIN);
        assert_eq!(f.exec.pinned_ranges(), 1);
        drop(s);
        assert_eq!(f.exec.pinned_ranges(), 0, "undone before the session's contexts go");
    }

    #[test]
    fn a_restored_session_page_locks_its_new_area_when_asked() {
        for wanted in [false, true] {
            let (mut f, mut s) = Fixture::new();
            area_pin_on_demand(&mut s, proto::AreaPinOnDemand { staging: STAGING.into() }, &mut f.io()).unwrap();
            let a = f.ctx(&mut s);
            if wanted {
                f.device_address(&mut s);
            }
            let rec = describe(&s).unwrap();
            assert_eq!((rec.staging, rec.pool_wanted), (STAGING, wanted));
            device::ctx_destroy(&mut s, proto::CtxDestroy { ctx: a.into() }, &mut f.io()).unwrap();
            drop(s);

            // The session rebuilt: its first context page-locks neither
            // the pool nor the staging; the pool comes when the program asks
            // for the area's device address again, as its library does at
            // its first page-locked allocation on the new connection.
            let (mut f, mut s) = Fixture::new();
            restore(&mut s, Some(&rec), Some(&f.area)).unwrap();
            let b = f.ctx(&mut s);
            assert_eq!((s.area_pinned_by, f.exec.pinned_ranges()), (None, 0));
            assert_eq!(f.device_address(&mut s), f.area.base() as u64);
            assert_eq!(s.area_pinned_by, Some(b), "the pool, once asked for");
            let before = f.exec.pinned_ranges();
            before_copy(&mut s, b, 0, STAGE_MIN);
            assert_eq!(f.exec.pinned_ranges(), before + 1, "the staging at its first large copy");
        }
        let (f, mut s) = Fixture::new();
        let bad = pvgpu_ctl::snapshot::AreaRec { staging: AREA as u64 + 4096, pool_wanted: false };
        assert!(restore(&mut s, Some(&bad), Some(&f.area)).is_err(), "staging past the area");
        let odd = pvgpu_ctl::snapshot::AreaRec { staging: 100, pool_wanted: false };
        assert!(restore(&mut s, Some(&odd), Some(&f.area)).is_err(), "staging not in whole pages");
    }

    #[test]
    fn a_frontend_that_does_not_ask_gets_the_whole_area_with_the_first_context() {
        let (mut f, mut s) = Fixture::new();
        let a = f.ctx(&mut s);
        assert_eq!(s.area_pinned_by, Some(a));
        assert_eq!(f.device_address(&mut s), f.area.base() as u64);
        let base = f.area.base() as u64;
        assert_eq!(s.allocs.get(&base).map(|a| a.len), Some(AREA as u64));
        let mut io = f.io();
        assert!(area_pin_on_demand(&mut s, proto::AreaPinOnDemand { staging: STAGING.into() }, &mut io).is_ok());
        assert!(s.on_demand.is_none(), "too late: the area is page-locked already");
    }
}
