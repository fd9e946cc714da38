//! CUDA arrays, copies with an array side, texture and surface objects on
//! the GPU. Handles cross the executor boundary as `u64` (the driver's
//! pointer-sized handles and its 64-bit object values).

use super::driver::{entry, ok};
use super::{CudaContext, CudaStream, raw_stream};
use crate::exec::{ArrayCopy, ArrayShape, CopySide, CuRes, Resource, Sampling};
use pvgpu_ring::cuda::api::*;
use std::ffi::c_void;

fn descriptor(s: &ArrayShape) -> CUDA_ARRAY3D_DESCRIPTOR {
    CUDA_ARRAY3D_DESCRIPTOR {
        Width: s.width as usize,
        Height: s.height as usize,
        Depth: s.depth as usize,
        Format: CUarray_format(s.format),
        NumChannels: s.channels,
        Flags: s.flags,
    }
}

/// Fills one side of a `CUDA_MEMCPY3D`; packed host rows are `width`
/// bytes apart and slices `height` rows apart.
macro_rules! side {
    ($p:ident, $side:expr, $w:expr, $h:expr,
     $mt:ident, $host:ident, $dev:ident, $arr:ident, $x:ident, $y:ident, $z:ident, $pitch:ident, $height:ident) => {
        match $side {
            CopySide::Device { ptr, pitch, rows } => {
                $p.$mt = CU_MEMORYTYPE_DEVICE;
                ($p.$dev, $p.$pitch, $p.$height) = (ptr, pitch as usize, rows as usize);
            }
            CopySide::Host(ptr) => {
                $p.$mt = CU_MEMORYTYPE_HOST;
                ($p.$host, $p.$pitch, $p.$height) = (ptr as _, $w as usize, $h as usize);
            }
            CopySide::Array { raw, x, y, z } => {
                $p.$mt = CU_MEMORYTYPE_ARRAY;
                $p.$arr = raw as usize as CUarray;
                ($p.$x, $p.$y, $p.$z) = (x as usize, y as usize, z as usize);
            }
        }
    };
}

fn resource_desc(res: &Resource) -> CUDA_RESOURCE_DESC {
    // SAFETY: CUDA_RESOURCE_DESC is integers, handles and a union of them;
    // zero is a valid value of each.
    let mut d: CUDA_RESOURCE_DESC = unsafe { std::mem::zeroed() };
    match *res {
        Resource::Array(raw) => {
            d.resType = CU_RESOURCE_TYPE_ARRAY;
            d.res.array = CUDA_RESOURCE_DESC_st_res_array { hArray: raw as usize as CUarray };
        }
        Resource::Mipmapped(raw) => {
            d.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
            d.res.mipmap = CUDA_RESOURCE_DESC_st_res_mipmap { hMipmappedArray: raw as usize as CUmipmappedArray };
        }
        Resource::Linear { ptr, format, channels, bytes } => {
            d.resType = CU_RESOURCE_TYPE_LINEAR;
            d.res.linear = CUDA_RESOURCE_DESC_st_res_linear {
                devPtr: ptr,
                format: CUarray_format(format),
                numChannels: channels,
                sizeInBytes: bytes as usize,
            };
        }
        Resource::Pitch2D { ptr, format, channels, width, height, pitch } => {
            d.resType = CU_RESOURCE_TYPE_PITCH2D;
            d.res.pitch2D = CUDA_RESOURCE_DESC_st_res_pitch2D {
                devPtr: ptr,
                format: CUarray_format(format),
                numChannels: channels,
                width: width as usize,
                height: height as usize,
                pitchInBytes: pitch as usize,
            };
        }
    }
    d
}

fn texture_desc(s: &Sampling) -> CUDA_TEXTURE_DESC {
    let w = s.tex;
    let f = f32::from_bits;
    CUDA_TEXTURE_DESC {
        addressMode: [CUaddress_mode(w[0]), CUaddress_mode(w[1]), CUaddress_mode(w[2])],
        filterMode: CUfilter_mode(w[3]),
        flags: w[4],
        maxAnisotropy: w[5],
        mipmapFilterMode: CUfilter_mode(w[6]),
        mipmapLevelBias: f(w[7]),
        minMipmapLevelClamp: f(w[8]),
        maxMipmapLevelClamp: f(w[9]),
        borderColor: [f(w[10]), f(w[11]), f(w[12]), 0.0],
        reserved: [0; 12],
    }
}

impl CudaContext {
    pub(super) fn array_new(&mut self, shape: &ArrayShape, levels: u32) -> CuRes<u64> {
        let d = descriptor(shape);
        let mut h: *mut c_void = std::ptr::null_mut();
        if levels == 0 {
            // SAFETY: valid out-pointer and descriptor; the driver checks
            // the shape against the device.
            ok(unsafe { entry(self.drv.cuArray3DCreate_v2)?(&mut h, &d) })?;
        } else {
            // SAFETY: as above; the level count is checked by the driver.
            ok(unsafe { entry(self.drv.cuMipmappedArrayCreate)?(&mut h, &d, levels) })?;
        }
        Ok(h as usize as u64)
    }

    pub(super) fn array_free(&mut self, raw: u64, mipmapped: bool) -> CuRes<()> {
        let h = raw as usize as *mut c_void;
        if mipmapped {
            // SAFETY: a mipmapped array of this session, destroyed once.
            ok(unsafe { entry(self.drv.cuMipmappedArrayDestroy)?(h) })
        } else {
            // SAFETY: an array of this session (not a mipmap level),
            // destroyed once.
            ok(unsafe { entry(self.drv.cuArrayDestroy)?(h) })
        }
    }

    pub(super) fn level(&mut self, raw: u64, level: u32) -> CuRes<u64> {
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; a mipmapped array of this session; the
        // driver checks the level.
        ok(unsafe { entry(self.drv.cuMipmappedArrayGetLevel)?(&mut h, raw as usize as *mut c_void, level) })?;
        Ok(h as usize as u64)
    }

    /// # Safety
    /// As [`crate::exec::ExecContext::array_copy`].
    pub(super) unsafe fn copy_array(&mut self, c: &ArrayCopy, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        // SAFETY: CUDA_MEMCPY3D is integers, pointers and a transparent
        // memory-type number; zero is a valid value of each.
        let mut p: CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
        let (w, h) = (c.width, c.height);
        side!(p, c.src, w, h, srcMemoryType, srcHost, srcDevice, srcArray, srcXInBytes, srcY, srcZ, srcPitch, srcHeight);
        side!(p, c.dst, w, h, dstMemoryType, dstHost, dstDevice, dstArray, dstXInBytes, dstY, dstZ, dstPitch, dstHeight);
        (p.WidthInBytes, p.Height, p.Depth) = (w as usize, h as usize, c.depth as usize);
        let s = raw_stream(stream) as CUstream;
        // SAFETY: the caller's contract for host sides; arrays and device
        // ranges were checked by the session; the stream is this context's.
        ok(unsafe { entry(self.drv.cuMemcpy3DAsync_v2)?(&p, s) })?;
        if wait {
            // SAFETY: the stream (or the default stream) of this context.
            ok(unsafe { entry(self.drv.cuStreamSynchronize)?(s) })?;
        }
        Ok(())
    }

    pub(super) fn object_new(&mut self, res: &Resource, sampling: Option<&Sampling>) -> CuRes<u64> {
        let r = resource_desc(res);
        let mut o = 0u64;
        match sampling {
            Some(s) => {
                let t = texture_desc(s);
                let v = s.view.map(|v| CUDA_RESOURCE_VIEW_DESC {
                    format: CUresourceViewFormat(v.format),
                    width: v.extent[0] as usize,
                    height: v.extent[1] as usize,
                    depth: v.extent[2] as usize,
                    firstMipmapLevel: v.levels[0],
                    lastMipmapLevel: v.levels[1],
                    firstLayer: v.layers[0],
                    lastLayer: v.layers[1],
                    reserved: [0; 16],
                });
                let vp = v.as_ref().map_or(std::ptr::null(), |v| v as *const _);
                // SAFETY: valid out-pointer and descriptors; the resource's
                // array or memory is the session's (checked).
                ok(unsafe { entry(self.drv.cuTexObjectCreate)?(&mut o, &r, &t, vp) })?;
            }
            // SAFETY: as above.
            None => ok(unsafe { entry(self.drv.cuSurfObjectCreate)?(&mut o, &r) })?,
        }
        Ok(o)
    }

    pub(super) fn object_free(&mut self, object: u64, surface: bool) -> CuRes<()> {
        if surface {
            // SAFETY: a surface object of this session, destroyed once.
            ok(unsafe { entry(self.drv.cuSurfObjectDestroy)?(object) })
        } else {
            // SAFETY: a texture object of this session, destroyed once.
            ok(unsafe { entry(self.drv.cuTexObjectDestroy)?(object) })
        }
    }
}
