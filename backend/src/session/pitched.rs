//! Pitched (2D) copies and memsets: every row they touch must lie inside
//! one of the session's allocations, checked as the span from the first
//! byte of the first row to the last byte of the last row.

use super::memory::pinned_async;
use super::{Io, Session};
use crate::exec::{Copy2D, CuRes, ExecContext, Executor, Rect};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, COPY_2D_DTOD, COPY_2D_DTOH, COPY_2D_HTOD, DataLoc};

/// The bytes a pitched region spans: `height - 1` pitches and one row.
fn span(pitch: u64, width: u64, height: u64) -> CuRes<u64> {
    if width > pitch && height > 1 {
        return Err(CuError::INVALID_VALUE);
    }
    pitch.checked_mul(height - 1).and_then(|v| v.checked_add(width)).ok_or(CuError::INVALID_VALUE)
}

pub(super) fn memcpy_2d<E: Executor>(s: &mut Session<E>, r: proto::Memcpy2D<'_>, io: &mut Io<'_>) -> CuRes<proto::Bulk> {
    let h = &r.head;
    let (w, ht) = (h.width.get(), h.height.get());
    if w == 0 || ht == 0 {
        return Ok(proto::Bulk);
    }
    let kind = h.kind.get();
    let ctx = match kind {
        COPY_2D_HTOD => s.range(h.dst.get(), span(h.dst_pitch.get(), w, ht)?)?,
        COPY_2D_DTOH => s.range(h.src.get(), span(h.src_pitch.get(), w, ht)?)?,
        _ => {
            s.range(h.src.get(), span(h.src_pitch.get(), w, ht)?)?;
            s.range(h.dst.get(), span(h.dst_pitch.get(), w, ht)?)?
        }
    };
    // On a stream of another context (a device's stream copying another
    // device's memory, as cuFFT's multi-GPU copies do): a copy between
    // device memory runs in the stream's context, whose address space holds
    // every side; one with the host runs in the memory's, after the
    // stream's earlier work ([`super::memory::after_foreign_stream`]).
    let (ctx, foreign) = match kind {
        COPY_2D_HTOD | COPY_2D_DTOH => (ctx, super::memory::after_foreign_stream(s, ctx, h.stream.get())?),
        _ => (s.run_context(ctx, h.stream.get())?, false),
    };
    let st = if foreign { None } else { s.stream(h.stream.get(), ctx)? };
    let len = usize::try_from(w * ht).map_err(|_| CuError::INVALID_VALUE)?;
    let wait = foreign || !pinned_async(h.flags.get(), &h.data);
    if kind != COPY_2D_DTOD {
        super::graph::refuse_during_capture(s, ctx, st, !wait)?;
    }
    let c = match kind {
        COPY_2D_HTOD => {
            let (p, n) = Session::<E>::source(&h.data, r.data, io.area)?;
            if n != len {
                return Err(CuError::INVALID_VALUE);
            }
            Copy2D::HtoD { dst: h.dst.get(), dst_pitch: h.dst_pitch.get(), src: p }
        }
        COPY_2D_DTOH => {
            let dst = match h.data.location().map_err(|_| CuError::INVALID_VALUE)? {
                DataLoc::Inline => {
                    io.out.resize(len, 0);
                    io.out.as_mut_ptr()
                }
                DataLoc::Area { offset } => {
                    let area = io.area.ok_or(CuError::INVALID_VALUE)?;
                    area.ptr(offset, len as u64).map_err(|_| CuError::INVALID_VALUE)?
                }
            };
            Copy2D::DtoH { dst, src: h.src.get(), src_pitch: h.src_pitch.get() }
        }
        COPY_2D_DTOD => Copy2D::DtoD { dst: h.dst.get(), dst_pitch: h.dst_pitch.get(), src: h.src.get(), src_pitch: h.src_pitch.get() },
        _ => return Err(CuError::INVALID_VALUE),
    };
    let wait = wait && kind != COPY_2D_DTOD || kind == COPY_2D_DTOH && matches!(h.data.location(), Ok(DataLoc::Inline));
    let cx = s.enter(ctx)?;
    // SAFETY: host sides are the request's inline bytes, the reply buffer
    // (resized to `len` above) or `len` bytes checked to lie in the data
    // area, which stays mapped until the session's contexts are gone; the
    // reply buffer is only used after a waiting copy.
    unsafe { cx.copy_2d(c, w, ht, st, wait)? };
    let dir = match kind {
        COPY_2D_HTOD => crate::meter::Direction::HostToDevice,
        COPY_2D_DTOH => crate::meter::Direction::DeviceToHost,
        _ => crate::meter::Direction::DeviceToDevice,
    };
    s.count_copy(dir, len as u64);
    Ok(proto::Bulk)
}

pub(super) fn memset_2d<E: Executor>(s: &mut Session<E>, r: proto::Memset2D, _: &mut Io<'_>) -> CuRes<()> {
    let (dptr, pitch, elem) = (r.dptr.get(), r.pitch.get(), r.elem_size.get());
    let (w, h) = (r.width.get(), r.height.get());
    if w == 0 || h == 0 {
        return Ok(());
    }
    if dptr % elem as u64 != 0 || pitch % elem as u64 != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let row = w.checked_mul(elem as u64).ok_or(CuError::INVALID_VALUE)?;
    let ctx = s.device_ranges(&[(dptr, span(pitch, row, h)?)], r.stream.get())?;
    let st = s.stream(r.stream.get(), ctx)?;
    s.enter(ctx)?.memset_2d(Rect { ptr: dptr, pitch, width: w, height: h }, r.value.get(), elem, st)
}
