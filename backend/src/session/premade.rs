//! A session's first part made before its migration's pause: the source
//! writes the session's skeleton while it runs ([`Session::skeleton`]:
//! contexts, address reservations, module images, streams, events, arrays,
//! pools and limits in the order they were made, no device bytes), and a
//! worker of the target makes all of it ahead ([`prepare`]): the contexts,
//! and every module loaded, which is most of a rebuild (on the H200, a
//! context 0.1-0.3 s, PyTorch's modules 0.2-0.7 s).
//!
//! The session's snapshot, taken at the pause, is then rebuilt in that
//! worker ([`Session::restore`]): what the skeleton made is taken as it is,
//! the rest (device memory, globals, new objects after the skeleton's,
//! graphs) made as in any restore. Only a snapshot that goes on from its
//! skeleton ([`pvgpu_ctl::snapshot::skeleton::continues`]), whose every
//! module global lies where the worker's driver placed it, and that comes
//! over the ring (over a stream connection the driver placed the source's
//! modules after the connection's page-locked staging, which the worker
//! cannot follow) is rebuilt so; for any other, or another session's, the
//! worker drops what it made first and rebuilds from nothing (on the
//! H200, a session rebuilt so in a worker that had made and dropped a
//! skeleton's session went on as natively).

use super::checkpoint::{CheckpointError, Taken};
use super::restore::{Ahead, Blobs, RestoreError, bad_id, rebuild};
use super::{CtxEntry, Session};
use crate::config::SessionLimits;
use crate::exec::{ExecContext, Executor};
use pvgpu_ctl::snapshot::{self, Global, Meta, Module, Reader, State};
use std::io::{Read, Seek};
use std::sync::Arc;

/// The blob of a global or an array's level in a skeleton: none (never
/// read).
const NO_BLOB: u32 = u32::MAX;

/// A session made ahead from its skeleton, waiting for its snapshot.
pub struct Premade<E: Executor> {
    /// The session's token: only its own snapshot is rebuilt here.
    token: [u8; 16],
    /// The skeleton it was made from.
    skeleton: State,
    /// What was made.
    session: Session<E>,
}

/// Makes, in a new session of `exec`, what the skeleton `meta` (read by
/// `reader`) describes, as a restore would make it.
pub fn prepare<E: Executor, R: Read + Seek>(
    exec: Arc<E>,
    limits: SessionLimits,
    meta: &Meta,
    reader: &mut Reader<R>,
) -> Result<Premade<E>, RestoreError> {
    if !meta.skeleton {
        return Err(RestoreError::Inconsistent("a session's snapshot, where a skeleton prepares a worker".into()));
    }
    let token =
        snapshot::token_from_hex(&meta.token).ok_or_else(|| RestoreError::Inconsistent("a token that is not 32 hex digits".into()))?;
    let mut s = Session::new(exec, meta.session, limits);
    s.begin(meta)?;
    s.make_contexts(&meta.state.contexts)?;
    super::vmm::rebuild_reservations(&mut s, &meta.state.reservations)?;
    let mut blobs = Blobs { reader, next: 0, file: None };
    s.restore_in_order(&meta.state, &mut blobs, Ahead::Skeleton)?;
    Ok(Premade { token, skeleton: meta.state.clone(), session: s })
}

impl<E: Executor> Session<E> {
    /// Writes the session's skeleton for `peer` into `file`, new and
    /// empty, without waiting for its work: it goes on running.
    pub fn skeleton(&mut self, file: &std::fs::File, peer: &str) -> Result<Taken, CheckpointError> {
        if self.token == [0; 16] {
            return Err(CheckpointError::NoToken);
        }
        // What its snapshot could not hold, refused now.
        self.coverable()?;
        if !self.exec.restores_addresses() {
            return Err(CheckpointError::CannotLeave);
        }
        let mut state = State { contexts: self.describe_contexts(), ..State::default() };
        state.reservations = super::vmm::describe(self).0;
        let unlooked = super::global_moves::look_up(self);
        let mut images = Vec::new();
        let mut modules: Vec<_> = self.modules.iter().collect();
        modules.sort_by_key(|(_, m)| m.seq);
        for (id, m) in modules {
            let image = images.len() as u32;
            images.push(m.image.clone());
            // Where its globals are, for an executor that places them itself
            // (their bytes are not in a skeleton: no blob).
            let placed = |list: &mut dyn Iterator<Item = &(String, u64, u64)>| -> Vec<Global> {
                list.map(|(name, address, length)| Global { name: name.clone(), address: *address, length: *length, blob: NO_BLOB })
                    .collect()
            };
            let (globals, unlooked) = (placed(&mut m.globals.iter()), placed(&mut unlooked.get(&id).into_iter().flatten()));
            let m = Module { id, ctx: m.ctx, image, functions: vec![], globals, unlooked, seq: m.seq };
            state.modules.push(m);
        }
        (state.streams, state.events) = self.describe_queues();
        // Arrays without their elements: each level's blob, none.
        let arrays = super::array_moves::describe(self).into_iter();
        state.arrays = arrays.map(|(a, levels)| snapshot::ArrayRec { blobs: vec![NO_BLOB; levels.len()], ..a }).collect();
        state.pools = super::pool::describe(self);
        let mut meta = self.meta(peer, state, 0);
        meta.skeleton = true;
        let mut w = snapshot::FileWriter::new(file, &meta, images.iter().map(|i| i.len() as u64).collect())?;
        for image in &images {
            w.blob(image)?;
        }
        w.finish()?;
        Ok(Taken { bytes: 0, device_secs: 0.0, handed_bytes: 0, handed: Vec::new() })
    }

    /// Gives this new session `p`, made ahead for its snapshot.
    pub fn set_premade(&mut self, p: Premade<E>) {
        self.premade = Some(Box::new(p));
    }

    /// Drops what was made ahead (the connection is another session's).
    pub fn drop_premade(&mut self) {
        if self.premade.take().is_some() {
            tracing::info!(session = self.id, "a prepared worker serves another session; what it made ahead is dropped");
        }
    }

    /// Takes, for the snapshot of token `token` and state `state`, what was
    /// made ahead from its skeleton: this session becomes that one, with
    /// this one's connection, number and limits. Returns how far the
    /// skeleton made objects, or `None` where nothing was made for it (or
    /// the snapshot does not go on from its skeleton: then it is dropped).
    pub(super) fn adopt_premade(&mut self, token: &[u8; 16], state: &State) -> Option<u64> {
        let p = self.premade.take()?;
        if self.staging.is_some() {
            // Over a stream connection (TCP, TLS, RDMA) the driver placed
            // the session's later modules after the connection's copy
            // staging was page-locked, which a worker made ahead cannot
            // follow (a cuBLAS global 32 MiB off, on the H200).
            tracing::info!(session = self.id, "a session over a stream connection is rebuilt afresh; what was made ahead is dropped");
            return None;
        }
        if p.token != *token {
            tracing::info!(session = self.id, "a prepared worker restores another session; what it made ahead is dropped");
            return None;
        }
        if let Err(why) = snapshot::skeleton::continues(&p.skeleton, state) {
            tracing::info!(session = self.id, why, "the snapshot does not go on from its skeleton; what was made ahead is dropped");
            return None;
        }
        let mut made = p.session;
        if let Some(why) = made.globals_elsewhere(state) {
            tracing::warn!(
                session = self.id,
                why,
                "the worker made ahead placed a module global elsewhere; it is dropped and the session rebuilt afresh"
            );
            return None;
        }
        made.id = self.id;
        made.limits = self.limits.clone();
        made.gpus = std::mem::take(&mut self.gpus);
        made.staging = self.staging.take();
        made.images = self.images.take();
        made.max_reply = self.max_reply;
        made.host_calls = self.host_calls.clone();
        let upto = made.made;
        *self = made;
        Some(upto)
    }

    /// Where a global of a module made ahead is not where the snapshot
    /// says (the driver placed it after something the source's process
    /// made and this one did not): which, and where.
    fn globals_elsewhere(&mut self, state: &State) -> Option<String> {
        for m in &state.modules {
            let Some(e) = self.modules.get(m.id) else { continue };
            let ctx = e.ctx;
            if let Err(e) = self.enter(ctx) {
                return Some(format!("context {ctx:#x}: {e}"));
            }
            for g in m.globals.iter().chain(&m.unlooked) {
                let (Some(module), Some(c)) = (self.modules.get(m.id).and_then(|e| e.module.as_ref()), self.ctxs.get_mut(ctx)) else {
                    return Some(format!("module {:#x} is not loaded", m.id));
                };
                match c.ctx.global(module, &g.name) {
                    Ok((address, length)) if (address, length) == (g.address, g.length) => {}
                    Ok((address, _)) => return Some(format!("{} at {address:#x}, not {:#x}", g.name, g.address)),
                    Err(e) => return Some(format!("{}: {e}", g.name)),
                }
            }
        }
        None
    }

    /// What a restore and a preparation do first: the snapshot's devices
    /// checked, its token and address space taken.
    pub(super) fn begin(&mut self, meta: &Meta) -> Result<(), RestoreError> {
        self.check_devices(meta)?;
        self.token =
            snapshot::token_from_hex(&meta.token).ok_or_else(|| RestoreError::Inconsistent("a token that is not 32 hex digits".into()))?;
        if meta.space >= pvgpu_ring::proto::MAX_SPACES {
            let most = pvgpu_ring::proto::MAX_SPACES - 1;
            return Err(RestoreError::Inconsistent(format!("address space {} (at most {most})", meta.space)));
        }
        self.set_space(meta.space);
        Ok(())
    }

    /// Makes the snapshot's contexts, in order; one made ahead must be as
    /// the snapshot says.
    pub(super) fn make_contexts(&mut self, contexts: &[snapshot::Context]) -> Result<(), RestoreError> {
        for c in contexts {
            if let Some(had) = self.ctxs.get(c.id) {
                if (had.device, had.flags, had.primary) != (c.device, c.flags, c.primary) {
                    return Err(RestoreError::Inconsistent(format!("context {:#x} is not the one its skeleton made", c.id)));
                }
            } else {
                let ctx = self.exec.create_context(c.device, c.flags, self.space).map_err(rebuild(format!("context {:#x}", c.id)))?;
                let entry = CtxEntry { primary: c.primary, device: c.device, flags: c.flags, ctx, limits: Default::default() };
                self.ctxs.insert_at(c.id, entry).map_err(bad_id("context", c.id))?;
            }
            self.current = Some(c.id);
            if c.primary {
                self.primary.insert(c.device, (c.id, c.retains));
            }
            if let Some(l) = &self.limits.peer_ledger {
                l.note_device(c.device);
            }
        }
        Ok(())
    }
}
