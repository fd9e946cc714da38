//! A stream connection's staging ([`crate::staging`]), page-locked through
//! one context of the session at a time, at the session's first large copy
//! (page-locking 16 MiB takes a few milliseconds that a program without
//! large copies never pays), and again after that context is destroyed.

use super::Session;
use crate::exec::{ExecContext, Executor};
use crate::staging::{ReplyRoom, Staging};

/// The staging the session's connection reads large requests into.
pub(super) struct Pinned {
    ptr: *mut u8,
    len: usize,
    pub(super) reply: ReplyRoom,
    /// The context it is page-locked through, if any.
    by: Option<u64>,
    /// The driver refused to page-lock it.
    refused: bool,
}

// SAFETY: the pointer names the connection's staging, which the session's
// thread alone uses; the session only hands it to the driver.
unsafe impl Send for Pinned {}

impl<E: Executor> Session<E> {
    /// Tells the session its connection's staging: the session page-locks
    /// it through its contexts and writes copies' reply data into it.
    ///
    /// # Safety
    /// `staging` must outlive the session (the connection owns it and is
    /// dropped after the session).
    pub unsafe fn set_staging(&mut self, staging: &mut Staging) {
        let (ptr, len) = staging.range();
        self.staging = Some(Pinned { ptr, len, reply: staging.reply_room(), by: None, refused: false });
    }
}

/// A copy of `len` bytes through the staging is about to run in context
/// `id`: page-locks the staging through it unless some context does.
pub(super) fn ensure<E: Executor>(s: &mut Session<E>, id: u64, len: usize) {
    if len < crate::staging::STAGE_MIN {
        return;
    }
    let Some(p) = &s.staging else { return };
    if p.by.is_some() || p.refused {
        return;
    }
    let (ptr, bytes) = (p.ptr, p.len);
    let Ok(c) = s.enter(id) else { return };
    // SAFETY: the staging outlives the session (`set_staging`), so it stays
    // mapped longer than any context of the session.
    let r = unsafe { c.pin_host(ptr, bytes) };
    let Some(p) = &mut s.staging else { return };
    match r {
        Ok(()) => p.by = Some(id),
        Err(e) => {
            // Not tried again: copies work without it, only slower.
            p.refused = true;
            tracing::debug!(session = s.id, error = %e, "connection staging not page-locked; copies go through the driver's staging");
        }
    }
}

/// Context `id` is about to be destroyed: the registration made through
/// it is undone (the next large copy renews it through its own context).
pub(super) fn context_going<E: Executor>(s: &mut Session<E>, id: u64) {
    if s.staging.as_ref().is_some_and(|p| p.by == Some(id)) {
        unpin(s);
    }
}

/// Undoes the registration through the context that made it: it is the
/// process's (PORTABLE), and must not outlive the staging's mapping.
fn unpin<E: Executor>(s: &mut Session<E>) {
    let Some(p) = &mut s.staging else { return };
    let (Some(by), ptr) = (p.by.take(), p.ptr) else { return };
    if let Ok(c) = s.enter(by) {
        if let Err(e) = c.unpin_host(ptr) {
            tracing::debug!(session = s.id, error = %e, "connection staging was not page-locked any more");
        }
    }
}

/// The session is ending: its contexts go next, the staging later.
pub(super) fn release<E: Executor>(s: &mut Session<E>) {
    unpin(s);
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
        s.staging.as_ref().and_then(|p| p.by)
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
