//! A session's state written to a snapshot ([`pvgpu_ctl::snapshot`]), at a
//! command boundary: every context synchronised, then contexts, modules
//! (images, looked-up functions and globals with their bytes), device
//! memory with its bytes, streams and events, with the handles the guest
//! holds.
//!
//! What a checkpoint does not cover yet is refused by name before
//! anything is read, and the session goes on as if nothing had been asked:
//! graphs, mirrored or mapped host memory, virtual memory management,
//! arrays and textures, interprocess handles, linked images not yet read.

use super::{AllocKind, Session};
use crate::exec::{ExecContext, Executor};
use pvgpu_ctl::snapshot::{self, Allocation, Context, Device, Function, Global, Meta, Module, Queue, SnapshotError, State};
use pvgpu_ring::CuError;
use std::io::Write;
use std::sync::Arc;

/// Why a session could not be checkpointed (it goes on running).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// It holds something a checkpoint does not cover yet.
    #[error("the session holds {0}, which checkpoints do not cover yet; it goes on running")]
    Unsupported(&'static str),
    /// The session has no resume token.
    #[error("the session has no resume token (the kernel gave no random bytes); it goes on running")]
    NoToken,
    /// The device failed while its state was read.
    #[error("the device failed while the session's state was read ({0}); it goes on running")]
    Device(CuError),
    /// The file could not be written.
    #[error(transparent)]
    File(#[from] SnapshotError),
}

/// Where a blob's bytes come from.
enum Source {
    Image(Arc<[u8]>),
    Device { ctx: u64, addr: u64, len: u64 },
}

/// The state and the blobs it names, in order.
struct Plan {
    state: State,
    sources: Vec<Source>,
    bytes: u64,
}

impl Plan {
    fn blob(&mut self, s: Source) -> u32 {
        if let Source::Device { len, .. } = &s {
            self.bytes += len;
        }
        self.sources.push(s);
        (self.sources.len() - 1) as u32
    }
}

impl<E: Executor> Session<E> {
    /// Writes the session's state to `out` as a snapshot for `peer`;
    /// returns the bytes of device state written.
    pub fn checkpoint(&mut self, out: impl Write, peer: &str) -> Result<u64, CheckpointError> {
        if self.token == [0; 16] {
            return Err(CheckpointError::NoToken);
        }
        self.coverable()?;
        let ids: Vec<u64> = self.ctxs.iter().map(|(id, _)| id).collect();
        for id in &ids {
            self.enter(*id).and_then(|c| c.synchronize()).map_err(CheckpointError::Device)?;
        }
        let plan = self.plan();
        let meta = Meta {
            created_unix_seconds: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            session: self.id,
            peer: peer.to_string(),
            token: snapshot::token_hex(&self.token),
            executor: self.exec.kind().to_string(),
            devices: self.devices_used(),
            state_bytes: plan.bytes,
            state: plan.state,
        };
        let mut w = snapshot::Writer::new(out, &meta, plan.sources.len() as u32)?;
        let mut buf = Vec::new();
        for s in &plan.sources {
            match s {
                Source::Image(image) => w.blob(image)?,
                Source::Device { ctx, addr, len } => {
                    self.read_device(*ctx, *addr, *len, &mut buf)?;
                    w.blob(&buf)?;
                }
            }
        }
        w.finish()?;
        Ok(plan.bytes)
    }

    /// Refuses, by name, what a checkpoint does not cover.
    fn coverable(&self) -> Result<(), CheckpointError> {
        let unsupported = [
            (!self.graph.is_empty(), "graphs or executable graphs"),
            (!self.mirrors.is_empty(), "mirrored (mapped page-locked) host memory"),
            (!self.vmm.is_empty(), "virtual memory reservations or physical allocations"),
            (!self.arrays.is_empty(), "CUDA arrays, textures or surfaces"),
            (!self.ipc.is_empty(), "interprocess handles"),
            (!self.links.is_empty(), "linked images not yet read"),
        ];
        if let Some((_, what)) = unsupported.iter().find(|(held, _)| *held) {
            return Err(CheckpointError::Unsupported(what));
        }
        let other = self.allocs.values().find(|a| !matches!(a.kind, AllocKind::Memory | AllocKind::Global(_) | AllocKind::Area));
        if let Some(a) = other {
            return Err(CheckpointError::Unsupported(match a.kind {
                AllocKind::Mirror => "mirrored host memory",
                AllocKind::Mapped => "mapped virtual memory",
                AllocKind::Opened => "another process's memory opened through an interprocess handle",
                _ => "graph memory",
            }));
        }
        Ok(())
    }

    /// The devices the session's contexts are on, as they are.
    fn devices_used(&self) -> Vec<Device> {
        let mut ordinals: Vec<usize> = self.ctxs.iter().map(|(_, c)| c.device).collect();
        ordinals.sort_unstable();
        ordinals.dedup();
        let devices = self.exec.devices();
        ordinals
            .into_iter()
            .filter_map(|o| devices.get(o).map(|d| Device { ordinal: o, name: d.name.clone(), total_memory_bytes: d.total_mem }))
            .collect()
    }

    fn plan(&self) -> Plan {
        let mut p = Plan { state: State::default(), sources: Vec::new(), bytes: 0 };
        p.state.initialized = self.initialized;
        p.state.current = self.current;
        p.state.pending_error = self.pending.map(|e| e.code());
        for (id, c) in self.ctxs.iter() {
            let retains = self.primary.get(&c.device).filter(|(pid, _)| *pid == id).map_or(0, |(_, n)| *n);
            p.state.contexts.push(Context { id, device: c.device, flags: c.flags, primary: c.primary, retains });
        }
        for (id, m) in self.modules.iter() {
            let image = p.blob(Source::Image(m.image.clone()));
            let mut functions: Vec<Function> =
                self.function_ids.iter().filter(|((mid, _), _)| *mid == id).map(|((_, name), fid)| Function { id: *fid, name: name.clone() }).collect();
            functions.sort_by_key(|f| f.id);
            let globals = m
                .globals
                .iter()
                .map(|(name, addr, len)| Global {
                    name: name.clone(),
                    address: *addr,
                    length: *len,
                    blob: p.blob(Source::Device { ctx: m.ctx, addr: *addr, len: *len }),
                })
                .collect();
            p.state.modules.push(Module { id, ctx: m.ctx, image, functions, globals });
        }
        for (&addr, a) in self.allocs.iter().filter(|(_, a)| a.kind == AllocKind::Memory) {
            let blob = p.blob(Source::Device { ctx: a.ctx, addr, len: a.len });
            p.state.allocations.push(Allocation { ctx: a.ctx, address: addr, length: a.len, blob });
        }
        for (id, s) in self.streams.iter() {
            p.state.streams.push(Queue { id, ctx: s.ctx, flags: s.flags, priority: s.priority });
        }
        for (id, e) in self.events.iter() {
            p.state.events.push(Queue { id, ctx: e.ctx, flags: e.flags, priority: 0 });
        }
        p
    }

    /// Reads `len` bytes of device memory at `addr` into `buf`.
    fn read_device(&mut self, ctx: u64, addr: u64, len: u64, buf: &mut Vec<u8>) -> Result<(), CheckpointError> {
        let n = usize::try_from(len).map_err(|_| CheckpointError::Device(CuError::OUT_OF_MEMORY))?;
        buf.clear();
        buf.try_reserve_exact(n).map_err(|_| CheckpointError::Device(CuError::OUT_OF_MEMORY))?;
        buf.resize(n, 0);
        let c = self.enter(ctx).map_err(CheckpointError::Device)?;
        // SAFETY: `buf` holds `n` writable bytes until the copy is done
        // (it waits); the range is one of the session's allocations.
        unsafe { c.dtoh(buf.as_mut_ptr(), addr, n, None, true) }.map_err(CheckpointError::Device)
    }
}
