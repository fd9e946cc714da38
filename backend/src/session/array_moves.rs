//! CUDA arrays and texture and surface objects in snapshots
//! ([`super::checkpoint`], [`super::restore`]).
//!
//! - A checkpoint reads every level of every array, rows and slices
//!   packed, into a blob of its own.
//! - A restore makes each array again, empty, in its place among the
//!   session's modules, streams and events (the driver places what it
//!   makes later after it), looks its levels up under the ids the guest
//!   holds, and writes the elements back once the rest of the session's
//!   memory is in place.
//! - Objects are values that kernels receive in their arguments, so they
//!   must come back with the same values. The driver numbers a context's
//!   objects from 1, textures and surfaces together, each taking the
//!   lowest number free (measured on the H200, driver 580, the same in
//!   every process). A restore makes each context's objects in the order
//!   of their values, with stand-ins for the numbers the program had
//!   freed, and then destroys the stand-ins. An object that comes back
//!   with another value fails the restore by name, and the snapshot is
//!   kept.

use super::Session;
use super::array::{Kind, look_up_level, make, make_object};
use super::restore::RestoreError;
use crate::exec::{ArrayCopy, ArrayShape, CopySide, CuRes, ExecContext, Executor};
use pvgpu_ctl::snapshot::{ArrayRec, TexObjectRec, from_hex, hex};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::TexObjectCreate;
use std::collections::BTreeMap;
use zerocopy::{FromBytes, IntoBytes};

/// One level of an array (the array itself for a plain one) whose
/// elements a checkpoint reads.
pub(super) struct LevelBytes {
    ctx: u64,
    /// The executor's handle of the array.
    raw: u64,
    /// The level of a mipmapped array; `None` for a plain array.
    level: Option<u32>,
    shape: ArrayShape,
}

impl LevelBytes {
    /// Bytes of its elements.
    pub(super) fn len(&self) -> u64 {
        self.shape.bytes().unwrap_or(0)
    }
}

/// The session's arrays, in the order of their ids, as records whose
/// `blobs` the caller fills, each with the levels whose bytes go in them.
pub(super) fn describe<E: Executor>(s: &Session<E>) -> Vec<(ArrayRec, Vec<LevelBytes>)> {
    let mut out: Vec<(ArrayRec, Vec<LevelBytes>)> = s
        .arrays
        .table
        .iter()
        .filter_map(|(id, e)| {
            let (levels, level_ids) = match &e.kind {
                Kind::Plain => (0, Vec::new()),
                Kind::Mipmapped { levels, looked_up } => {
                    let mut ids: Vec<(u32, u64)> = looked_up.iter().map(|(&l, &i)| (l, i)).collect();
                    ids.sort_unstable();
                    (*levels, ids)
                }
                Kind::Level => return None,
            };
            let sh = e.shape;
            let rec = ArrayRec {
                id,
                ctx: e.ctx,
                width: sh.width,
                height: sh.height,
                depth: sh.depth,
                format: sh.format,
                channels: sh.channels,
                flags: sh.flags,
                levels,
                level_ids,
                blobs: Vec::new(),
                seq: e.seq,
            };
            let parts = if levels == 0 {
                vec![LevelBytes { ctx: e.ctx, raw: e.raw, level: None, shape: sh }]
            } else {
                (0..levels).map(|l| LevelBytes { ctx: e.ctx, raw: e.raw, level: Some(l), shape: sh.level(l) }).collect()
            };
            Some((rec, parts))
        })
        .collect();
    out.sort_by_key(|(r, _)| r.id);
    out
}

/// Whether an object reads memory or an array the program has freed
/// since it made it (a restore could not make it again).
pub(super) fn any_dangling<E: Executor>(s: &Session<E>) -> bool {
    s.arrays.objects.values().any(|r| match r.res.kind.get() {
        pvgpu_ring::proto::RESOURCE_LINEAR | pvgpu_ring::proto::RESOURCE_PITCH2D => s.range(r.res.addr.get(), 1).is_err(),
        _ => s.arrays.table.get(r.res.addr.get()).is_none(),
    })
}

/// The session's texture and surface objects, by context and value.
pub(super) fn describe_objects<E: Executor>(s: &Session<E>) -> Vec<TexObjectRec> {
    let mut out: Vec<TexObjectRec> =
        s.arrays.objects.iter().map(|(&(ctx, value), r)| TexObjectRec { ctx, value, request: hex(r.as_bytes()) }).collect();
    out.sort_by_key(|o| (o.ctx, o.value));
    out
}

/// The executor's handle of a level, and the copy of all its elements to
/// or from `host`.
fn whole(c: &mut impl ExecContext, l: &LevelBytes, host: *mut u8, to_host: bool) -> CuRes<ArrayCopy> {
    let raw = match l.level {
        Some(n) => c.mipmap_level(l.raw, n)?,
        None => l.raw,
    };
    let array = CopySide::Array { raw, x: 0, y: 0, z: 0 };
    let (src, dst) = if to_host { (array, CopySide::Host(host)) } else { (CopySide::Host(host), array) };
    let width = l.shape.row_bytes().ok_or(CuError::INVALID_VALUE)?;
    Ok(ArrayCopy { src, dst, width, height: l.shape.rows(), depth: l.shape.slices() })
}

/// Reads one level's elements, rows and slices packed (the session's work
/// is done: the caller synchronised its contexts).
pub(super) fn read<E: Executor>(s: &mut Session<E>, l: &LevelBytes) -> CuRes<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(l.len()).map_err(|_| CuError::INVALID_VALUE)?];
    let c = s.enter(l.ctx)?;
    let copy = whole(c, l, buf.as_mut_ptr(), true)?;
    // SAFETY: `buf` holds the level's rows and slices packed, the copy's
    // extent, and the copy waits.
    unsafe { c.array_copy(&copy, None, true)? };
    Ok(buf)
}

fn failed(what: String) -> impl FnOnce(CuError) -> RestoreError {
    move |error| RestoreError::Rebuild { what, error }
}

fn shape_of(r: &ArrayRec) -> ArrayShape {
    ArrayShape { width: r.width, height: r.height, depth: r.depth, format: r.format, channels: r.channels, flags: r.flags }
}

/// Makes array `r` again, empty, under the ids the guest holds (its own
/// and its levels').
pub(super) fn rebuild<E: Executor>(s: &mut Session<E>, r: &ArrayRec) -> Result<(), RestoreError> {
    if r.blobs.len() != r.levels.max(1) as usize || r.levels == 0 && !r.level_ids.is_empty() {
        return Err(RestoreError::Inconsistent(format!("array {:#x}: {} blobs for {} levels", r.id, r.blobs.len(), r.levels)));
    }
    make(s, r.ctx, shape_of(r), r.levels, r.seq, Some(r.id)).map_err(failed(format!("array {:#x}", r.id)))?;
    for &(level, id) in &r.level_ids {
        look_up_level(s, r.id, level, Some(id)).map_err(failed(format!("level {level} of array {:#x}", r.id)))?;
    }
    Ok(())
}

/// Writes `bytes` into level `index` of array `r` (the array itself for a
/// plain one), made again by [`rebuild`].
pub(super) fn write<E: Executor>(s: &mut Session<E>, r: &ArrayRec, index: u32, bytes: &mut [u8]) -> Result<(), RestoreError> {
    let e = s.arrays.table.get(r.id).ok_or_else(|| RestoreError::Inconsistent(format!("array {:#x} gone", r.id)))?;
    let shape = if r.levels == 0 { e.shape } else { e.shape.level(index) };
    let l = LevelBytes { ctx: e.ctx, raw: e.raw, level: (r.levels > 0).then_some(index), shape };
    if bytes.len() as u64 != l.len() {
        return Err(RestoreError::Inconsistent(format!("array {:#x}: {} bytes for {} of level {index}", r.id, bytes.len(), l.len())));
    }
    let what = || format!("the elements of array {:#x}", r.id);
    let c = s.enter(l.ctx).map_err(failed(what()))?;
    let copy = whole(c, &l, bytes.as_mut_ptr(), false).map_err(failed(what()))?;
    // SAFETY: `bytes` holds the level's rows and slices packed, the copy's
    // extent, and the copy waits.
    unsafe { c.array_copy(&copy, None, true) }.map_err(failed(what()))
}

/// Makes the objects again with their values, each context's in the order
/// of its values, with stand-ins for numbers no object holds.
pub(super) fn rebuild_objects<E: Executor>(s: &mut Session<E>, recs: &[TexObjectRec]) -> Result<(), RestoreError> {
    let mut by_ctx: BTreeMap<u64, Vec<(u64, TexObjectCreate)>> = BTreeMap::new();
    for o in recs {
        let req = from_hex(&o.request)
            .and_then(|b| TexObjectCreate::read_from_bytes(&b).ok())
            .filter(|r| r.ctx.get() == o.ctx)
            .ok_or_else(|| RestoreError::Inconsistent(format!("texture object {} of context {:#x}: not a request", o.value, o.ctx)))?;
        by_ctx.entry(o.ctx).or_default().push((o.value, req));
    }
    let mut stand_ins = Vec::new();
    for objects in by_ctx.values_mut() {
        objects.sort_by_key(|(v, _)| *v);
        for (value, req) in objects.iter() {
            loop {
                let got = make_object(s, req).map_err(failed(format!("texture object {value}")))?;
                if got == *value {
                    break;
                }
                stand_ins.push((req.ctx.get(), got, req.surface.get() == 1));
                if got > *value {
                    return Err(RestoreError::ObjectValue { from: *value, to: got });
                }
            }
        }
    }
    for (ctx, v, surface) in stand_ins {
        s.enter(ctx).and_then(|c| c.tex_object_destroy(v, surface)).map_err(failed(format!("stand-in texture object {v}")))?;
        s.arrays.objects.remove(&(ctx, v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Io;
    use super::super::snapshot_fixture::{restore, session, snapshot};
    use super::super::{array, memory};
    use super::*;
    use crate::exec::host::HostExecutor;
    use pvgpu_ring::proto::{self, RESOURCE_ARRAY, ResourceDesc};

    const FLOAT: u32 = 0x20;

    /// A session with a 4 x 4 float array and texture objects 1, 2 and 4
    /// over it (3 destroyed); the array's id.
    fn holding_objects() -> (Session<HostExecutor>, u64) {
        let (mut s, ctx) = session();
        let mut out = Vec::new();
        let r = proto::ArrayCreate {
            ctx: ctx.into(),
            width: 4.into(),
            height: 4.into(),
            format: FLOAT.into(),
            channels: 1.into(),
            ..Default::default()
        };
        let a = array::array_create(&mut s, r, &mut Io::internal(&mut out)).unwrap().handle.get();
        let tex = proto::TexObjectCreate {
            ctx: ctx.into(),
            res: ResourceDesc { kind: RESOURCE_ARRAY.into(), addr: a.into(), ..Default::default() },
            ..Default::default()
        };
        let values: Vec<u64> = (0..4).map(|_| make_object(&mut s, &tex).unwrap()).collect();
        assert_eq!(values, [1, 2, 3, 4]);
        let gone = proto::TexObjectDestroy { ctx: ctx.into(), object: 3.into(), ..Default::default() };
        array::tex_object_destroy(&mut s, gone, &mut Io::internal(&mut out)).unwrap();
        (s, a)
    }

    #[test]
    fn objects_come_back_with_their_values_and_no_stand_in_stays() {
        let (mut s, a) = holding_objects();
        let file = snapshot(&mut s, |_| {});
        let back = restore(&file).unwrap();
        let mut values: Vec<u64> = back.arrays.objects.keys().map(|(_, v)| *v).collect();
        values.sort_unstable();
        assert_eq!(values, [1, 2, 4], "3 was a stand-in, destroyed again");
        assert!(back.arrays.table.get(a).is_some(), "the array under its id");
    }

    #[test]
    fn an_object_over_freed_memory_is_refused_at_the_checkpoint() {
        let (mut s, ctx) = session();
        let mut out = Vec::new();
        let d = memory::mem_alloc(&mut s, proto::MemAlloc { ctx: ctx.into(), size: 4096.into() }, &mut Io::internal(&mut out))
            .unwrap()
            .dptr
            .get();
        let res = ResourceDesc {
            kind: proto::RESOURCE_LINEAR.into(),
            addr: d.into(),
            format: FLOAT.into(),
            channels: 1.into(),
            bytes: 4096.into(),
            ..Default::default()
        };
        make_object(&mut s, &TexObjectCreate { ctx: ctx.into(), res, ..Default::default() }).unwrap();
        memory::mem_free(&mut s, proto::MemFree { dptr: d.into() }, &mut Io::internal(&mut out)).unwrap();
        let refused = super::super::snapshot_fixture::checkpoint(&mut s);
        assert!(matches!(refused, Err(super::super::CheckpointError::Unsupported(w)) if w.contains("freed")), "{refused:?}");
    }

    #[test]
    fn an_object_over_a_destroyed_array_is_refused_at_the_checkpoint() {
        let (mut s, a) = holding_objects();
        let mut out = Vec::new();
        let gone = proto::ArrayDestroy { handle: a.into(), ..Default::default() };
        array::array_destroy(&mut s, gone, &mut Io::internal(&mut out)).unwrap();
        let refused = super::super::snapshot_fixture::checkpoint(&mut s);
        assert!(matches!(refused, Err(super::super::CheckpointError::Unsupported(w)) if w.contains("freed")), "{refused:?}");
    }

    #[test]
    fn a_hostile_description_of_arrays_or_objects_is_refused_by_name() {
        let (mut s, a) = holding_objects();
        let twice = snapshot(&mut s, |m| {
            let o = m.state.tex_objects[0].clone();
            m.state.tex_objects.push(o);
        });
        assert!(matches!(restore(&twice), Err(RestoreError::ObjectValue { from: 1, to: 2 })), "one value twice");
        let elsewhere = snapshot(&mut s, |m| {
            let mut r = TexObjectCreate::read_from_bytes(&from_hex(&m.state.tex_objects[0].request).unwrap()).unwrap();
            r.res.addr = (a + 1).into();
            m.state.tex_objects[0].request = hex(r.as_bytes());
        });
        assert!(
            matches!(restore(&elsewhere), Err(RestoreError::Rebuild { error: CuError::INVALID_HANDLE, .. })),
            "an object over an array the session does not hold"
        );
        let short = snapshot(&mut s, |m| m.state.tex_objects[0].request.truncate(8));
        assert!(matches!(restore(&short), Err(RestoreError::Inconsistent(_))), "a request cut short");
        let levels = snapshot(&mut s, |m| m.state.arrays[0].level_ids.push((0, a + 9)));
        assert!(matches!(restore(&levels), Err(RestoreError::Inconsistent(_))), "levels of a plain array");
        let format = snapshot(&mut s, |m| m.state.arrays[0].format = 0x91);
        assert!(matches!(restore(&format), Err(RestoreError::Rebuild { error: CuError::NOT_SUPPORTED, .. })), "a format not offered");
    }
}
