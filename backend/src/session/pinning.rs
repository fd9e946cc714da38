//! Host memory of the backend's own, page-locked for copies only (never
//! mapped for the device) through one context of the session at a time:
//! at the first large copy through it (page-locking 16 or 64 MiB takes
//! milliseconds that a program without large copies never pays), undone
//! before that context is destroyed or the session ends, and renewed by
//! the next large copy. Two such ranges: a stream connection's staging
//! ([`crate::staging`]), and the copy staging of the ring's data area
//! ([`super::area_pin`]).

use super::Session;
use crate::exec::{ExecContext, Executor};
use crate::staging::{ReplyRoom, STAGE_MIN, Staging};

/// A range page-locked for copies through one context at a time.
pub(super) struct CopyPin {
    /// Its address in the backend (memory of the connection's, which
    /// outlives the session).
    addr: usize,
    len: usize,
    /// The context it is page-locked through, if any.
    by: Option<u64>,
    /// The driver refused to page-lock it: not tried again (copies work
    /// without, only slower).
    refused: bool,
}

impl CopyPin {
    pub(super) fn new(ptr: *mut u8, len: usize) -> CopyPin {
        CopyPin { addr: ptr as usize, len, by: None, refused: false }
    }
}

/// Where a session keeps one of its copy pins.
pub(super) type Which<E> = fn(&mut Session<E>) -> Option<&mut CopyPin>;

/// The stream connection's staging.
fn stream<E: Executor>(s: &mut Session<E>) -> Option<&mut CopyPin> {
    s.staging.as_mut().map(|p| &mut p.pin)
}

/// Every copy pin a session may hold.
fn every<E: Executor>() -> [Which<E>; 2] {
    [stream, super::area_pin::staging_pin]
}

/// The staging the session's connection reads large requests into.
pub(super) struct Pinned {
    pin: CopyPin,
    pub(super) reply: ReplyRoom,
}

impl<E: Executor> Session<E> {
    /// Tells the session its connection's staging: the session page-locks
    /// it through its contexts and writes copies' reply data into it.
    ///
    /// # Safety
    /// `staging` must outlive the session (the connection owns it and is
    /// dropped after the session).
    pub unsafe fn set_staging(&mut self, staging: &mut Staging) {
        let (ptr, len) = staging.range();
        self.staging = Some(Pinned { pin: CopyPin::new(ptr, len), reply: staging.reply_room() });
    }
}

/// A copy of `len` bytes through the stream staging is about to run in
/// context `id`.
pub(super) fn ensure<E: Executor>(s: &mut Session<E>, id: u64, len: usize) {
    if len >= STAGE_MIN {
        pin(s, id, stream);
    }
}

/// Page-locks the pin `which` names through context `id`, unless some
/// context holds it or the driver refused it before.
pub(super) fn pin<E: Executor>(s: &mut Session<E>, id: u64, which: Which<E>) {
    let Some(p) = which(s) else { return };
    if p.by.is_some() || p.refused {
        return;
    }
    let (ptr, bytes) = (p.addr as *mut u8, p.len);
    let Ok(c) = s.enter(id) else { return };
    // SAFETY: the range is the connection's memory, which outlives the
    // session, so it stays mapped longer than any context of the session.
    let r = unsafe { c.pin_host(ptr, bytes) };
    let session = s.id;
    let Some(p) = which(s) else { return };
    match r {
        Ok(()) => p.by = Some(id),
        Err(e) => {
            p.refused = true;
            tracing::debug!(session, error = %e, "memory not page-locked; copies from it go through the driver's staging");
        }
    }
}

/// Context `id` is about to be destroyed: the registrations made through
/// it are undone (the next large copy renews them through its own context).
pub(super) fn context_going<E: Executor>(s: &mut Session<E>, id: u64) {
    for which in every::<E>() {
        if which(s).is_some_and(|p| p.by == Some(id)) {
            unpin(s, which);
        }
    }
}

/// The session is ending: its contexts go next, the pinned memory later.
pub(super) fn release<E: Executor>(s: &mut Session<E>) {
    for which in every::<E>() {
        unpin(s, which);
    }
}

/// Undoes a registration through the context that made it: it is the
/// process's (PORTABLE), and must not outlive the memory's mapping.
fn unpin<E: Executor>(s: &mut Session<E>, which: Which<E>) {
    let Some(p) = which(s) else { return };
    let (Some(by), ptr) = (p.by.take(), p.addr as *mut u8) else { return };
    let session = s.id;
    if let Ok(c) = s.enter(by) {
        if let Err(e) = c.unpin_host(ptr) {
            tracing::debug!(session, error = %e, "memory was not page-locked any more");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Io, device};
    use super::*;
    use crate::config::SessionLimits;
    use crate::exec::host::HostExecutor;
    use crate::staging::STAGE_MIN;
    use pvgpu_ring::proto;
    use std::sync::Arc;

    fn ctx(s: &mut Session<HostExecutor>, out: &mut Vec<u8>) -> u64 {
        let mut io = Io { area: None, out, reply_room: None, staged: 0 };
        let r = proto::CtxCreate { device: 0.into(), flags: 0.into() };
        device::ctx_create(s, r, &mut io).unwrap().handle.get()
    }

    fn destroy(s: &mut Session<HostExecutor>, id: u64, out: &mut Vec<u8>) {
        let mut io = Io { area: None, out, reply_room: None, staged: 0 };
        device::ctx_destroy(s, proto::CtxDestroy { ctx: id.into() }, &mut io).unwrap();
    }

    fn by(s: &Session<HostExecutor>) -> Option<u64> {
        s.staging.as_ref().and_then(|p| p.pin.by)
    }

    #[test]
    fn the_staging_is_pinned_at_the_first_large_copy_and_never_outlives_its_context() {
        let exec = Arc::new(HostExecutor::new(64 << 20));
        let mut staging = Staging::new().unwrap();
        let mut s = Session::new(exec.clone(), 1, SessionLimits::default());
        let out = &mut Vec::new();
        let mut io = Io { area: None, out, reply_room: None, staged: 0 };
        device::init(&mut s, proto::Init {}, &mut io).unwrap();
        // SAFETY: `staging` outlives `s` (dropped first, below).
        unsafe { s.set_staging(&mut staging) };
        let (a, b) = (ctx(&mut s, out), ctx(&mut s, out));
        ensure(&mut s, a, STAGE_MIN - 1);
        assert_eq!((by(&s), exec.pinned_ranges()), (None, 0), "small copies leave it alone");
        ensure(&mut s, a, STAGE_MIN);
        ensure(&mut s, b, STAGE_MIN);
        assert_eq!((by(&s), exec.pinned_ranges()), (Some(a), 1), "pinned once, through the first context that copied");
        destroy(&mut s, a, out);
        assert_eq!((by(&s), exec.pinned_ranges()), (None, 0), "undone with its context");
        ensure(&mut s, b, STAGE_MIN);
        assert_eq!((by(&s), exec.pinned_ranges()), (Some(b), 1), "renewed through the next");
        drop(s);
        assert_eq!(exec.pinned_ranges(), 0, "undone before the session's contexts go");
        drop(staging);
    }
}
