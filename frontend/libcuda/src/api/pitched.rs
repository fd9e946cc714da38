//! Pitched copies (`cuMemcpy2D`, `cuMemcpy3D` and their `Async` forms) and
//! memsets (`cuMemsetD2D*`). Host, device and unified sides are
//! supported here; a copy naming a CUDA array goes to [`super::array`]. A
//! 3D copy without arrays is a 2D copy per depth slice.

use super::array;
use crate::state::{self, Res, objects, run};
use pvgpu_frontend::{Pitched, Stream};
use pvgpu_ring::cuda::api::{
    CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_UNIFIED, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUmemorytype,
    CUstream,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::c_void;

/// One side of a copy: its memory type, host and device pointers, and the
/// byte offset of its first byte from them. Managed memory named as host
/// memory is the device's (its pages in the program were flushed when the
/// copy was submitted).
pub(crate) fn side(kind: CUmemorytype, host: *const c_void, device: u64, offset: usize, pitch: usize) -> Result<Pitched, CuError> {
    let unified_is_device = |p: u64| objects().device_range(p, 1).is_some();
    let managed = |p: usize| crate::managed::contains(p as u64, 1);
    match kind {
        CU_MEMORYTYPE_DEVICE => Ok(Pitched::Device { ptr: device + offset as u64, pitch: pitch as u64 }),
        CU_MEMORYTYPE_HOST if managed(host as usize + offset) => {
            Ok(Pitched::Device { ptr: (host as usize + offset) as u64, pitch: pitch as u64 })
        }
        CU_MEMORYTYPE_HOST => Ok(Pitched::Host { ptr: (host as usize + offset) as *const u8, pitch }),
        CU_MEMORYTYPE_UNIFIED if unified_is_device(device) => Ok(Pitched::Device { ptr: device + offset as u64, pitch: pitch as u64 }),
        CU_MEMORYTYPE_UNIFIED => Ok(Pitched::Host { ptr: (device as usize + offset) as *const u8, pitch }),
        // CUDA arrays: copies go through `array::copy`; graph nodes of
        // arrays are not supported.
        _ => Err(CuError::NOT_SUPPORTED),
    }
}

/// A 2D copy as the one slice of a 3D copy.
fn as_3d(c: &CUDA_MEMCPY2D) -> CUDA_MEMCPY3D {
    // SAFETY: CUDA_MEMCPY3D is integers, pointers and transparent
    // memory-type numbers; zero is a valid value of each.
    let mut d: CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
    (d.srcMemoryType, d.srcHost, d.srcDevice, d.srcArray) = (c.srcMemoryType, c.srcHost, c.srcDevice, c.srcArray);
    (d.srcXInBytes, d.srcY, d.srcPitch) = (c.srcXInBytes, c.srcY, c.srcPitch);
    (d.dstMemoryType, d.dstHost, d.dstDevice, d.dstArray) = (c.dstMemoryType, c.dstHost, c.dstDevice, c.dstArray);
    (d.dstXInBytes, d.dstY, d.dstPitch) = (c.dstXInBytes, c.dstY, c.dstPitch);
    (d.WidthInBytes, d.Height, d.Depth) = (c.WidthInBytes, c.Height, 1);
    d
}

fn copy_2d(p: *const CUDA_MEMCPY2D, s: Option<CUstream>) -> Res {
    if p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: a readable CUDA_MEMCPY2D, per the API.
    let c = unsafe { &*p };
    if c.srcMemoryType == CU_MEMORYTYPE_ARRAY || c.dstMemoryType == CU_MEMORYTYPE_ARRAY {
        return array::copy_3d(&as_3d(c), s);
    }
    let src = side(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcY * c.srcPitch + c.srcXInBytes, c.srcPitch)?;
    let dst = side(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstY * c.dstPitch + c.dstXInBytes, c.dstPitch)?;
    let stream = s.map_or(Stream::DEFAULT, state::ordered);
    if s.is_none() {
        crate::callback::gate(Stream::DEFAULT);
    }
    // SAFETY: host sides hold the rows the descriptor names, per the API.
    unsafe { state::client()?.memcpy_2d(dst, src, c.WidthInBytes, c.Height, stream, s.is_some()) }.map_err(state::cu)
}

/// `cuMemcpy2D_v2`.
///
/// # Safety
/// `p` must point to a `CUDA_MEMCPY2D` whose host sides are valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy2D_v2(p: *const CUDA_MEMCPY2D) -> CuResult {
    run("cuMemcpy2D_v2", || copy_2d(p, None))
}

/// `cuMemcpy2DUnaligned_v2`: as `cuMemcpy2D_v2`.
///
/// # Safety
/// As `cuMemcpy2D_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy2DUnaligned_v2(p: *const CUDA_MEMCPY2D) -> CuResult {
    run("cuMemcpy2DUnaligned_v2", || copy_2d(p, None))
}

/// `cuMemcpy2DAsync_v2`.
///
/// # Safety
/// As `cuMemcpy2D_v2`; page-locked host sides stay valid until the stream
/// is synchronised.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy2DAsync_v2(p: *const CUDA_MEMCPY2D, s: CUstream) -> CuResult {
    run("cuMemcpy2DAsync_v2", || copy_2d(p, Some(s)))
}

fn copy_3d(p: *const CUDA_MEMCPY3D, s: Option<CUstream>) -> Res {
    if p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: a readable CUDA_MEMCPY3D, per the API.
    let c = unsafe { &*p };
    if c.srcLOD != 0 || c.dstLOD != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    if c.srcMemoryType == CU_MEMORYTYPE_ARRAY || c.dstMemoryType == CU_MEMORYTYPE_ARRAY {
        return array::copy_3d(c, s);
    }
    let stream = s.map_or(Stream::DEFAULT, state::ordered);
    let client = state::client()?;
    for z in 0..c.Depth {
        let src_off = (c.srcZ + z) * c.srcPitch * c.srcHeight + c.srcY * c.srcPitch + c.srcXInBytes;
        let dst_off = (c.dstZ + z) * c.dstPitch * c.dstHeight + c.dstY * c.dstPitch + c.dstXInBytes;
        let src = side(c.srcMemoryType, c.srcHost, c.srcDevice, src_off, c.srcPitch)?;
        let dst = side(c.dstMemoryType, c.dstHost, c.dstDevice, dst_off, c.dstPitch)?;
        // SAFETY: host sides hold the slices the descriptor names.
        unsafe { client.memcpy_2d(dst, src, c.WidthInBytes, c.Height, stream, s.is_some()) }.map_err(state::cu)?;
    }
    Ok(())
}

/// `cuMemcpy3D_v2`.
///
/// # Safety
/// `p` must point to a `CUDA_MEMCPY3D` whose host sides are valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy3D_v2(p: *const CUDA_MEMCPY3D) -> CuResult {
    run("cuMemcpy3D_v2", || copy_3d(p, None))
}

/// `cuMemcpy3DAsync_v2`.
///
/// # Safety
/// As `cuMemcpy3D_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy3DAsync_v2(p: *const CUDA_MEMCPY3D, s: CUstream) -> CuResult {
    run("cuMemcpy3DAsync_v2", || copy_3d(p, Some(s)))
}

fn memset_2d(dptr: u64, pitch: usize, value: u32, elem: u32, w: usize, h: usize, s: Stream) -> Res {
    crate::callback::gate(s);
    state::client()?.memset_2d(dptr, pitch as u64, value, elem, w as u64, h as u64, s).map_err(state::cu)
}

/// `cuMemsetD2D8_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD2D8_v2(dptr: u64, pitch: usize, v: u8, w: usize, h: usize) -> CuResult {
    run("cuMemsetD2D8_v2", || memset_2d(dptr, pitch, v as u32, 1, w, h, Stream::DEFAULT))
}

/// `cuMemsetD2D16_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD2D16_v2(dptr: u64, pitch: usize, v: u16, w: usize, h: usize) -> CuResult {
    run("cuMemsetD2D16_v2", || memset_2d(dptr, pitch, v as u32, 2, w, h, Stream::DEFAULT))
}

/// `cuMemsetD2D32_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD2D32_v2(dptr: u64, pitch: usize, v: u32, w: usize, h: usize) -> CuResult {
    run("cuMemsetD2D32_v2", || memset_2d(dptr, pitch, v, 4, w, h, Stream::DEFAULT))
}

/// `cuMemsetD2D8Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD2D8Async(dptr: u64, pitch: usize, v: u8, w: usize, h: usize, s: *mut c_void) -> CuResult {
    run("cuMemsetD2D8Async", || memset_2d(dptr, pitch, v as u32, 1, w, h, state::stream(s)))
}

/// `cuMemsetD2D16Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD2D16Async(dptr: u64, pitch: usize, v: u16, w: usize, h: usize, s: *mut c_void) -> CuResult {
    run("cuMemsetD2D16Async", || memset_2d(dptr, pitch, v as u32, 2, w, h, state::stream(s)))
}

/// `cuMemsetD2D32Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD2D32Async(dptr: u64, pitch: usize, v: u32, w: usize, h: usize, s: *mut c_void) -> CuResult {
    run("cuMemsetD2D32Async", || memset_2d(dptr, pitch, v, 4, w, h, state::stream(s)))
}
