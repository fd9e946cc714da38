//! Device memory handed from one backend process to another on the same
//! GPU without a copy (a migration on one host): the leaving session's
//! allocations stay where they are on the device, exported as the
//! driver's descriptors ([`crate::exec::ExecContext::hand_over`]), which
//! travel beside the snapshot from supervisor to supervisor and reach the
//! restoring worker with it; the snapshot names the memory
//! ([`snapshot::Handed`]) and leaves its bytes out.
//!
//! A snapshot whose memory was handed over restores only with its
//! descriptors, on the GPU it was taken on (its UUID), and every piece must
//! hold an allocation of it; anything else fails the restore by name.

use super::restore::RestoreError;
use super::{AllocKind, Session};
use crate::exec::{DeviceInfo, ExecContext, Executor, HandedPiece};
use pvgpu_ctl::snapshot::{self, Meta};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

/// Memory a checkpoint hands over in place: the snapshot's records and
/// the descriptors, in one order.
#[derive(Default)]
pub(super) struct HandOver {
    pub(super) records: Vec<snapshot::Handed>,
    pub(super) fds: Vec<std::os::fd::OwnedFd>,
}

/// Memory handed over, by context and address: an allocation's piece is
/// looked up, not searched for among all of them.
pub(super) struct Spans(BTreeMap<(u64, u64), u64>);

impl Spans {
    pub(super) fn of(records: &[snapshot::Handed]) -> Spans {
        Spans(records.iter().map(|r| ((r.ctx, r.address), r.length)).collect())
    }

    /// Whether `[addr, addr+len)` of context `ctx` lies in one piece (the
    /// last that starts at or below `addr`: pieces are mappings, apart).
    pub(super) fn covers(&self, ctx: u64, addr: u64, len: u64) -> bool {
        let Some((&(c, start), &length)) = self.0.range(..=(ctx, addr)).next_back() else { return false };
        c == ctx && addr.checked_add(len).is_some_and(|end| end <= start.saturating_add(length))
    }
}

impl<E: Executor> Session<E> {
    /// Every context's allocations as the driver's descriptors of the
    /// memory that holds them; nothing (the memory is copied) where a
    /// context's executor cannot.
    pub(super) fn hand_over(&mut self) -> HandOver {
        let mut out = HandOver::default();
        let ids: Vec<u64> = self.ctxs.iter().map(|(id, _)| id).collect();
        for ctx in ids {
            let ranges: Vec<(u64, u64)> = self
                .allocs
                .iter()
                .filter(|(_, a)| a.ctx == ctx && matches!(a.kind, AllocKind::Memory | AllocKind::Pooled(_)))
                .map(|(&addr, a)| (addr, a.len))
                .collect();
            if ranges.is_empty() {
                continue;
            }
            match self.enter(ctx).and_then(|c| c.hand_over(&ranges)) {
                Ok(pieces) if out.fds.len() + pieces.len() <= crate::checkpoints::MAX_HANDED => {
                    for p in pieces {
                        out.records.push(snapshot::Handed { ctx, address: p.address, length: p.length });
                        out.fds.push(p.fd);
                    }
                }
                other => {
                    let why = other.err().map_or_else(|| "too many pieces".to_string(), |e| format!("{e:?}"));
                    tracing::info!(session = self.id, why, "device memory cannot be handed over in place; it is copied");
                    return HandOver::default();
                }
            }
        }
        out
    }
}

/// The descriptors `fds` that came with `meta`'s snapshot, by context, as
/// its memory handed over in place names them; checked against the
/// snapshot and this backend's GPUs (`devices`).
pub(super) fn pieces(meta: &Meta, devices: &[DeviceInfo], fds: Vec<OwnedFd>) -> Result<BTreeMap<u64, Vec<HandedPiece>>, RestoreError> {
    let state = &meta.state;
    let bad = |why: String| RestoreError::Handed(why);
    if fds.len() != state.handed.len() {
        return Err(bad(format!(
            "it names {} pieces of device memory handed over in place and {} came with it",
            state.handed.len(),
            fds.len()
        )));
    }
    let spans = Spans::of(&state.handed);
    for a in state.allocations.iter().filter(|a| a.handed) {
        if !spans.covers(a.ctx, a.address, a.length) {
            return Err(bad(format!("allocation {:#x} lies in no memory handed over", a.address)));
        }
    }
    let mut out: BTreeMap<u64, Vec<HandedPiece>> = BTreeMap::new();
    for (r, fd) in state.handed.iter().zip(fds) {
        let device = state.contexts.iter().find(|c| c.id == r.ctx).map(|c| c.device);
        let Some(device) = device else { return Err(bad(format!("memory of context {:#x}, which the snapshot does not name", r.ctx))) };
        let was = meta.devices.iter().find(|d| d.ordinal == device).and_then(|d| d.uuid.clone());
        let here = devices.get(device).map(|d| snapshot::hex(&d.uuid));
        if was.is_none() || was != here {
            return Err(bad(format!(
                "its memory is on GPU {}, and this backend's device {device} is GPU {}; restore it on the same GPU",
                was.as_deref().unwrap_or("unknown"),
                here.as_deref().unwrap_or("missing")
            )));
        }
        out.entry(r.ctx).or_default().push(HandedPiece { address: r.address, length: r.length, fd });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_lies_in_the_piece_of_its_own_context_that_holds_it_whole() {
        let h = |ctx, address, length| snapshot::Handed { ctx, address, length };
        let spans = Spans::of(&[h(1, 0x1000, 0x1000), h(1, 0x4000, 0x2000), h(2, 0x2000, 0x1000)]);
        assert!(spans.covers(1, 0x1000, 0x1000));
        assert!(spans.covers(1, 0x4800, 0x100));
        assert!(!spans.covers(1, 0x1800, 0x1000), "past its piece's end");
        assert!(!spans.covers(1, 0x2000, 0x10), "between pieces");
        assert!(!spans.covers(2, 0x1000, 0x10), "another context's place");
        assert!(!spans.covers(1, 0x800, 0x10), "below every piece");
        assert!(!spans.covers(1, u64::MAX - 4, 0x10), "an end past the address space");
    }
}
