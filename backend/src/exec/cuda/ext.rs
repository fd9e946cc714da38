//! Driver calls whose arguments are structures or enums: launches with
//! attributes, cluster occupancy, 2D copies and
//! memsets, tensor maps, virtual memory management (in `vmm`). Those that
//! take CUDA enums go through [`super::driver`], typed as cuda.h declares
//! them with enums as transparent newtypes (cudarc's bindings take Rust
//! enums, which cannot hold numbers from a guest without undefined
//! behaviour); the session has already checked every value that names
//! memory, and the driver checks the rest.

use super::driver::{entry, ok};
use super::{CudaContext, CudaFunction, CudaStream, ck, raw_stream};
use crate::exec::{CuRes, LaunchDims, Rect};
use cudarc::driver::sys;
use pvgpu_ring::cuda::api::{
    CUlaunchAttribute, CUlaunchConfig, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use pvgpu_ring::proto::{LaunchAttr, TensorMapEncode};
use std::ffi::{c_int, c_void};
use std::ptr;

/// A launch configuration the driver reads; `attrs` must outlive its use.
fn config(d: &LaunchDims, stream: Option<CudaStream>, attrs: &mut [CUlaunchAttribute]) -> CUlaunchConfig {
    CUlaunchConfig {
        gridDimX: d.grid[0],
        gridDimY: d.grid[1],
        gridDimZ: d.grid[2],
        blockDimX: d.block[0],
        blockDimY: d.block[1],
        blockDimZ: d.block[2],
        sharedMemBytes: d.shared_mem,
        hStream: raw_stream(stream).cast(),
        attrs: if attrs.is_empty() { ptr::null_mut() } else { attrs.as_mut_ptr() },
        numAttrs: attrs.len() as u32,
    }
}

/// The attributes as the driver lays them out: the id, then the value's
/// 64 bytes as the guest sent them (the session allowed the id).
fn raw_attrs(attrs: &[LaunchAttr]) -> Vec<CUlaunchAttribute> {
    attrs
        .iter()
        .map(|a| {
            let mut raw = [0u8; 72];
            raw[..4].copy_from_slice(&a.id.get().to_le_bytes());
            raw[8..].copy_from_slice(&a.value);
            // SAFETY: CUlaunchAttribute is 72 plain bytes (an id, padding
            // and a union of plain values), any of which is valid.
            unsafe { std::mem::transmute::<[u8; 72], CUlaunchAttribute>(raw) }
        })
        .collect()
}

impl CudaContext {
    pub(super) fn launch_with(
        &mut self,
        f: CudaFunction,
        d: LaunchDims,
        args: &mut [*mut c_void],
        attrs: &[LaunchAttr],
        stream: Option<CudaStream>,
    ) -> CuRes<()> {
        let mut raw = raw_attrs(attrs);
        let cfg = config(&d, stream, &mut raw);
        let launch = entry(self.drv.cuLaunchKernelEx)?;
        // SAFETY: one pointer per kernel parameter (the caller's contract),
        // a configuration whose attributes live until the call returns.
        ok(unsafe { launch(&cfg, f.0.cast(), args.as_mut_ptr(), ptr::null_mut()) })
    }

    pub(super) fn clusters(&mut self, f: CudaFunction, d: LaunchDims, attrs: &[LaunchAttr], kind: u32) -> CuRes<i32> {
        let mut raw = raw_attrs(attrs);
        let cfg = config(&d, None, &mut raw);
        let mut n = 0;
        let call = entry(if kind == 0 { self.drv.cuOccupancyMaxActiveClusters } else { self.drv.cuOccupancyMaxPotentialClusterSize })?;
        // SAFETY: valid out-pointer, live function, configuration as above.
        ok(unsafe { call(&mut n, f.0.cast(), &cfg) })?;
        Ok(n)
    }

    pub(super) fn alloc_async(&mut self, size: u64, stream: Option<CudaStream>) -> CuRes<u64> {
        if let Some(placed) = self.placed.as_mut()
            && !capturing(stream)?
        {
            return placed.alloc(size);
        }
        let mut p = 0;
        // SAFETY: valid out-pointer; the stream belongs to this context.
        ck(unsafe { sys::cuMemAllocAsync(&mut p, size as usize, raw_stream(stream)) })?;
        Ok(p)
    }

    pub(super) fn free_async(&mut self, dptr: u64, stream: Option<CudaStream>) -> CuRes<()> {
        if let Some(placed) = self.placed.as_mut().filter(|p| p.owns(dptr))
            && !capturing(stream)?
        {
            return placed.free_async(dptr, stream);
        }
        // SAFETY: the session frees only addresses this context allocated.
        ck(unsafe { sys::cuMemFreeAsync(dptr, raw_stream(stream)) })
    }

    pub(super) fn memset2d(&mut self, r: Rect, value: u32, elem: u32, s: Option<CudaStream>) -> CuRes<()> {
        let (dptr, pitch, w, h, st) = (r.ptr, r.pitch as usize, r.width as usize, r.height as usize, raw_stream(s));
        // SAFETY: the session checked the pitched range lies in one of this
        // session's allocations; the stream belongs to this context.
        ck(unsafe {
            match elem {
                1 => sys::cuMemsetD2D8Async(dptr, pitch, value as u8, w, h, st),
                2 => sys::cuMemsetD2D16Async(dptr, pitch, value as u16, w, h, st),
                _ => sys::cuMemsetD2D32Async(dptr, pitch, value, w, h, st),
            }
        })
    }

    /// # Safety
    /// As `ExecContext::copy_2d`.
    pub(super) unsafe fn copy2d(&mut self, c: crate::exec::Copy2D, w: u64, h: u64, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        use crate::exec::Copy2D;
        use sys::CUmemorytype::{CU_MEMORYTYPE_DEVICE as DEV, CU_MEMORYTYPE_HOST as HOST};
        // Every field set explicitly: the memory types are Rust enums, for
        // which zero is no value.
        let mut p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: DEV,
            srcHost: ptr::null(),
            srcDevice: 0,
            srcArray: ptr::null_mut(),
            srcPitch: 0,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: DEV,
            dstHost: ptr::null_mut(),
            dstDevice: 0,
            dstArray: ptr::null_mut(),
            dstPitch: 0,
            WidthInBytes: w as usize,
            Height: h as usize,
        };
        match c {
            Copy2D::HtoD { dst, dst_pitch, src } => {
                (p.srcMemoryType, p.srcHost, p.srcPitch) = (HOST, src.cast(), w as usize);
                (p.dstDevice, p.dstPitch) = (dst, dst_pitch as usize);
            }
            Copy2D::DtoH { dst, src, src_pitch } => {
                (p.srcDevice, p.srcPitch) = (src, src_pitch as usize);
                (p.dstMemoryType, p.dstHost, p.dstPitch) = (HOST, dst.cast(), w as usize);
            }
            Copy2D::DtoD { dst, dst_pitch, src, src_pitch } => {
                (p.srcDevice, p.srcPitch) = (src, src_pitch as usize);
                (p.dstDevice, p.dstPitch) = (dst, dst_pitch as usize);
            }
        }
        // SAFETY: the caller's contract for host sides; device ranges were
        // checked; the stream belongs to this context.
        ck(unsafe { sys::cuMemcpy2DAsync_v2(&p, raw_stream(stream)) })?;
        if wait {
            // SAFETY: the stream (or the default stream) of this context.
            ck(unsafe { sys::cuStreamSynchronize(raw_stream(stream)) })?;
        }
        Ok(())
    }

    pub(super) fn tensor_map(&mut self, r: &TensorMapEncode) -> CuRes<[u8; 128]> {
        // SAFETY: CUtensorMap is 128 opaque bytes; zero is a valid value.
        let mut out: CUtensorMap = unsafe { std::mem::zeroed() };
        let t = Tensor::of(r);
        if r.kind.get() == 0 {
            self.tiled(&mut out, &t, r)?
        } else {
            self.im2col(&mut out, &t, r)?
        }
        // SAFETY: CUtensorMap is 128 plain bytes.
        Ok(unsafe { std::mem::transmute::<CUtensorMap, [u8; 128]>(out) })
    }

    fn tiled(&mut self, out: &mut CUtensorMap, t: &Tensor, r: &TensorMapEncode) -> CuRes<()> {
        let boxes: Vec<u32> = r.box_dim.iter().map(|v| v.get()).collect();
        let tiled = entry(self.drv.cuTensorMapEncodeTiled)?;
        // SAFETY: arrays of the rank's length (at most 5, checked at decode)
        // and an output aligned as CUtensorMap; enum values are passed as
        // the guest sent them and the driver validates them; the address
        // was checked to lie, with the whole tensor, in this session's
        // memory.
        ok(unsafe {
            tiled(
                out,
                t.dtype,
                t.rank,
                t.addr,
                t.dims.as_ptr(),
                t.strides.as_ptr(),
                boxes.as_ptr(),
                t.elem.as_ptr(),
                t.interleave,
                t.swizzle,
                t.l2,
                t.oob,
            )
        })
    }

    fn im2col(&mut self, out: &mut CUtensorMap, t: &Tensor, r: &TensorMapEncode) -> CuRes<()> {
        let lower: Vec<c_int> = r.pixel_box_lower.iter().map(|v| v.get()).collect();
        let upper: Vec<c_int> = r.pixel_box_upper.iter().map(|v| v.get()).collect();
        let (channels, pixels) = (r.channels_per_pixel.get(), r.pixels_per_column.get());
        let im2col = entry(self.drv.cuTensorMapEncodeIm2col)?;
        // SAFETY: as for `tiled`, with corner arrays of rank - 2 entries.
        ok(unsafe {
            im2col(
                out,
                t.dtype,
                t.rank,
                t.addr,
                t.dims.as_ptr(),
                t.strides.as_ptr(),
                lower.as_ptr(),
                upper.as_ptr(),
                channels,
                pixels,
                t.elem.as_ptr(),
                t.interleave,
                t.swizzle,
                t.l2,
                t.oob,
            )
        })
    }
}

/// What both kinds of tensor map take.
struct Tensor {
    dims: Vec<u64>,
    strides: Vec<u64>,
    elem: Vec<u32>,
    addr: *mut c_void,
    dtype: CUtensorMapDataType,
    rank: u32,
    interleave: CUtensorMapInterleave,
    swizzle: CUtensorMapSwizzle,
    l2: CUtensorMapL2promotion,
    oob: CUtensorMapFloatOOBfill,
}

impl Tensor {
    fn of(r: &TensorMapEncode) -> Tensor {
        Tensor {
            dims: r.global_dim.iter().map(|v| v.get()).collect(),
            strides: r.global_strides.iter().map(|v| v.get()).collect(),
            elem: r.element_strides.iter().map(|v| v.get()).collect(),
            addr: r.global_address.get() as usize as *mut c_void,
            dtype: CUtensorMapDataType(r.data_type.get()),
            rank: r.rank.get(),
            interleave: CUtensorMapInterleave(r.interleave.get()),
            swizzle: CUtensorMapSwizzle(r.swizzle.get()),
            l2: CUtensorMapL2promotion(r.l2_promotion.get()),
            oob: CUtensorMapFloatOOBfill(r.oob_fill.get()),
        }
    }
}

/// Whether `stream` is being captured into a graph.
pub(super) fn capturing(stream: Option<CudaStream>) -> CuRes<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: valid out-pointer; the stream belongs to the current context.
    ck(unsafe { sys::cuStreamIsCapturing(raw_stream(stream), &mut status) })?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}
