//! CUDA arrays, copies with an array side, texture and surface objects.
//!
//! An array lives in the backend; the program holds the session's id of
//! it. A copy with a host side gathers the host rows into (or scatters
//! them from) the staging area, a chunk of whole rows per request, so it
//! takes one request per chunk; copies between arrays and device memory
//! are one request. A texture or surface object's value is the backend
//! driver's, which kernels receive as it is.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::handles::{Context, Stream};
use crate::rpc::Conn;
pub use pvgpu_ring::proto::ArrayShape;
use pvgpu_ring::proto::{
    ArrayCopy, ArrayCopyHead, ArrayCreate, ArrayDestroy, ArraySide, COPY_ASYNC, DataRef, FLAG_REPLY, MipmapLevel, Opcode, ResourceDesc,
    ResourceView, SIDE_ARRAY, SIDE_DEVICE, SIDE_HOST, TexObjectCreate, TexObjectDestroy,
};

/// One end of a copy with an array.
#[derive(Debug, Clone, Copy)]
pub enum ArrayEnd {
    /// The program's memory: rows `pitch` bytes apart, slices `rows` rows
    /// apart.
    Host {
        /// First byte.
        ptr: *const u8,
        /// Bytes between rows.
        pitch: usize,
        /// Rows between slices.
        rows: usize,
    },
    /// Device memory: rows `pitch` bytes apart, slices `rows` rows apart.
    Device {
        /// First byte.
        ptr: u64,
        /// Bytes between rows.
        pitch: u64,
        /// Rows between slices.
        rows: u64,
    },
    /// An array, from byte `x` of row `y` of slice (or layer) `z`.
    Array {
        /// The array's id.
        id: u64,
        /// First byte of each row.
        x: u64,
        /// First row.
        y: u64,
        /// First slice.
        z: u64,
    },
}

impl ArrayEnd {
    /// The wire side of the part of this end that starts at row `y`,
    /// slice `z` of the copy.
    fn wire(&self, y: u64, z: u64) -> ArraySide {
        let mut s = ArraySide::default();
        match *self {
            ArrayEnd::Host { .. } => s.kind = SIDE_HOST.into(),
            ArrayEnd::Device { ptr, pitch, rows } => {
                s.kind = SIDE_DEVICE.into();
                s.addr = (ptr + (z * rows + y) * pitch).into();
                s.pitch = pitch.into();
                s.rows = rows.into();
            }
            ArrayEnd::Array { id, x, y: y0, z: z0 } => {
                s.kind = SIDE_ARRAY.into();
                s.addr = id.into();
                s.x = x.into();
                s.y = (y0 + y).into();
                s.z = (z0 + z).into();
            }
        }
        s
    }
}

/// A texture object's sampling: `CUDA_TEXTURE_DESC`'s words without the
/// reserved ones, and the resource view, if any.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TexSampling {
    /// Address modes, filter mode, flags, maximum anisotropy, mipmap
    /// filter mode, level bias and clamps, border colour.
    pub words: [u32; 13],
    /// The resource view.
    pub view: Option<ResourceView>,
}

/// The extent of a copy.
#[derive(Debug, Clone, Copy)]
struct Extent {
    w: u64,
    h: u64,
    d: u64,
}

impl Client {
    /// `cuArray3DCreate` (`levels` 0) or `cuMipmappedArrayCreate` in
    /// context `ctx`: the array's id.
    pub fn array_create(&self, ctx: Context, s: &ArrayShape, levels: u32) -> Result<u64> {
        let req = ArrayCreate {
            ctx: ctx.0.into(),
            width: s.width.into(),
            height: s.height.into(),
            depth: s.depth.into(),
            format: s.format.into(),
            channels: s.channels.into(),
            flags: s.flags.into(),
            levels: levels.into(),
        };
        Ok(self.call(&req)?.handle.get())
    }

    /// `cuArrayDestroy` or `cuMipmappedArrayDestroy`.
    pub fn array_destroy(&self, id: u64, mipmapped: bool) -> Result<()> {
        self.call(&ArrayDestroy { handle: id.into(), mipmapped: u32::from(mipmapped).into(), reserved: 0.into() })
    }

    /// `cuMipmappedArrayGetLevel`: the level's id (it goes with the
    /// mipmapped array).
    pub fn mipmap_level(&self, id: u64, level: u32) -> Result<u64> {
        Ok(self.call(&MipmapLevel { handle: id.into(), level: level.into(), reserved: 0.into() })?.handle.get())
    }

    /// A copy of `depth` slices of `height` rows of `width` bytes with an
    /// array on at least one side (never host to host). Host-to-array and
    /// device-side copies are ordered on `stream` and, with `is_async`,
    /// sent without waiting; array-to-host copies are complete when this
    /// returns.
    ///
    /// # Safety
    /// A host side must be valid for the rows and slices it names
    /// (writable for a destination).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn array_copy(
        &self,
        dst: ArrayEnd,
        src: ArrayEnd,
        width: u64,
        height: u64,
        depth: u64,
        stream: Stream,
        is_async: bool,
    ) -> Result<()> {
        if width == 0 || height == 0 || depth == 0 {
            return Ok(());
        }
        let e = Extent { w: width, h: height, d: depth };
        let wait = !is_async || self.waits();
        let mut c = self.conn();
        match (dst, src) {
            (ArrayEnd::Host { .. }, ArrayEnd::Host { .. }) => Err(Error::Cuda(pvgpu_ring::CuError::INVALID_VALUE)),
            (_, ArrayEnd::Host { ptr, pitch, rows }) => {
                // SAFETY: the caller's contract for the host rows.
                unsafe { to_array(&mut c, dst, (ptr, pitch, rows), e, stream, is_async, wait) }
            }
            (ArrayEnd::Host { ptr, pitch, rows }, _) => {
                // SAFETY: the caller's contract for the host rows.
                unsafe { from_array(&mut c, (ptr as *mut u8, pitch, rows), src, e, stream, is_async) }
            }
            _ => {
                let head = head(dst.wire(0, 0), src.wire(0, 0), e, stream, is_async, DataRef::default());
                let req = ArrayCopy { head, data: &[] };
                if wait { c.call_raw(&req) } else { c.send(&req, 0).map(drop) }
            }
        }
    }

    /// `cuTexObjectCreate` (with `sampling`) or `cuSurfObjectCreate`
    /// (without) in context `ctx`: the object's value, which kernels
    /// receive.
    pub fn tex_object_create(&self, ctx: Context, res: ResourceDesc, sampling: Option<&TexSampling>) -> Result<u64> {
        let req = TexObjectCreate {
            ctx: ctx.0.into(),
            surface: u32::from(sampling.is_none()).into(),
            has_view: u32::from(sampling.is_some_and(|s| s.view.is_some())).into(),
            res,
            tex: sampling.map_or([0; 13], |s| s.words).map(Into::into),
            view: sampling.and_then(|s| s.view).unwrap_or_default(),
        };
        Ok(self.call(&req)?.value.get())
    }

    /// `cuTexObjectDestroy` or `cuSurfObjectDestroy` of an object made in
    /// context `ctx`.
    pub fn tex_object_destroy(&self, ctx: Context, object: u64, surface: bool) -> Result<()> {
        self.call(&TexObjectDestroy { ctx: ctx.0.into(), object: object.into(), surface: u32::from(surface).into(), reserved: 0.into() })
    }
}

fn head(dst: ArraySide, src: ArraySide, e: Extent, stream: Stream, is_async: bool, data: DataRef) -> ArrayCopyHead {
    ArrayCopyHead {
        dst,
        src,
        width: e.w.into(),
        height: e.h.into(),
        depth: e.d.into(),
        stream: stream.0.into(),
        flags: (if is_async { COPY_ASYNC } else { 0 }).into(),
        reserved: 0.into(),
        data,
    }
}

/// The pieces a host side is sent in: `(z, y, rows)`, whole rows of one
/// slice each, or the whole copy at once when it fits one chunk.
fn pieces(e: Extent, chunk: usize) -> Vec<(u64, u64, u64)> {
    let per = (chunk as u64 / e.w).max(1);
    if e.w * e.h * e.d <= chunk as u64 {
        return vec![(0, 0, e.h)];
    }
    let mut v = Vec::new();
    for z in 0..e.d {
        let mut y = 0;
        while y < e.h {
            let n = per.min(e.h - y);
            v.push((z, y, n));
            y += n;
        }
    }
    v
}

/// Host rows to an array or device memory.
///
/// # Safety
/// `src` holds the copy's rows and slices at its pitch.
unsafe fn to_array(
    c: &mut Conn,
    dst: ArrayEnd,
    src: (*const u8, usize, usize),
    e: Extent,
    stream: Stream,
    is_async: bool,
    wait: bool,
) -> Result<()> {
    let (w, pitch, rows) = (e.w as usize, src.1, src.2);
    let parts = pieces(e, c.t.max_chunk());
    let whole = parts.len() == 1;
    let mut packed = Vec::new();
    for (i, &(z, y, n)) in parts.iter().enumerate() {
        packed.clear();
        let slices = if whole { 0..e.d } else { z..z + 1 };
        for zz in slices {
            for r in y..y + n {
                let at = (zz as usize * rows + r as usize) * pitch;
                // SAFETY: row `r` of slice `zz` of the caller's source.
                packed.extend_from_slice(unsafe { std::slice::from_raw_parts(src.0.add(at), w) });
            }
        }
        let staged = match c.t.stage(&packed) {
            Ok(s) => s,
            Err(err) => return c.fail(err),
        };
        let part = Extent { w: e.w, h: n, d: if whole { e.d } else { 1 } };
        let src_side = ArrayEnd::Host { ptr: src.0, pitch, rows }.wire(0, 0);
        let head = head(dst.wire(y, z), src_side, part, stream, is_async, staged.dref);
        let data: &[u8] = if staged.inline { &packed } else { &[] };
        let req = ArrayCopy { head, data };
        let last = i + 1 == parts.len();
        if wait && last { c.call_raw(&req)? } else { c.send(&req, 0).map(drop)? }
    }
    Ok(())
}

/// Array or device rows to the host, each piece scattered to its rows when
/// its reply arrives.
///
/// # Safety
/// `dst` is writable for the copy's rows and slices at its pitch.
unsafe fn from_array(c: &mut Conn, dst: (*mut u8, usize, usize), src: ArrayEnd, e: Extent, stream: Stream, is_async: bool) -> Result<()> {
    let (w, pitch, rows) = (e.w as usize, dst.1, dst.2);
    let parts = pieces(e, c.t.max_chunk());
    let whole = parts.len() == 1;
    let mut packed = Vec::new();
    for (z, y, n) in parts {
        let part = Extent { w: e.w, h: n, d: if whole { e.d } else { 1 } };
        let len = (part.w * part.h * part.d) as usize;
        let staged = match c.t.reserve(len) {
            Ok(s) => s,
            Err(err) => return c.fail(err),
        };
        let host = ArrayEnd::Host { ptr: dst.0, pitch, rows }.wire(0, 0);
        let head = head(host, src.wire(y, z), part, stream, is_async, staged.dref);
        let id = c.send(&ArrayCopy { head, data: &[] }, FLAG_REPLY)?;
        if let Err(err) = c.reply(Opcode::ArrayCopy as u16, id)?.result() {
            c.t.discard(&staged);
            return Err(Error::Cuda(err));
        }
        packed.resize(len, 0);
        let Conn { t, buf, .. } = &mut *c;
        if let Err(err) = t.fetch(&staged, buf, &mut packed) {
            return c.fail(err);
        }
        let first_slice = if whole { 0 } else { z };
        for (i, row) in packed.chunks_exact(w).enumerate() {
            let (zz, r) = (first_slice as usize + i / n as usize, y as usize + i % n as usize);
            // SAFETY: row `r` of slice `zz` of the caller's destination.
            unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), dst.0.add((zz * rows + r) * pitch), w) };
        }
    }
    Ok(())
}
