//! CUDA arrays and mipmapped arrays (`cuArrayCreate`, `cuArray3DCreate`,
//! `cuMipmappedArrayCreate`, ...) and copies with an array side
//! (`cuMemcpyHtoA`, `cuMemcpyAtoH`, ..., and `cuMemcpy2D`/`cuMemcpy3D`
//! naming an array). An array's handle is the session's id of it; the
//! library keeps each array's descriptor to answer
//! `cuArray3DGetDescriptor` without a round trip.

use crate::state::{self, Res, ctx, put, run};
use pvgpu_frontend::{ArrayEnd, ArrayShape, Pitched, Stream};
use pvgpu_ring::cuda::api::{
    CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUDA_MEMCPY3D, CUarray,
    CUarray_format, CUmemorytype, CUmipmappedArray, CUstream,
};
use pvgpu_ring::{CuError, CuResult};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

/// What the library knows of an array.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArrayInfo {
    pub(crate) shape: ArrayShape,
    /// 0: an array; `n`: a mipmapped array of `n` levels.
    pub(crate) levels: u32,
    /// A level of this mipmapped array (it goes with it).
    level_of: Option<u64>,
}

static ARRAYS: Mutex<Option<HashMap<u64, ArrayInfo>>> = Mutex::new(None);

fn arrays() -> MutexGuard<'static, Option<HashMap<u64, ArrayInfo>>> {
    ARRAYS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The array (not mipmapped) behind a handle.
pub(crate) fn array(h: CUarray) -> Result<(u64, ArrayInfo), CuError> {
    let id = state::id(h);
    match arrays().as_ref().and_then(|m| m.get(&id)) {
        Some(a) if a.levels == 0 => Ok((id, *a)),
        _ => Err(CuError::INVALID_HANDLE),
    }
}

/// The mipmapped array behind a handle.
pub(crate) fn mipmapped(h: CUmipmappedArray) -> Result<(u64, ArrayInfo), CuError> {
    let id = state::id(h);
    match arrays().as_ref().and_then(|m| m.get(&id)) {
        Some(a) if a.levels > 0 => Ok((id, *a)),
        _ => Err(CuError::INVALID_HANDLE),
    }
}

fn remember(id: u64, info: ArrayInfo) {
    arrays().get_or_insert_with(HashMap::new).insert(id, info);
}

fn create(p: *mut CUarray, shape: ArrayShape, levels: u32) -> Res {
    if p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let id = state::client()?.array_create(ctx::current()?, &shape, levels).map_err(state::cu)?;
    remember(id, ArrayInfo { shape, levels, level_of: None });
    // SAFETY: non-null and writable per the API.
    unsafe { put(p, state::handle(id)) }
}

fn shape_3d(d: &CUDA_ARRAY3D_DESCRIPTOR) -> ArrayShape {
    ArrayShape {
        width: d.Width as u64,
        height: d.Height as u64,
        depth: d.Depth as u64,
        format: d.Format.0,
        channels: d.NumChannels,
        flags: d.Flags,
    }
}

/// `cuArrayCreate_v2`: a one- or two-dimensional array.
///
/// # Safety
/// `p` writable, `d` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArrayCreate_v2(p: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR) -> CuResult {
    run("cuArrayCreate_v2", || {
        // SAFETY: a readable descriptor per the API (null refused).
        let d = unsafe { d.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        let shape =
            ArrayShape { width: d.Width as u64, height: d.Height as u64, depth: 0, format: d.Format.0, channels: d.NumChannels, flags: 0 };
        create(p, shape, 0)
    })
}

/// `cuArray3DCreate_v2`: an array of up to three dimensions, layered or a
/// cubemap.
///
/// # Safety
/// `p` writable, `d` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArray3DCreate_v2(p: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR) -> CuResult {
    run("cuArray3DCreate_v2", || {
        // SAFETY: a readable descriptor per the API (null refused).
        let d = unsafe { d.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        create(p, shape_3d(d), 0)
    })
}

/// `cuMipmappedArrayCreate`.
///
/// # Safety
/// `p` writable, `d` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMipmappedArrayCreate(p: *mut CUmipmappedArray, d: *const CUDA_ARRAY3D_DESCRIPTOR, levels: u32) -> CuResult {
    run("cuMipmappedArrayCreate", || {
        // SAFETY: a readable descriptor per the API (null refused).
        let d = unsafe { d.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        if levels == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        create(p, shape_3d(d), levels)
    })
}

fn destroy(id: u64, mipmapped: bool) -> Res {
    state::client()?.array_destroy(id, mipmapped).map_err(state::cu)?;
    if let Some(m) = arrays().as_mut() {
        m.remove(&id);
        m.retain(|_, a| a.level_of != Some(id));
    }
    Ok(())
}

/// `cuArrayDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuArrayDestroy(h: CUarray) -> CuResult {
    run("cuArrayDestroy", || {
        let (id, a) = array(h)?;
        if a.level_of.is_some() {
            return Err(CuError::INVALID_HANDLE);
        }
        destroy(id, false)
    })
}

/// `cuMipmappedArrayDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMipmappedArrayDestroy(h: CUmipmappedArray) -> CuResult {
    run("cuMipmappedArrayDestroy", || destroy(mipmapped(h)?.0, true))
}

/// `cuMipmappedArrayGetLevel`.
///
/// # Safety
/// `p` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMipmappedArrayGetLevel(p: *mut CUarray, h: CUmipmappedArray, level: u32) -> CuResult {
    run("cuMipmappedArrayGetLevel", || {
        let (id, m) = mipmapped(h)?;
        if p.is_null() || level >= m.levels {
            return Err(CuError::INVALID_VALUE);
        }
        let l = state::client()?.mipmap_level(id, level).map_err(state::cu)?;
        let shape = m.shape.level(level);
        remember(l, ArrayInfo { shape, levels: 0, level_of: Some(id) });
        // SAFETY: non-null and writable per the API.
        unsafe { put(p, state::handle(l)) }
    })
}

/// `cuArrayGetDescriptor_v2`.
///
/// # Safety
/// `d` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArrayGetDescriptor_v2(d: *mut CUDA_ARRAY_DESCRIPTOR, h: CUarray) -> CuResult {
    run("cuArrayGetDescriptor_v2", || {
        let s = array(h)?.1.shape;
        let v = CUDA_ARRAY_DESCRIPTOR {
            Width: s.width as usize,
            Height: s.height as usize,
            Format: CUarray_format(s.format),
            NumChannels: s.channels,
        };
        // SAFETY: writable per the API (null refused).
        unsafe { put(d, v) }
    })
}

/// `cuArray3DGetDescriptor_v2`.
///
/// # Safety
/// `d` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArray3DGetDescriptor_v2(d: *mut CUDA_ARRAY3D_DESCRIPTOR, h: CUarray) -> CuResult {
    run("cuArray3DGetDescriptor_v2", || {
        let s = array(h)?.1.shape;
        // SAFETY: writable per the API (null refused).
        unsafe { put(d, descriptor_3d(&s)) }
    })
}

pub(crate) fn descriptor_3d(s: &ArrayShape) -> CUDA_ARRAY3D_DESCRIPTOR {
    CUDA_ARRAY3D_DESCRIPTOR {
        Width: s.width as usize,
        Height: s.height as usize,
        Depth: s.depth as usize,
        Format: CUarray_format(s.format),
        NumChannels: s.channels,
        Flags: s.flags,
    }
}

/// One side of a copy with an array, as a `CUDA_MEMCPY3D` names it.
struct Side {
    kind: CUmemorytype,
    host: *const c_void,
    device: u64,
    array: CUarray,
    x: usize,
    y: usize,
    z: usize,
    pitch: usize,
    height: usize,
}

impl Side {
    /// The source side of `c`.
    fn src(c: &CUDA_MEMCPY3D) -> Side {
        let (kind, host, device, array) = (c.srcMemoryType, c.srcHost, c.srcDevice, c.srcArray);
        Side { kind, host, device, array, x: c.srcXInBytes, y: c.srcY, z: c.srcZ, pitch: c.srcPitch, height: c.srcHeight }
    }

    /// The destination side of `c`.
    fn dst(c: &CUDA_MEMCPY3D) -> Side {
        let (kind, host, device, array) = (c.dstMemoryType, c.dstHost as *const c_void, c.dstDevice, c.dstArray);
        Side { kind, host, device, array, x: c.dstXInBytes, y: c.dstY, z: c.dstZ, pitch: c.dstPitch, height: c.dstHeight }
    }

    /// The end a copy of `width` bytes by `rows` rows names: an array, or
    /// the memory [`super::pitched::side`] resolves, offsets folded in.
    fn end(&self, width: usize, rows: usize) -> Result<ArrayEnd, CuError> {
        if self.kind == CU_MEMORYTYPE_ARRAY {
            let (id, _) = array(self.array)?;
            return Ok(ArrayEnd::Array { id, x: self.x as u64, y: self.y as u64, z: self.z as u64 });
        }
        let pitch = if self.pitch == 0 { width } else { self.pitch };
        let height = if self.height == 0 { rows } else { self.height };
        let off = (self.z * height + self.y) * pitch + self.x;
        Ok(match super::pitched::side(self.kind, self.host, self.device, off, pitch)? {
            Pitched::Device { ptr, pitch } => ArrayEnd::Device { ptr, pitch, rows: height as u64 },
            Pitched::Host { ptr, pitch } => ArrayEnd::Host { ptr, pitch, rows: height },
        })
    }
}

/// A `cuMemcpy3D` (or a `cuMemcpy2D` as one slice) with an array on either
/// side.
pub(crate) fn copy_3d(c: &CUDA_MEMCPY3D, s: Option<CUstream>) -> Res {
    copy(&Side::dst(c), &Side::src(c), c.WidthInBytes, c.Height, c.Depth, s)
}

/// A copy of `depth` slices of `height` rows of `width` bytes with an
/// array on at least one side.
fn copy(dst: &Side, src: &Side, width: usize, height: usize, depth: usize, s: Option<CUstream>) -> Res {
    let (d, sr) = (dst.end(width, height)?, src.end(width, height)?);
    let stream = s.map_or(Stream::DEFAULT, state::ordered);
    if s.is_none() {
        crate::callback::gate(Stream::DEFAULT);
    }
    let (w, h, z) = (width as u64, height.max(1) as u64, depth.max(1) as u64);
    // SAFETY: host sides hold the rows and slices the descriptor names,
    // per the API.
    unsafe { state::client()?.array_copy(d, sr, w, h, z, stream, s.is_some()) }.map_err(state::cu)
}

/// An array's bytes `[offset, offset+count)` as a rectangle: within one
/// row, or whole rows of one slice.
fn linear(h: CUarray, offset: usize, count: usize) -> Result<(Side, usize, usize), CuError> {
    let (_, a) = array(h)?;
    let row = a.shape.row_bytes().unwrap_or(0) as usize;
    if row == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let rows = a.shape.height.max(1) as usize;
    let (line, x) = (offset / row, offset % row);
    let (y, z) = (line % rows, line / rows);
    let side = |x, y, z| Side { kind: CU_MEMORYTYPE_ARRAY, host: std::ptr::null(), device: 0, array: h, x, y, z, pitch: 0, height: 0 };
    if x + count <= row {
        return Ok((side(x, y, z), count, 1));
    }
    if x == 0 && count % row == 0 && y + count / row <= rows {
        return Ok((side(0, y, z), row, count / row));
    }
    Err(CuError::INVALID_VALUE)
}

fn host_side(p: *const c_void) -> Side {
    Side { kind: CU_MEMORYTYPE_HOST, host: p, device: 0, array: std::ptr::null_mut(), x: 0, y: 0, z: 0, pitch: 0, height: 0 }
}

fn device_side(p: u64) -> Side {
    Side {
        kind: CU_MEMORYTYPE_DEVICE,
        host: std::ptr::null(),
        device: p,
        array: std::ptr::null_mut(),
        x: 0,
        y: 0,
        z: 0,
        pitch: 0,
        height: 0,
    }
}

fn to_array(dst: CUarray, off: usize, src: Side, count: usize, s: Option<CUstream>) -> Res {
    let (d, w, h) = linear(dst, off, count)?;
    copy(&d, &src, w, h, 1, s)
}

fn from_array(dst: Side, src: CUarray, off: usize, count: usize, s: Option<CUstream>) -> Res {
    let (sr, w, h) = linear(src, off, count)?;
    copy(&dst, &sr, w, h, 1, s)
}

/// `cuMemcpyHtoA_v2`.
///
/// # Safety
/// `src` readable for `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoA_v2(dst: CUarray, off: usize, src: *const c_void, count: usize) -> CuResult {
    run("cuMemcpyHtoA_v2", || to_array(dst, off, host_side(src), count, None))
}

/// `cuMemcpyHtoAAsync_v2`.
///
/// # Safety
/// As `cuMemcpyHtoA_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoAAsync_v2(dst: CUarray, off: usize, src: *const c_void, count: usize, s: CUstream) -> CuResult {
    run("cuMemcpyHtoAAsync_v2", || to_array(dst, off, host_side(src), count, Some(s)))
}

/// `cuMemcpyDtoA_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoA_v2(dst: CUarray, off: usize, src: u64, count: usize) -> CuResult {
    run("cuMemcpyDtoA_v2", || to_array(dst, off, device_side(src), count, None))
}

/// `cuMemcpyAtoH_v2`.
///
/// # Safety
/// `dst` writable for `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyAtoH_v2(dst: *mut c_void, src: CUarray, off: usize, count: usize) -> CuResult {
    run("cuMemcpyAtoH_v2", || from_array(host_side(dst), src, off, count, None))
}

/// `cuMemcpyAtoHAsync_v2`.
///
/// # Safety
/// As `cuMemcpyAtoH_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyAtoHAsync_v2(dst: *mut c_void, src: CUarray, off: usize, count: usize, s: CUstream) -> CuResult {
    run("cuMemcpyAtoHAsync_v2", || from_array(host_side(dst), src, off, count, Some(s)))
}

/// `cuMemcpyAtoD_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyAtoD_v2(dst: u64, src: CUarray, off: usize, count: usize) -> CuResult {
    run("cuMemcpyAtoD_v2", || from_array(device_side(dst), src, off, count, None))
}

/// `cuMemcpyAtoA_v2`: the same rectangle of both arrays' bytes.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyAtoA_v2(dst: CUarray, dst_off: usize, src: CUarray, src_off: usize, count: usize) -> CuResult {
    run("cuMemcpyAtoA_v2", || {
        let (d, w, h) = linear(dst, dst_off, count)?;
        let (sr, sw, sh) = linear(src, src_off, count)?;
        if (w, h) != (sw, sh) {
            return Err(CuError::INVALID_VALUE);
        }
        copy(&d, &sr, w, h, 1, None)
    })
}
