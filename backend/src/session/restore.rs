//! A session rebuilt from a snapshot ([`super::checkpoint`]): the same
//! handles as the guest holds them, device memory and module globals at
//! the same addresses with the same bytes, streams, events, graphs,
//! executable graphs, arrays and texture objects made as they were.
//! Anything that cannot be had again as it was (another GPU model, an
//! address taken, a global the driver placed elsewhere, an object the
//! driver numbers otherwise) fails the restore by name; the session is
//! then dropped, which frees what was rebuilt.

use super::chunks::{CHUNK, Chunks};
use super::{Alloc, AllocKind, FnEntry, ModEntry, Owned, Session};
use crate::exec::{ExecContext, Executor};
use pvgpu_ctl::snapshot::{Meta, Reader};
use pvgpu_ring::CuError;
use pvgpu_ring::region::DataArea;
use std::collections::BTreeMap;
use std::io::{Read, Seek};

pub use super::restore_error::RestoreError;

pub(super) fn rebuild(what: impl Into<String>) -> impl FnOnce(CuError) -> RestoreError {
    let what = what.into();
    move |error| RestoreError::Rebuild { what, error }
}

/// Reads blobs in the order the snapshot names them.
pub(super) struct Blobs<'r, R: Read + Seek> {
    pub(super) reader: &'r mut Reader<R>,
    pub(super) next: u32,
    /// The file read, where device memory may be taken from it directly
    /// (a file read without hashing: kept as checked).
    pub(super) file: Option<&'r std::fs::File>,
}

impl<'r, R: Read + Seek> Blobs<'r, R> {
    fn take(&mut self, index: u32) -> Result<Vec<u8>, RestoreError> {
        self.expect(index)?;
        Ok(self.reader.blob()?)
    }

    /// Starts blob `index`, to be read in parts: its length.
    fn start(&mut self, index: u32) -> Result<u64, RestoreError> {
        self.expect(index)?;
        Ok(self.reader.blob_start()?)
    }

    /// Whether blob `index` holds exactly `expected`: compared where it
    /// lies in a file kept as checked (mapped, not read), else read and
    /// compared a part at a time.
    pub(super) fn matches(&mut self, index: u32, expected: &[u8]) -> Result<bool, RestoreError> {
        self.expect(index)?;
        let len = self.reader.blob_start()?;
        if let Some(file) = self.in_place() {
            let at = self.reader.skip_part(len)?;
            return Ok(len == expected.len() as u64 && super::chunks::file_holds(file, at, expected)?);
        }
        let mut part = vec![0u8; (len as usize).min(1 << 20)];
        let (mut off, mut same) = (0u64, len == expected.len() as u64);
        while off < len {
            let n = (len - off).min(part.len() as u64) as usize;
            self.reader.blob_part(&mut part[..n])?;
            same = same && part[..n] == expected[off as usize..off as usize + n];
            off += n as u64;
        }
        Ok(same)
    }

    /// The file the blobs lie in, where parts may be taken from it where
    /// they lie: one kept as checked, read without hashing.
    pub(super) fn in_place(&self) -> Option<&'r std::fs::File> {
        self.file.filter(|_| self.reader.checked_before())
    }

    fn expect(&mut self, index: u32) -> Result<(), RestoreError> {
        if index != self.next {
            return Err(RestoreError::Inconsistent(format!("blob {index} named where blob {} comes", self.next)));
        }
        self.next += 1;
        Ok(())
    }
}

impl<E: Executor> Session<E> {
    /// Rebuilds, in this new session, the state `meta` describes, reading
    /// its blobs from `reader`; `area` is the connection's data area.
    /// `file`, the file `reader` reads where it is one, gives device
    /// memory its bytes straight from it when `reader` does not hash
    /// ([`super::chunks::write_mapped`]). `handed` are the descriptors of
    /// device memory handed over in place, as the snapshot's
    /// `state.handed` names it. Returns what each part of the rebuild
    /// took.
    pub fn restore<R: Read + Seek>(
        &mut self,
        meta: &Meta,
        reader: &mut Reader<R>,
        area: Option<&DataArea>,
        file: Option<&std::fs::File>,
        handed: Vec<std::os::fd::OwnedFd>,
    ) -> Result<Rebuilt, RestoreError> {
        if meta.skeleton {
            return Err(RestoreError::Inconsistent("a skeleton, which prepares a worker, is not a session's snapshot".into()));
        }
        let token = pvgpu_ctl::snapshot::token_from_hex(&meta.token)
            .ok_or_else(|| RestoreError::Inconsistent("a token that is not 32 hex digits".into()))?;
        // A worker prepared from the session's skeleton has made its first
        // part: what is there already is taken as it is.
        let prepared = self.adopt_premade(&token, &meta.state);
        self.begin(meta)?;
        let state = &meta.state;
        let mut blobs = Blobs { reader, next: 0, file };
        let mut lap = Lap(std::time::Instant::now());
        super::area_pin::restore(self, state.area.as_ref(), area)?;
        self.hello = true;
        self.initialized = state.initialized;
        self.make_contexts(&state.contexts)?;
        let made = lap.0.elapsed();
        if let Some(first) = state.contexts.first() {
            super::area_pin::at_new_context(self, first.id, area);
        }
        let contexts = lap.split();
        tracing::debug!(made_secs = made.as_secs_f64(), pinned_secs = (contexts - made).as_secs_f64(), "contexts restored");
        // The session's addresses first, then what the driver places.
        super::vmm::rebuild_reservations(self, &state.reservations)?;
        let handed = super::hand_over::pieces(meta, self.exec.devices(), handed)?;
        self.restore_memory(&state.allocations, handed, &mut blobs)?;
        self.restore_vmm(state, &mut blobs)?;
        let memory = lap.split();
        self.restore_in_order(state, &mut blobs, prepared.map_or(Ahead::No, Ahead::MadeUpTo))?;
        let modules = lap.split();
        self.restore_mirrors(&state.mirrors, &mut blobs)?;
        self.restore_arrays(state, &mut blobs)?;
        super::graph::rebuild(self, &state.graphs, &state.graph_execs)?;
        let parts = Rebuilt { contexts, memory, modules, graphs: lap.split(), prepared: prepared.is_some() };
        tracing::info!(
            session = self.id(),
            contexts_secs = parts.contexts.as_secs_f64(),
            memory_secs = parts.memory.as_secs_f64(),
            modules_secs = parts.modules.as_secs_f64(),
            graphs_secs = parts.graphs.as_secs_f64(),
            prepared = parts.prepared,
            modules = state.modules.len(),
            allocations = state.allocations.len() + state.mappings.len(),
            "session rebuilt from its snapshot"
        );
        if let Some(c) = state.current {
            self.enter(c).map_err(rebuild("the current context"))?;
        }
        self.pending = state.pending_error.and_then(CuError::new);
        self.remeasure();
        if self.over_quota(0) {
            return Err(RestoreError::Quota(self.charged()));
        }
        self.settle();
        Ok(parts)
    }

    /// Modules, streams, events and arrays (empty), made again in the
    /// order they were made: the driver places a module's globals after
    /// what it placed before (a stream takes device memory of its own), so
    /// only that order has them back where the guest knows them (JAX makes
    /// streams between its modules, cuBLAS's among them).
    ///
    /// `ahead`: what a worker made ahead from the session's skeleton
    /// ([`super::premade`]), taken as it is.
    pub(super) fn restore_in_order<R: Read + Seek>(
        &mut self,
        state: &pvgpu_ctl::snapshot::State,
        blobs: &mut Blobs<'_, R>,
        ahead: Ahead,
    ) -> Result<(), RestoreError> {
        enum Made<'s> {
            Module(&'s pvgpu_ctl::snapshot::Module),
            Stream(&'s pvgpu_ctl::snapshot::Queue),
            Event(&'s pvgpu_ctl::snapshot::Queue),
            Array(&'s pvgpu_ctl::snapshot::ArrayRec),
            Pool(&'s pvgpu_ctl::snapshot::PoolRec),
            Limit(u64, &'s pvgpu_ctl::snapshot::LimitRec),
        }
        let mut order: Vec<(u64, Made<'_>)> = state.modules.iter().map(|m| (m.seq, Made::Module(m))).collect();
        order.extend(state.streams.iter().map(|s| (s.seq, Made::Stream(s))));
        order.extend(state.events.iter().map(|e| (e.seq, Made::Event(e))));
        order.extend(state.arrays.iter().map(|a| (a.seq, Made::Array(a))));
        order.extend(state.pools.iter().map(|p| (p.seq, Made::Pool(p))));
        order.extend(state.contexts.iter().flat_map(|c| c.limits.iter().map(|l| (l.seq, Made::Limit(c.id, l)))));
        // Stable: snapshots without the numbers keep modules first.
        order.sort_by_key(|(seq, _)| *seq);
        let last = order.last().map_or(0, |(seq, _)| *seq);
        for (seq, made) in order {
            let had = matches!(ahead, Ahead::MadeUpTo(upto) if seq <= upto)
                && match &made {
                    Made::Module(m) => self.modules.get(m.id).is_some(),
                    Made::Stream(s) => self.streams.get(s.id).is_some(),
                    Made::Event(e) => self.events.get(e.id).is_some(),
                    Made::Array(a) => self.arrays.table.get(a.id).is_some(),
                    Made::Pool(p) => self.pools.get(p.id).is_some(),
                    Made::Limit(ctx, l) => self.ctxs.get(*ctx).is_some_and(|c| c.limits.get(&l.limit) == Some(&(l.value, l.seq))),
                };
            if had {
                if let Made::Module(m) = made {
                    self.restore_module(m, blobs, Loading::Loaded)?;
                }
                continue;
            }
            match made {
                Made::Module(m) if matches!(ahead, Ahead::Skeleton) => self.restore_module(m, blobs, Loading::Only)?,
                Made::Module(m) => self.restore_module(m, blobs, Loading::Whole)?,
                Made::Stream(s) => {
                    let st = self
                        .enter(s.ctx)
                        .and_then(|c| c.stream_create(s.flags, s.priority))
                        .map_err(rebuild(format!("stream {:#x}", s.id)))?;
                    let entry = Owned { ctx: s.ctx, value: st, flags: s.flags, priority: s.priority, seq: s.seq };
                    self.streams.insert_at(s.id, entry).map_err(bad_id("stream", s.id))?;
                }
                Made::Event(e) => {
                    let ev = self.enter(e.ctx).and_then(|c| c.event_create(e.flags)).map_err(rebuild(format!("event {:#x}", e.id)))?;
                    let entry = Owned { ctx: e.ctx, value: ev, flags: e.flags, priority: 0, seq: e.seq };
                    self.events.insert_at(e.id, entry).map_err(bad_id("event", e.id))?;
                }
                Made::Array(a) => super::array_moves::rebuild(self, a)?,
                Made::Pool(p) => {
                    let made = super::pool::PoolMade {
                        max_size: p.max_size,
                        attributes: p.attributes.iter().copied().collect(),
                        access: p.access.iter().copied().collect(),
                        seq: p.seq,
                    };
                    super::pool::remake(self, p.id, p.ctx, made).map_err(rebuild(format!("memory pool {:#x}", p.id)))?;
                }
                Made::Limit(ctx, l) => {
                    let what = format!("limit {} of context {ctx:#x}", l.limit);
                    super::device::restore_limit(self, ctx, l.limit, l.value, l.seq).map_err(rebuild(what))?;
                }
            }
        }
        self.adopt_pooled(&state.allocations)?;
        // A skeleton's globals have no bytes: those of its snapshot come.
        if !matches!(ahead, Ahead::Skeleton) {
            self.restore_unlooked(&state.modules, |blob| blobs.take(blob))?;
        }
        self.made = last;
        Ok(())
    }

    /// Allocations from pools of the program's own, restored as memory,
    /// counted as their pools' again.
    fn adopt_pooled(&mut self, allocations: &[pvgpu_ctl::snapshot::Allocation]) -> Result<(), RestoreError> {
        for a in allocations {
            let Some(pool) = a.pool else { continue };
            let raw = match self.pools.get(pool) {
                Some(p) if p.ctx == a.ctx => p.raw,
                _ => {
                    return Err(RestoreError::Inconsistent(format!(
                        "allocation {:#x} of pool {pool:#x}, which is not its context's",
                        a.address
                    )));
                }
            };
            let adopt = crate::exec::pool::PoolOp::Adopt { pool: raw, dptr: a.address, size: a.length };
            self.enter(a.ctx).and_then(|c| c.pool(adopt)).map_err(rebuild(format!("allocation {:#x} of pool {pool:#x}", a.address)))?;
            if let Some(m) = self.allocs.get_mut(&a.address) {
                m.kind = AllocKind::Pooled(pool);
            }
        }
        Ok(())
    }

    /// Mirrored host memory at its addresses, with its bytes.
    fn restore_mirrors<R: Read + Seek>(
        &mut self,
        mirrors: &[pvgpu_ctl::snapshot::MirrorRec],
        blobs: &mut Blobs<'_, R>,
    ) -> Result<(), RestoreError> {
        for m in mirrors {
            let now = blobs.take(m.blob)?;
            let known = m.known.map(|k| blobs.take(k)).transpose()?;
            super::mirror::restore(self, m, &now, known.as_deref())?;
        }
        Ok(())
    }

    /// Arrays' elements, then texture and surface objects with their
    /// values.
    fn restore_arrays<R: Read + Seek>(&mut self, state: &pvgpu_ctl::snapshot::State, blobs: &mut Blobs<'_, R>) -> Result<(), RestoreError> {
        for a in &state.arrays {
            for (level, &blob) in (0u32..).zip(&a.blobs) {
                let mut bytes = blobs.take(blob)?;
                super::array_moves::write(self, a, level, &mut bytes)?;
            }
        }
        super::array_moves::rebuild_objects(self, &state.tex_objects)
    }

    pub(super) fn check_devices(&self, meta: &Meta) -> Result<(), RestoreError> {
        if meta.executor != self.exec.kind() {
            return Err(RestoreError::Executor { want: meta.executor.clone(), have: self.exec.kind().into() });
        }
        let here = self.exec.devices();
        for d in &meta.devices {
            let have = here.get(d.ordinal);
            if have.is_none_or(|h| h.name != d.name || h.total_mem != d.total_memory_bytes) {
                let have = have.map_or("missing".into(), |h| format!("{} with {} bytes", h.name, h.total_mem));
                return Err(RestoreError::Device {
                    ordinal: d.ordinal,
                    want: format!("{} with {} bytes", d.name, d.total_memory_bytes),
                    have,
                });
            }
        }
        // The guest's device handles are ordinals into the list of devices
        // it saw: that list must be the same here (a tenant's GPUs changed,
        // or one was drained, since the checkpoint).
        let saw = meta.gpus.clone().unwrap_or_else(|| (0..here.len()).collect());
        if saw != self.gpus {
            return Err(RestoreError::Gpus { want: saw, have: self.gpus.clone() });
        }
        for c in &meta.state.contexts {
            if !meta.devices.iter().any(|d| d.ordinal == c.device) {
                return Err(RestoreError::Inconsistent(format!(
                    "context {:#x} on device {}, which the snapshot does not describe",
                    c.id, c.device
                )));
            }
        }
        Ok(())
    }

    /// Loads module `m` and looks up what the program had of it, as
    /// `loading` says.
    fn restore_module<R: Read + Seek>(
        &mut self,
        m: &pvgpu_ctl::snapshot::Module,
        blobs: &mut Blobs<'_, R>,
        loading: Loading,
    ) -> Result<(), RestoreError> {
        if loading == Loading::Loaded {
            let loaded = self.modules.get(m.id).filter(|e| e.ctx == m.ctx).map(|e| e.image.clone());
            if !loaded.map_or(Ok(false), |image| blobs.matches(m.image, &image))? {
                return Err(RestoreError::Inconsistent(format!("module {:#x} is not the one its skeleton loaded", m.id)));
            }
            return self.module_lookups(m, blobs);
        }
        let image = blobs.take(m.image)?;
        if image.len() > self.limits.max_image + 1 || image.last() != Some(&0) {
            return Err(RestoreError::Inconsistent(format!("module {:#x}: an image the backend would not load", m.id)));
        }
        crate::exec::image::check_bounds(&image[..image.len() - 1]).map_err(rebuild(format!("module {:#x}", m.id)))?;
        // Where every global the snapshot names was (an executor that
        // places them itself puts them there; the driver does as it did).
        let placed: Vec<(String, u64)> = m.globals.iter().chain(&m.unlooked).map(|g| (g.name.clone(), g.address)).collect();
        let module =
            self.enter(m.ctx).and_then(|c| c.module_load_placed(&image, &placed)).map_err(rebuild(format!("module {:#x}", m.id)))?;
        let globals = m.globals.iter().map(|g| (g.name.clone(), g.address, g.length)).collect();
        // The variables a later checkpoint looks at: those the snapshot
        // named (any other the driver did not know at the checkpoint).
        let writable = Some(m.globals.iter().chain(&m.unlooked).map(|g| g.name.clone()).collect());
        let entry = ModEntry { ctx: m.ctx, module: Some(module), image: image.into(), globals, writable, seq: m.seq };
        self.modules.insert_at(m.id, entry).map_err(bad_id("module", m.id))?;
        if loading == Loading::Only {
            return Ok(());
        }
        self.module_lookups(m, blobs)
    }

    /// What the program looked up in module `m`, loaded: its functions
    /// with their attributes, and its globals with their bytes.
    fn module_lookups<R: Read + Seek>(&mut self, m: &pvgpu_ctl::snapshot::Module, blobs: &mut Blobs<'_, R>) -> Result<(), RestoreError> {
        if let Some(e) = self.modules.get_mut(m.id) {
            // The snapshot's names (a skeleton names none).
            e.globals = m.globals.iter().map(|g| (g.name.clone(), g.address, g.length)).collect();
            e.writable = Some(m.globals.iter().chain(&m.unlooked).map(|g| g.name.clone()).collect());
        }
        for f in &m.functions {
            let mentry =
                self.modules.get(m.id).and_then(|e| e.module.as_ref()).ok_or_else(|| RestoreError::Inconsistent("module gone".into()))?;
            let c = self.ctxs.get_mut(m.ctx).ok_or_else(|| RestoreError::Inconsistent(format!("module {:#x} in no context", m.id)))?;
            let (func, layout) = c.ctx.function(mentry, &f.name).map_err(rebuild(format!("function {}", f.name)))?;
            let param_bytes = layout.iter().map(|p| p.offset as usize + p.size as usize).max().unwrap_or(0);
            let fe = FnEntry { ctx: m.ctx, module: m.id, func, layout: layout.into(), param_bytes, attributes: Default::default() };
            self.functions.insert_at(f.id, fe).map_err(bad_id("function", f.id))?;
            // As the guest set them, checked as its commands are.
            for &(attr, value) in &f.attributes {
                let r = pvgpu_ring::proto::FuncSetAttribute { function: f.id.into(), attr: attr.into(), value: value.into() };
                let what = format!("attribute {attr} of function {}", f.name);
                super::launch::func_set_attribute(self, r, &mut super::Io::internal(&mut Vec::new())).map_err(rebuild(what))?;
            }
            self.function_ids.insert((m.id, f.name.clone()), f.id);
        }
        for g in &m.globals {
            let bytes = blobs.take(g.blob)?;
            self.put_global(m.id, m.ctx, g, &bytes)?;
            self.allocs.insert(g.address, Alloc { len: g.length, ctx: m.ctx, kind: AllocKind::Global(m.id) });
        }
        Ok(())
    }

    fn restore_memory<R: Read + Seek>(
        &mut self,
        allocations: &[pvgpu_ctl::snapshot::Allocation],
        mut handed: BTreeMap<u64, Vec<crate::exec::HandedPiece>>,
        blobs: &mut Blobs<'_, R>,
    ) -> Result<(), RestoreError> {
        let mut by_ctx: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        for a in allocations {
            by_ctx.entry(a.ctx).or_default().push((a.address, a.length));
        }
        if let Some(ctx) = handed.keys().find(|c| !by_ctx.contains_key(c)) {
            return Err(RestoreError::Inconsistent(format!("memory handed over in place in context {ctx:#x}, which holds no allocation")));
        }
        for (ctx, ranges) in &by_ctx {
            let pieces = handed.remove(ctx).unwrap_or_default();
            let c = self.enter(*ctx).map_err(rebuild(format!("context {ctx:#x}")))?;
            if let Err(error) = c.restore_memory(ranges, pieces) {
                let (address, _) = ranges.first().copied().unwrap_or_default();
                return Err(RestoreError::Address {
                    what: format!("device memory of context {ctx:#x} ({} allocations)", ranges.len()),
                    address,
                    error,
                });
            }
            for &(addr, len) in ranges {
                self.allocs.insert(addr, Alloc { len, ctx: *ctx, kind: AllocKind::Memory });
                self.mem_used += len;
            }
        }
        // Each allocation's bytes go from the file to the device through
        // one page-locked chunk, a chunk at a time.
        let mut chunks = Chunks::default();
        let mut buf = None;
        let r = self.write_allocations(allocations, blobs, &mut chunks, &mut buf);
        chunks.unpin(self);
        drop(buf);
        r
    }

    /// Physical memory and mappings as they were, then each mapping's
    /// bytes.
    fn restore_vmm<R: Read + Seek>(&mut self, state: &pvgpu_ctl::snapshot::State, blobs: &mut Blobs<'_, R>) -> Result<(), RestoreError> {
        if state.physical.is_empty() && state.mappings.is_empty() {
            return Ok(());
        }
        super::vmm::rebuild_mappings(self, &state.physical, &state.mappings)?;
        let ranges: Vec<pvgpu_ctl::snapshot::Allocation> = state
            .mappings
            .iter()
            .map(|m| pvgpu_ctl::snapshot::Allocation {
                ctx: m.ctx,
                address: m.address,
                length: m.length,
                blob: m.blob,
                pool: None,
                handed: false,
            })
            .collect();
        let mut chunks = Chunks::default();
        let mut buf = None;
        let r = self.write_allocations(&ranges, blobs, &mut chunks, &mut buf);
        chunks.unpin(self);
        r
    }

    fn write_allocations<R: Read + Seek>(
        &mut self,
        allocations: &[pvgpu_ctl::snapshot::Allocation],
        blobs: &mut Blobs<'_, R>,
        chunks: &mut Chunks,
        buf: &mut Option<memmap2::MmapMut>,
    ) -> Result<(), RestoreError> {
        for a in allocations {
            let len = blobs.start(a.blob)?;
            if a.handed && len == 0 {
                // Its bytes stayed in the memory handed over.
                continue;
            }
            if len != a.length {
                return Err(RestoreError::Inconsistent(format!("allocation {:#x}: {len} bytes for {}", a.address, a.length)));
            }
            if let Some(file) = blobs.in_place() {
                let at = blobs.reader.skip_part(len)?;
                super::chunks::write_mapped(self, file, at, (a.ctx, a.address, len))?;
                continue;
            }
            let mut off = 0;
            while off < len {
                let n = (len - off).min(CHUNK as u64) as usize;
                let b = match buf {
                    Some(b) => b,
                    None => buf.insert(chunks.make().map_err(|e| RestoreError::File(e.into()))?),
                };
                chunks.pin(self, a.ctx, b).map_err(rebuild(format!("context {:#x}", a.ctx)))?;
                blobs.reader.blob_part(&mut b[..n])?;
                self.write_device(a.ctx, a.address + off, &b[..n], "device memory")?;
                off += n as u64;
            }
        }
        Ok(())
    }

    pub(super) fn write_device(&mut self, ctx: u64, addr: u64, bytes: &[u8], what: &str) -> Result<(), RestoreError> {
        let c = self.enter(ctx).map_err(rebuild(format!("context {ctx:#x}")))?;
        // SAFETY: `bytes` is readable for its length and the copy waits; the
        // range was just made at this address for these bytes.
        unsafe { c.htod(addr, bytes.as_ptr(), bytes.len(), None, true) }.map_err(rebuild(format!("{what} at {addr:#x}")))
    }
}

/// What each part of a rebuild took: the contexts; the device memory and
/// virtual memory, mapped and written; modules, streams, events and arrays
/// in their order; mirrors, arrays' elements and graphs.
#[derive(Debug, Clone, Copy)]
pub struct Rebuilt {
    /// Making the contexts.
    pub contexts: std::time::Duration,
    /// Mapping and writing device and virtual memory.
    pub memory: std::time::Duration,
    /// Modules, streams, events, arrays, pools and limits in their order.
    pub modules: std::time::Duration,
    /// Mirrors, arrays' elements, texture objects and graphs.
    pub graphs: std::time::Duration,
    /// Whether a worker prepared from the session's skeleton had made the
    /// first part ([`super::premade`]).
    pub prepared: bool,
}

/// What a worker made ahead of a restore ([`super::premade`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Ahead {
    /// Nothing: a restore from nothing.
    No,
    /// It is making a skeleton: modules loaded, nothing looked up in them.
    Skeleton,
    /// A restore into what a skeleton made, up to this count.
    MadeUpTo(u64),
}

/// How a module is restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loading {
    /// Loaded, and what the program looked up in it looked up again.
    Whole,
    /// Loaded only (a skeleton's: its globals placed, their bytes not there).
    Only,
    /// Loaded ahead from the skeleton: looked up only.
    Loaded,
}

/// Time since the last look.
struct Lap(std::time::Instant);

impl Lap {
    /// Time since the last call (or since it was made).
    fn split(&mut self) -> std::time::Duration {
        let now = std::time::Instant::now();
        let took = now - self.0;
        self.0 = now;
        took
    }
}

pub(super) fn bad_id(what: &'static str, id: u64) -> impl FnOnce(CuError) -> RestoreError {
    move |_| RestoreError::Inconsistent(format!("{what} handle {id:#x} is not one a backend hands out, or comes twice"))
}
