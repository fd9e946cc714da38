//! A session's state written to a snapshot ([`pvgpu_ctl::snapshot`]), at a
//! command boundary: every context synchronised, then contexts, device
//! memory with its bytes, modules (images, looked-up functions and globals
//! with their bytes), streams and events, mirrored host memory
//! ([`super::mirror::describe`]), graphs and executable graphs
//! ([`super::graph::describe`]), CUDA arrays with their elements and
//! texture and surface objects ([`super::array_moves`]), with the handles
//! the guest holds. Device memory comes before modules, so that a restore
//! has the session's addresses back before any module is loaded.
//!
//! What a checkpoint does not cover yet is refused by name before
//! anything is read, and the session goes on as if nothing had been asked:
//! interprocess handles, virtual memory [`super::vmm::uncoverable`] names,
//! memory pools made to be shared with other processes, linked images not
//! yet read, texture objects over memory or arrays the program has freed,
//! and the graphs `describe` names (a capture under way, conditional and
//! memory nodes, device launches).

use super::chunks::{CHUNK, Chunks};
use super::hand_over::HandOver;
use super::small_reads::SmallReads;
use super::{AllocKind, Session};
use crate::exec::{ExecContext, Executor};
use pvgpu_ctl::snapshot::{self, Allocation, Context, Device, Function, Global, Meta, Module, Queue, SnapshotError, State};
use pvgpu_ring::CuError;
use std::sync::Arc;

/// Why a session could not be checkpointed (it goes on running).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// It holds something a checkpoint does not cover yet.
    #[error("the session holds {0}, which checkpoints do not cover yet; it goes on running")]
    Unsupported(&'static str),
    /// The session may not leave: the executor cannot give a restored
    /// session its device addresses back.
    #[error(
        "the session's device memory is where the driver's cuMemAlloc put it, addresses another process cannot have back, so it could not be restored elsewhere; it goes on running here (--leave-running writes a snapshot and keeps it running; a backend started with --device-memory placed lets sessions leave)"
    )]
    CannotLeave,
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

/// What a checkpoint wrote.
#[derive(Debug)]
pub struct Taken {
    /// Bytes of device state written.
    pub bytes: u64,
    /// Seconds spent copying them off the device.
    pub device_secs: f64,
    /// Bytes of device memory handed over in place instead.
    pub handed_bytes: u64,
    /// The driver's descriptors of that memory, in the order the
    /// snapshot's [`State::handed`] names it: the snapshot restores only
    /// with them.
    pub handed: Vec<std::os::fd::OwnedFd>,
}

/// Where a blob's bytes come from.
enum Source {
    Image(Arc<[u8]>),
    Device { ctx: u64, addr: u64, len: u64 },
    Array(super::array_moves::LevelBytes),
}

/// The state and the blobs it names, in order.
struct Plan {
    state: State,
    sources: Vec<Source>,
    bytes: u64,
}

impl Source {
    /// Its bytes in the snapshot.
    fn len(&self) -> u64 {
        match self {
            Source::Image(image) => image.len() as u64,
            Source::Device { len, .. } => *len,
            Source::Array(level) => level.len(),
        }
    }
}

impl Plan {
    fn blob(&mut self, s: Source) -> u32 {
        match &s {
            Source::Device { len, .. } => self.bytes += len,
            Source::Array(l) => self.bytes += l.len(),
            Source::Image(_) => {}
        }
        self.sources.push(s);
        (self.sources.len() - 1) as u32
    }
}

impl<E: Executor> Session<E> {
    /// Writes the session's state as a snapshot for `peer` into `file`,
    /// new and empty; returns the bytes of device state written. `leaving`:
    /// the session then leaves this backend, so it must be restorable.
    ///
    /// `hand_over`: a leaving session's device memory (what the program
    /// allocated, not module globals, arrays or virtual memory of its own)
    /// stays on the device, handed to the process that restores it on the
    /// same GPU as the driver's descriptors ([`Taken::handed`]); where the
    /// executor cannot, it is copied as always.
    pub fn checkpoint(&mut self, file: &std::fs::File, peer: &str, leaving: bool, hand_over: bool) -> Result<Taken, CheckpointError> {
        if self.token == [0; 16] {
            return Err(CheckpointError::NoToken);
        }
        self.coverable()?;
        // Before the contexts are synchronised: that would end a capture
        // under way.
        super::graph::coverable(self)?;
        if leaving && !self.exec.restores_addresses() {
            return Err(CheckpointError::CannotLeave);
        }
        let ids: Vec<u64> = self.ctxs.iter().map(|(id, _)| id).collect();
        for id in &ids {
            self.enter(*id).and_then(|c| c.synchronize()).map_err(CheckpointError::Device)?;
        }
        let t = std::time::Instant::now();
        let unlooked = super::global_moves::look_up(self);
        let found: usize = unlooked.values().map(Vec::len).sum();
        tracing::info!(
            session = self.id,
            globals = found,
            secs = t.elapsed().as_secs_f64(),
            "globals the program never looked up, found for the checkpoint"
        );
        let handed = if leaving && hand_over { self.hand_over() } else { HandOver::default() };
        let mut plan = self.plan(&unlooked, &handed);
        (plan.state.graphs, plan.state.graph_execs) = super::graph::describe(self)?;
        let meta = self.meta(peer, plan.state, plan.bytes);
        let lens = plan.sources.iter().map(Source::len).collect();
        let mut w = snapshot::FileWriter::new(file, &meta, lens)?;
        if leaving {
            // This process ends with the session: threads of its own may
            // hash (a worker that goes on must not gain mappings a restore
            // of it would not have; see `Checksum::update_parallel`).
            w = w.hash_on(std::thread::available_parallelism().map_or(4, |n| n.get().min(8)));
        }
        let device_secs = self.write_blobs(&plan.sources, &mut w)?;
        w.finish()?;
        let handed_bytes = handed.records.iter().map(|r| r.length).sum();
        Ok(Taken { bytes: plan.bytes, device_secs, handed_bytes, handed: handed.fds })
    }

    /// Writes every blob's bytes in order, device memory copied through a
    /// few page-locked chunks that [`FileWriter::blob_through`] hashes and
    /// writes on threads of its own while the next is copied; returns the
    /// seconds spent reading the device.
    ///
    /// [`FileWriter::blob_through`]: snapshot::FileWriter::blob_through
    fn write_blobs(&mut self, sources: &[Source], w: &mut snapshot::FileWriter<'_>) -> Result<f64, CheckpointError> {
        let mut staging = Chunks::default();
        let mut chunks = Vec::new();
        // A module global or a small allocation: read with the others of
        // its batch, written here, not worth a thread (PyTorch's
        // checkpoints hold hundreds of globals).
        let mut small = SmallReads::plan(sources.iter().enumerate().filter_map(|(i, s)| match *s {
            Source::Device { ctx, addr, len } if len <= SMALL as u64 => Some((i, ctx, addr, len)),
            _ => None,
        }));
        let started = std::time::Instant::now();
        let (mut through, mut through_bytes) = (std::time::Duration::ZERO, 0u64);
        let r = (|| {
            let mut device = std::time::Duration::ZERO;
            for (i, s) in sources.iter().enumerate() {
                match s {
                    Source::Image(image) => w.blob(image)?,
                    Source::Array(level) => {
                        let t = std::time::Instant::now();
                        let bytes = super::array_moves::read(self, level).map_err(CheckpointError::Device)?;
                        device += t.elapsed();
                        w.blob(&bytes)?;
                    }
                    &Source::Device { len, .. } if len <= SMALL as u64 => {
                        let t = std::time::Instant::now();
                        let bytes = small.bytes(self, &mut staging, i).ok_or(CheckpointError::Device(CuError::UNKNOWN))?;
                        let bytes = bytes.map_err(CheckpointError::Device)?;
                        device += t.elapsed();
                        w.blob(bytes)?;
                    }
                    &Source::Device { ctx, addr, len } => {
                        while chunks.len() < CHUNKS && (chunks.len() as u64) * (CHUNK as u64) < len {
                            chunks.push(staging.make().map_err(|e| CheckpointError::File(e.into()))?);
                        }
                        for c in &mut chunks {
                            staging.pin(self, ctx, c).map_err(CheckpointError::Device)?;
                        }
                        let blob = std::time::Instant::now();
                        w.blob_through(len, &mut chunks, |buf, off| {
                            let t = std::time::Instant::now();
                            let c = self.enter(ctx).map_err(CheckpointError::Device)?;
                            // SAFETY: `buf` is writable for its length, the copy waits,
                            // and the range lies in one of the session's allocations.
                            unsafe { c.dtoh(buf.as_mut_ptr(), addr + off, buf.len(), None, true) }.map_err(CheckpointError::Device)?;
                            device += t.elapsed();
                            Ok::<(), CheckpointError>(())
                        })?;
                        through += blob.elapsed();
                        through_bytes += len;
                    }
                }
            }
            Ok(device.as_secs_f64())
        })();
        staging.unpin(self);
        drop(small);
        tracing::info!(
            session = self.id,
            device_bytes = through_bytes,
            device_memory_secs = through.as_secs_f64(),
            all_secs = started.elapsed().as_secs_f64(),
            chunks = staging.made,
            "snapshot blobs written"
        );
        r
    }

    /// The description of a snapshot of this session for `peer`, of
    /// `state` whose blobs hold `bytes` of device state.
    pub(super) fn meta(&self, peer: &str, state: State, bytes: u64) -> Meta {
        Meta {
            created_unix_seconds: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            session: self.id,
            peer: peer.to_string(),
            token: snapshot::token_hex(&self.token),
            executor: self.exec.kind().to_string(),
            devices: self.devices_used(),
            gpus: Some(self.gpus.clone()),
            space: self.space,
            state_bytes: bytes,
            state,
            skeleton: false,
            held_bytes: self.mem_used,
        }
    }

    /// The session's contexts, as a snapshot names them.
    pub(super) fn describe_contexts(&self) -> Vec<Context> {
        let mut out = Vec::new();
        for (id, c) in self.ctxs.iter() {
            let retains = self.primary.get(&c.device).filter(|(pid, _)| *pid == id).map_or(0, |(_, n)| *n);
            let limits = c.limits.iter().map(|(&limit, &(value, seq))| snapshot::LimitRec { limit, value, seq }).collect();
            out.push(Context { id, device: c.device, flags: c.flags, primary: c.primary, retains, limits });
        }
        out
    }

    /// The session's streams and events.
    pub(super) fn describe_queues(&self) -> (Vec<Queue>, Vec<Queue>) {
        let streams = self.streams.iter().map(|(id, s)| Queue { id, ctx: s.ctx, flags: s.flags, priority: s.priority, seq: s.seq });
        let events = self.events.iter().map(|(id, e)| Queue { id, ctx: e.ctx, flags: e.flags, priority: 0, seq: e.seq });
        (streams.collect(), events.collect())
    }

    /// Refuses, by name, what a checkpoint does not cover.
    pub(super) fn coverable(&self) -> Result<(), CheckpointError> {
        let unsupported = [
            (!self.ipc.is_empty(), "interprocess handles"),
            (self.pools.iter().any(|(_, p)| p.shareable || p.imported), "memory pools shared between processes"),
            (!self.links.is_empty(), "linked images not yet read"),
            (super::array_moves::any_dangling(self), "a texture object over memory or an array the program has freed"),
        ];
        if let Some((_, what)) = unsupported.iter().find(|(held, _)| *held) {
            return Err(CheckpointError::Unsupported(what));
        }
        if let Some(what) = super::vmm::uncoverable(self) {
            return Err(CheckpointError::Unsupported(what));
        }
        let other = self.allocs.values().find(|a| {
            !matches!(
                a.kind,
                AllocKind::Memory | AllocKind::Pooled(_) | AllocKind::Global(_) | AllocKind::Area | AllocKind::Mapped | AllocKind::Mirror
            )
        });
        if let Some(a) = other {
            return Err(CheckpointError::Unsupported(match a.kind {
                AllocKind::Opened => "another process's memory opened through an interprocess handle",
                AllocKind::PoolImported => "another process's memory from a pool it shared (cuMemPoolImportPointer)",
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
            .filter_map(|o| {
                devices.get(o).map(|d| Device {
                    ordinal: o,
                    name: d.name.clone(),
                    total_memory_bytes: d.total_mem,
                    uuid: Some(snapshot::hex(&d.uuid)),
                })
            })
            .collect()
    }

    fn plan(&self, unlooked: &super::global_moves::Unlooked, handed: &HandOver) -> Plan {
        let spans = super::hand_over::Spans::of(&handed.records);
        let mut p = Plan { state: State::default(), sources: Vec::new(), bytes: 0 };
        p.state.initialized = self.initialized;
        p.state.current = self.current;
        p.state.pending_error = self.pending.map(|e| e.code());
        p.state.contexts = self.describe_contexts();
        for (&addr, a) in self.allocs.iter() {
            let pool = match a.kind {
                AllocKind::Memory => None,
                // An allocation outlives its pool: once the pool is
                // destroyed it is memory like any other.
                AllocKind::Pooled(pool) => self.pools.get(pool).map(|_| pool),
                _ => continue,
            };
            let in_place = spans.covers(a.ctx, addr, a.len);
            let bytes = if in_place { Source::Image(Arc::from(&[][..])) } else { Source::Device { ctx: a.ctx, addr, len: a.len } };
            let blob = p.blob(bytes);
            p.state.allocations.push(Allocation { ctx: a.ctx, address: addr, length: a.len, blob, pool, handed: in_place });
        }
        p.state.handed = handed.records.clone();
        p.state.pools = super::pool::describe(self);
        // Virtual memory after allocations: a restore has every address of
        // the session back before it loads a module.
        let (reservations, physical, mappings) = super::vmm::describe(self);
        (p.state.reservations, p.state.physical) = (reservations, physical);
        for mut m in mappings {
            m.blob = p.blob(Source::Device { ctx: m.ctx, addr: m.address, len: m.length });
            p.state.mappings.push(m);
        }
        // Modules in the order they were loaded, as a restore loads them.
        let mut modules: Vec<_> = self.modules.iter().collect();
        modules.sort_by_key(|(_, m)| m.seq);
        for (id, m) in modules {
            let image = p.blob(Source::Image(m.image.clone()));
            let mut functions: Vec<Function> = self
                .function_ids
                .iter()
                .filter(|((mid, _), _)| *mid == id)
                .map(|((_, name), fid)| Function {
                    id: *fid,
                    name: name.clone(),
                    attributes: self.functions.get(*fid).map(|f| f.attributes.iter().map(|(&a, &v)| (a, v)).collect()).unwrap_or_default(),
                })
                .collect();
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
            p.state.modules.push(Module { id, ctx: m.ctx, image, functions, globals, unlooked: Vec::new(), seq: m.seq });
        }
        // Globals never looked up after every module: a restore writes
        // them once all are loaded.
        for i in 0..p.state.modules.len() {
            let (id, ctx) = (p.state.modules[i].id, p.state.modules[i].ctx);
            for (name, addr, len) in unlooked.get(&id).into_iter().flatten() {
                let blob = p.blob(Source::Device { ctx, addr: *addr, len: *len });
                p.state.modules[i].unlooked.push(Global { name: name.clone(), address: *addr, length: *len, blob });
            }
        }
        (p.state.streams, p.state.events) = self.describe_queues();
        // Host memory last: a restore makes it again after the modules,
        // before the graphs whose copies may name it.
        for (mut m, now, known) in super::mirror::describe(self) {
            m.blob = p.blob(Source::Image(now.into()));
            m.known = known.map(|k| p.blob(Source::Image(k.into())));
            p.state.mirrors.push(m);
        }
        // Arrays after mirrors: a restore writes their elements once the
        // rest of the session's memory is in place.
        for (mut a, levels) in super::array_moves::describe(self) {
            a.blobs = levels.into_iter().map(|l| p.blob(Source::Array(l))).collect();
            p.state.arrays.push(a);
        }
        p.state.tex_objects = super::array_moves::describe_objects(self);
        p.state.area = super::area_pin::describe(self);
        p
    }
}

/// Page-locked chunks a checkpoint copies through at most: one filled
/// while the others are hashed and written.
const CHUNKS: usize = 4;
/// Blobs of device memory at most this long are read in batches
/// ([`SmallReads`]) and written on the session's thread.
const SMALL: usize = 1 << 20;
