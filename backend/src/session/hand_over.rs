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

impl HandOver {
    /// Whether `[addr, addr+len)` of context `ctx` lies in memory handed
    /// over.
    pub(super) fn covers(&self, ctx: u64, addr: u64, len: u64) -> bool {
        self.records.iter().any(|r| r.ctx == ctx && addr >= r.address && addr + len <= r.address + r.length)
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
    for a in state.allocations.iter().filter(|a| a.handed) {
        let inside = state
            .handed
            .iter()
            .any(|r| r.ctx == a.ctx && a.address >= r.address && a.address.saturating_add(a.length) <= r.address.saturating_add(r.length));
        if !inside {
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
