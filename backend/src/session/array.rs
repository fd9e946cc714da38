//! CUDA arrays, copies with an array side, texture and surface objects.
//!
//! Rules enforced here, on top of the driver's own checks:
//! - an array counts its elements' bytes against the quota from creation
//!   to destruction (a mipmapped array, all its levels);
//! - formats are the plain integer and floating-point ones, flags the
//!   layered, cubemap, surface and gather ones (sparse, deferred-mapping
//!   and compressed arrays are not offered);
//! - a copy names arrays of the session by id, and stays inside them: its
//!   rows inside the array's row, its rows and slices inside its height and
//!   depth; its device side lies inside one of the session's allocations;
//! - a texture or surface object names the session's arrays or memory
//!   (the first byte of linear and pitched memory inside one of its
//!   allocations, as the driver bounds no more); its value is the
//!   driver's, meaningful only in the session's own context, and only the
//!   session's objects may be destroyed through it.
//!
//! Copies with arrays are not captured into graphs (refused as the driver
//! refuses what it cannot capture).

use super::memory::pinned_async;
use super::{Io, Session, end_of};
use crate::exec::{ArrayCopy, ArrayShape, CopySide, CuRes, ExecContext, Executor, Resource, Sampling, View};
use crate::handles::HandleTable;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{
    self, ARRAY_FLAGS, DataLoc, HandleRep, SIDE_ARRAY, SIDE_DEVICE, SIDE_HOST, U64Rep, array_format_bytes as format_bytes,
};
use std::collections::HashMap;

/// A session's arrays and objects.
pub(super) struct Arrays {
    pub(super) table: HandleTable<Entry>,
    /// Objects by context and value (values are per context): the request
    /// that made each (whether it is a surface, what it reads), which a
    /// checkpoint keeps.
    pub(super) objects: HashMap<(u64, u64), proto::TexObjectCreate>,
}

pub(super) enum Kind {
    Plain,
    /// Levels looked up so far, by level.
    Mipmapped {
        levels: u32,
        looked_up: HashMap<u32, u64>,
    },
    /// A level of a mipmapped array: goes with it.
    Level,
}

pub(super) struct Entry {
    pub(super) ctx: u64,
    pub(super) raw: u64,
    pub(super) shape: ArrayShape,
    pub(super) kind: Kind,
    /// What the quota counts.
    bytes: u64,
    /// When it was made, in the order of the session's modules, streams
    /// and events (the driver places what it makes later after it).
    pub(super) seq: u64,
}

impl Arrays {
    pub(super) fn new(max_objects: usize) -> Self {
        Arrays { table: HandleTable::new(max_objects), objects: HashMap::new() }
    }

    /// Makes ids of address space `space` ([`HandleTable::set_space`]).
    pub(super) fn set_space(&mut self, space: u16) {
        self.table.set_space(space);
    }
}

/// Bytes of an array's levels, `None` for a shape or format not offered.
fn array_bytes(shape: &ArrayShape, levels: u32) -> Option<u64> {
    (0..levels.max(1)).try_fold(0u64, |sum, l| sum.checked_add(shape.level(l).bytes()?))
}

pub(super) fn array_create<E: Executor>(s: &mut Session<E>, r: proto::ArrayCreate, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let shape = ArrayShape {
        width: r.width.get(),
        height: r.height.get(),
        depth: r.depth.get(),
        format: r.format.get(),
        channels: r.channels.get(),
        flags: r.flags.get(),
    };
    let seq = s.next_made();
    make(s, r.ctx.get(), shape, r.levels.get(), seq, None).map(|id| HandleRep { handle: id.into() })
}

/// Makes an array of `levels` (0: a plain one) in context `ctx` under id
/// `at` (a restore's), else a new one; its id.
pub(super) fn make<E: Executor>(s: &mut Session<E>, ctx: u64, shape: ArrayShape, levels: u32, seq: u64, at: Option<u64>) -> CuRes<u64> {
    if format_bytes(shape.format).is_none() || shape.flags & !ARRAY_FLAGS != 0 {
        return Err(CuError::NOT_SUPPORTED);
    }
    if shape.width == 0 || levels > 32 {
        return Err(CuError::INVALID_VALUE);
    }
    let bytes = array_bytes(&shape, levels).ok_or(CuError::INVALID_VALUE)?;
    if s.over_quota(bytes) {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let raw = s.enter(ctx)?.array_create(&shape, levels)?;
    let kind = if levels == 0 { Kind::Plain } else { Kind::Mipmapped { levels, looked_up: HashMap::new() } };
    let entry = Entry { ctx, raw, shape, kind, bytes, seq };
    let id = match at {
        Some(id) => s.arrays.table.insert_at(id, entry).map(|()| id),
        None => s.arrays.table.insert(entry),
    };
    match id {
        Ok(id) => {
            s.mem_used += bytes;
            Ok(id)
        }
        Err(e) => {
            let _ = s.enter(ctx).and_then(|c| c.array_destroy(raw, levels > 0));
            Err(e)
        }
    }
}

pub(super) fn array_destroy<E: Executor>(s: &mut Session<E>, r: proto::ArrayDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let (id, mipmapped) = (r.handle.get(), r.mipmapped.get() == 1);
    let e = s.arrays.table.get(id).ok_or(CuError::INVALID_HANDLE)?;
    match (&e.kind, mipmapped) {
        (Kind::Plain, false) | (Kind::Mipmapped { .. }, true) => {}
        _ => return Err(CuError::INVALID_HANDLE),
    }
    let (ctx, raw) = (e.ctx, e.raw);
    s.enter(ctx)?.array_destroy(raw, mipmapped)?;
    remove(s, id);
    Ok(())
}

/// Forgets array `id` (and a mipmapped array's levels), giving back what
/// the quota counted.
fn remove<E: Executor>(s: &mut Session<E>, id: u64) {
    if let Some(e) = s.arrays.table.remove(id) {
        s.mem_used -= e.bytes;
        if let Kind::Mipmapped { looked_up, .. } = e.kind {
            looked_up.values().for_each(|&l| drop(s.arrays.table.remove(l)));
        }
    }
}

pub(super) fn mipmap_level<E: Executor>(s: &mut Session<E>, r: proto::MipmapLevel, _: &mut Io<'_>) -> CuRes<HandleRep> {
    look_up_level(s, r.handle.get(), r.level.get(), None).map(|l| HandleRep { handle: l.into() })
}

/// The id of level `level` of mipmapped array `id`, looked up (under id
/// `at`, a restore's) if it was not yet.
pub(super) fn look_up_level<E: Executor>(s: &mut Session<E>, id: u64, level: u32, at: Option<u64>) -> CuRes<u64> {
    let e = s.arrays.table.get(id).ok_or(CuError::INVALID_HANDLE)?;
    let Kind::Mipmapped { levels, looked_up } = &e.kind else { return Err(CuError::INVALID_HANDLE) };
    if let Some(&l) = looked_up.get(&level) {
        return Ok(l);
    }
    if level >= *levels {
        return Err(CuError::INVALID_VALUE);
    }
    let (ctx, raw, shape, seq) = (e.ctx, e.raw, e.shape.level(level), e.seq);
    let level_raw = s.enter(ctx)?.mipmap_level(raw, level)?;
    let entry = Entry { ctx, raw: level_raw, shape, kind: Kind::Level, bytes: 0, seq };
    let l = match at {
        Some(l) => s.arrays.table.insert_at(l, entry).map(|()| l)?,
        None => s.arrays.table.insert(entry)?,
    };
    if let Some(Entry { kind: Kind::Mipmapped { looked_up, .. }, .. }) = s.arrays.table.get_mut(id) {
        looked_up.insert(level, l);
    }
    Ok(l)
}

/// An array side of a copy: the array's context and the executor's side,
/// once the copy's extent is checked to lie inside the array.
fn array_side<E: Executor>(s: &Session<E>, side: &proto::ArraySide, w: u64, h: u64, d: u64) -> CuRes<(u64, CopySide)> {
    let e = s.arrays.table.get(side.addr.get()).ok_or(CuError::INVALID_HANDLE)?;
    if matches!(e.kind, Kind::Mipmapped { .. }) {
        return Err(CuError::INVALID_HANDLE);
    }
    let (x, y, z) = (side.x.get(), side.y.get(), side.z.get());
    let row = e.shape.row_bytes().ok_or(CuError::INVALID_VALUE)?;
    let inside = |at: u64, n: u64, end: u64| at.checked_add(n).is_some_and(|v| v <= end);
    if !inside(x, w, row) || !inside(y, h, e.shape.rows()) || !inside(z, d, e.shape.slices()) {
        return Err(CuError::INVALID_VALUE);
    }
    Ok((e.ctx, CopySide::Array { raw: e.raw, x, y, z }))
}

/// A device side: the context of the allocation its bytes lie in.
fn device_side<E: Executor>(s: &Session<E>, side: &proto::ArraySide, w: u64, h: u64, d: u64) -> CuRes<(u64, CopySide)> {
    let (ptr, pitch, rows) = (side.addr.get(), side.pitch.get(), side.rows.get());
    if (h > 1 || d > 1) && w > pitch || d > 1 && h > rows {
        return Err(CuError::INVALID_VALUE);
    }
    let span = rows
        .checked_mul(d - 1)
        .and_then(|r| r.checked_add(h - 1))
        .and_then(|r| r.checked_mul(pitch))
        .and_then(|b| b.checked_add(w))
        .ok_or(CuError::INVALID_VALUE)?;
    Ok((s.range(ptr, span)?, CopySide::Device { ptr, pitch, rows }))
}

pub(super) fn array_copy<E: Executor>(s: &mut Session<E>, r: proto::ArrayCopy<'_>, io: &mut Io<'_>) -> CuRes<proto::Bulk> {
    let h = &r.head;
    let (w, ht, d) = (h.width.get(), h.height.get(), h.depth.get());
    if w == 0 || ht == 0 || d == 0 {
        return Ok(proto::Bulk);
    }
    let len = w.checked_mul(ht).and_then(|v| v.checked_mul(d)).and_then(|v| usize::try_from(v).ok()).ok_or(CuError::INVALID_VALUE)?;
    let mut ctx = None;
    let mut resolve = |side: &proto::ArraySide, s: &Session<E>| -> CuRes<Option<CopySide>> {
        let (c, cs) = match side.kind.get() {
            SIDE_ARRAY => array_side(s, side, w, ht, d)?,
            SIDE_DEVICE => device_side(s, side, w, ht, d)?,
            _ => return Ok(None),
        };
        if ctx.replace(c).is_some_and(|prev| prev != c) {
            return Err(CuError::INVALID_CONTEXT);
        }
        Ok(Some(cs))
    };
    let src = resolve(&h.src, s)?;
    let dst = resolve(&h.dst, s)?;
    let ctx = ctx.ok_or(CuError::INVALID_VALUE)?;
    let st = s.stream(h.stream.get(), ctx)?;
    super::graph::refuse_during_capture(s, ctx, st, false)?;
    let host = h.src.kind.get() == SIDE_HOST || h.dst.kind.get() == SIDE_HOST;
    let mut wait = host && !pinned_async(h.flags.get(), &h.data);
    let host_side = if h.src.kind.get() == SIDE_HOST {
        let (p, n) = Session::<E>::source(&h.data, r.data, io.area)?;
        if n != len {
            return Err(CuError::INVALID_VALUE);
        }
        Some(CopySide::Host(p as *mut u8))
    } else if h.dst.kind.get() == SIDE_HOST {
        Some(CopySide::Host(match h.data.location().map_err(|_| CuError::INVALID_VALUE)? {
            DataLoc::Inline => {
                wait = true;
                io.out.resize(len, 0);
                io.out.as_mut_ptr()
            }
            DataLoc::Area { offset } => {
                io.area.ok_or(CuError::INVALID_VALUE)?.ptr(offset, len as u64).map_err(|_| CuError::INVALID_VALUE)?
            }
        }))
    } else {
        None
    };
    let c = ArrayCopy {
        src: src.or(host_side).ok_or(CuError::INVALID_VALUE)?,
        dst: dst.or(host_side).ok_or(CuError::INVALID_VALUE)?,
        width: w,
        height: ht,
        depth: d,
    };
    let cx = s.enter(ctx)?;
    // SAFETY: host sides are the request's inline bytes, the reply buffer
    // (resized to `len` above) or `len` bytes checked to lie in the data
    // area, which stays mapped until the session's contexts are gone; the
    // copy waits unless its host side is the program's page-locked memory.
    unsafe { cx.array_copy(&c, st, wait)? };
    Ok(proto::Bulk)
}

/// The executor's resource of a request's, every handle and range checked.
fn resource<E: Executor>(s: &Session<E>, res: &proto::ResourceDesc) -> CuRes<(u64, Resource)> {
    let array = |id: u64, mipmapped: bool| -> CuRes<(u64, u64)> {
        let e = s.arrays.table.get(id).ok_or(CuError::INVALID_HANDLE)?;
        if matches!(e.kind, Kind::Mipmapped { .. }) != mipmapped {
            return Err(CuError::INVALID_HANDLE);
        }
        Ok((e.ctx, e.raw))
    };
    let (format, channels, addr) = (res.format.get(), res.channels.get(), res.addr.get());
    let elem = || -> CuRes<u64> {
        match (format_bytes(format), channels) {
            (Some(b), 1 | 2 | 4) => Ok(b * u64::from(channels)),
            (None, _) => Err(CuError::NOT_SUPPORTED),
            _ => Err(CuError::INVALID_VALUE),
        }
    };
    Ok(match res.kind.get() {
        proto::RESOURCE_ARRAY => {
            let (c, raw) = array(addr, false)?;
            (c, Resource::Array(raw))
        }
        proto::RESOURCE_MIPMAPPED => {
            let (c, raw) = array(addr, true)?;
            (c, Resource::Mipmapped(raw))
        }
        // Memory: its first byte must be the session's; the driver does
        // not bound the extent by the allocation, and programs rely on it
        // (NVIDIA's FFT convolution sample names padding past its buffer):
        // the object reads in the session's own context, as its kernels
        // may.
        proto::RESOURCE_LINEAR => {
            elem()?;
            let bytes = res.bytes.get();
            end_of(addr, bytes)?;
            (s.range(addr, 1)?, Resource::Linear { ptr: addr, format, channels, bytes })
        }
        _ => {
            let (width, height, pitch) = (res.width.get(), res.height.get(), res.bytes.get());
            let row = elem()?.checked_mul(width).ok_or(CuError::INVALID_VALUE)?;
            if height == 0 || row > pitch {
                return Err(CuError::INVALID_VALUE);
            }
            pitch
                .checked_mul(height - 1)
                .and_then(|b| b.checked_add(row))
                .and_then(|b| addr.checked_add(b))
                .ok_or(CuError::INVALID_VALUE)?;
            (s.range(addr, 1)?, Resource::Pitch2D { ptr: addr, format, channels, width, height, pitch })
        }
    })
}

pub(super) fn tex_object_create<E: Executor>(s: &mut Session<E>, r: proto::TexObjectCreate, _: &mut Io<'_>) -> CuRes<U64Rep> {
    make_object(s, &r).map(|object| U64Rep { value: object.into() })
}

/// Makes the object `r` asks for, every handle and range checked; its
/// value.
pub(super) fn make_object<E: Executor>(s: &mut Session<E>, r: &proto::TexObjectCreate) -> CuRes<u64> {
    let (ctx, res) = resource(s, &r.res)?;
    if ctx != r.ctx.get() {
        return Err(CuError::INVALID_CONTEXT);
    }
    if s.arrays.objects.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let surface = r.surface.get() == 1;
    let v = &r.view;
    let sampling = Sampling {
        tex: r.tex.map(|w| w.get()),
        view: (r.has_view.get() == 1).then(|| View {
            format: v.format.get(),
            extent: [v.width.get(), v.height.get(), v.depth.get()],
            levels: [v.first_level.get(), v.last_level.get()],
            layers: [v.first_layer.get(), v.last_layer.get()],
        }),
    };
    let object = s.enter(ctx)?.tex_object_create(&res, (!surface).then_some(&sampling))?;
    s.arrays.objects.insert((ctx, object), *r);
    Ok(object)
}

pub(super) fn tex_object_destroy<E: Executor>(s: &mut Session<E>, r: proto::TexObjectDestroy, _: &mut Io<'_>) -> CuRes<()> {
    let key = (r.ctx.get(), r.object.get());
    let surface = r.surface.get() == 1;
    if s.arrays.objects.get(&key).map(|o| o.surface.get() == 1) != Some(surface) {
        return Err(CuError::INVALID_VALUE);
    }
    s.enter(key.0)?.tex_object_destroy(key.1, surface)?;
    s.arrays.objects.remove(&key);
    Ok(())
}

/// Forgets the arrays and objects of context `ctx` (all with `None`),
/// destroying them while the context exists.
pub(super) fn forget<E: Executor>(s: &mut Session<E>, ctx: Option<u64>) {
    let mine = |c: u64| ctx.is_none_or(|x| x == c);
    let objects: Vec<((u64, u64), bool)> =
        s.arrays.objects.iter().filter(|((c, _), _)| mine(*c)).map(|(&k, o)| (k, o.surface.get() == 1)).collect();
    for ((c, o), surface) in objects {
        let _ = s.enter(c).and_then(|x| x.tex_object_destroy(o, surface));
        s.arrays.objects.remove(&(c, o));
    }
    let owned: Vec<(u64, u64, u64, bool)> = s
        .arrays
        .table
        .iter()
        .filter(|(_, e)| mine(e.ctx) && !matches!(e.kind, Kind::Level))
        .map(|(id, e)| (id, e.ctx, e.raw, matches!(e.kind, Kind::Mipmapped { .. })))
        .collect();
    for (id, c, raw, mipmapped) in owned {
        let _ = s.enter(c).and_then(|x| x.array_destroy(raw, mipmapped));
        remove(s, id);
    }
    let _ = s.arrays.table.drain_where(|e| matches!(e.kind, Kind::Level) && mine(e.ctx));
}
