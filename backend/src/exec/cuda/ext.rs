//! Driver calls whose arguments are structures or enums: launches with
//! attributes, cluster occupancy, the default memory pool, 2D copies and
//! memsets, tensor maps, virtual memory management (in `vmm`). Each goes through a function pointer typed with
//! plain integers, because cudarc's bindings take Rust enums, which cannot
//! hold numbers from a guest without undefined behaviour; the session has
//! already checked every value that names memory, and the driver checks
//! the rest.

use super::{CudaContext, CudaFunction, CudaStream, ck, ck_raw, raw_stream};
use crate::exec::{CuRes, LaunchDims, Rect};
use cudarc::driver::sys;
use pvgpu_ring::proto::{LaunchAttr, TensorMapEncode};
use std::ffi::{c_int, c_void};
use std::ptr;

/// `CUlaunchAttribute`, with its id as a plain integer.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(super) struct RawAttr {
    id: u32,
    pad: [u8; 4],
    value: [u8; 64],
}

/// `CUlaunchConfig`, with attributes as [`RawAttr`].
#[repr(C)]
pub(super) struct RawConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: sys::CUstream,
    attrs: *mut RawAttr,
    num_attrs: u32,
}

/// `CUtensorMap`.
#[repr(C, align(128))]
pub(super) struct RawTensorMap([u8; 128]);

/// The driver entry points this file calls, resolved at start-up.
#[derive(Clone, Copy)]
pub(super) struct ExtFns {
    pub launch_ex: unsafe extern "C" fn(*const RawConfig, sys::CUfunction, *mut *mut c_void, *mut *mut c_void) -> u32,
    pub max_active_clusters: unsafe extern "C" fn(*mut c_int, sys::CUfunction, *const RawConfig) -> u32,
    pub max_cluster_size: unsafe extern "C" fn(*mut c_int, sys::CUfunction, *const RawConfig) -> u32,
    pub pool_get: unsafe extern "C" fn(sys::CUmemoryPool, c_int, *mut c_void) -> u32,
    pub pool_set: unsafe extern "C" fn(sys::CUmemoryPool, c_int, *mut c_void) -> u32,
    pub granularity: unsafe extern "C" fn(*mut usize, *const super::vmm::RawProp, u32) -> u32,
    pub address_reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> u32,
    pub address_free: unsafe extern "C" fn(u64, usize) -> u32,
    pub create: unsafe extern "C" fn(*mut u64, usize, *const super::vmm::RawProp, u64) -> u32,
    pub release: unsafe extern "C" fn(u64) -> u32,
    pub map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> u32,
    pub unmap: unsafe extern "C" fn(u64, usize) -> u32,
    pub set_access: unsafe extern "C" fn(u64, usize, *const super::vmm::RawAccess, usize) -> u32,
    #[allow(clippy::type_complexity)]
    pub tiled: unsafe extern "C" fn(
        *mut RawTensorMap,
        u32,
        u32,
        *mut c_void,
        *const u64,
        *const u64,
        *const u32,
        *const u32,
        u32,
        u32,
        u32,
        u32,
    ) -> u32,
    #[allow(clippy::type_complexity)]
    pub im2col: unsafe extern "C" fn(
        *mut RawTensorMap,
        u32,
        u32,
        *mut c_void,
        *const u64,
        *const u64,
        *const c_int,
        *const c_int,
        u32,
        u32,
        *const u32,
        u32,
        u32,
        u32,
        u32,
    ) -> u32,
}

impl ExtFns {
    /// Resolves every entry point.
    ///
    /// # Safety
    /// The driver library must be loaded.
    pub(super) unsafe fn resolve() -> Result<Self, super::CudaInitError> {
        // SAFETY: each type is the symbol's C signature with enums as u32
        // and structures as layout-identical ones; the caller loaded the
        // library.
        unsafe {
            Ok(ExtFns {
                launch_ex: super::symbol("cuLaunchKernelEx")?,
                max_active_clusters: super::symbol("cuOccupancyMaxActiveClusters")?,
                max_cluster_size: super::symbol("cuOccupancyMaxPotentialClusterSize")?,
                pool_get: super::symbol("cuMemPoolGetAttribute")?,
                pool_set: super::symbol("cuMemPoolSetAttribute")?,
                granularity: super::symbol("cuMemGetAllocationGranularity")?,
                address_reserve: super::symbol("cuMemAddressReserve")?,
                address_free: super::symbol("cuMemAddressFree")?,
                create: super::symbol("cuMemCreate")?,
                release: super::symbol("cuMemRelease")?,
                map: super::symbol("cuMemMap")?,
                unmap: super::symbol("cuMemUnmap")?,
                set_access: super::symbol("cuMemSetAccess")?,
                tiled: super::symbol("cuTensorMapEncodeTiled")?,
                im2col: super::symbol("cuTensorMapEncodeIm2col")?,
            })
        }
    }
}

/// A launch configuration the driver reads; `attrs` must outlive its use.
fn config(d: &LaunchDims, stream: Option<CudaStream>, attrs: &mut [RawAttr]) -> RawConfig {
    RawConfig {
        grid: d.grid,
        block: d.block,
        shared_mem: d.shared_mem,
        stream: raw_stream(stream),
        attrs: if attrs.is_empty() { ptr::null_mut() } else { attrs.as_mut_ptr() },
        num_attrs: attrs.len() as u32,
    }
}

fn raw_attrs(attrs: &[LaunchAttr]) -> Vec<RawAttr> {
    attrs.iter().map(|a| RawAttr { id: a.id.get(), pad: [0; 4], value: a.value }).collect()
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
        // SAFETY: one pointer per kernel parameter (the caller's contract),
        // a configuration whose attributes live until the call returns.
        ck_raw(unsafe { (self.ext.launch_ex)(&cfg, f.0, args.as_mut_ptr(), ptr::null_mut()) })
    }

    pub(super) fn clusters(&mut self, f: CudaFunction, d: LaunchDims, attrs: &[LaunchAttr], kind: u32) -> CuRes<i32> {
        let mut raw = raw_attrs(attrs);
        let cfg = config(&d, None, &mut raw);
        let mut n = 0;
        let call = if kind == 0 { self.ext.max_active_clusters } else { self.ext.max_cluster_size };
        // SAFETY: valid out-pointer, live function, configuration as above.
        ck_raw(unsafe { call(&mut n, f.0, &cfg) })?;
        Ok(n)
    }

    pub(super) fn alloc_async(&mut self, size: u64, stream: Option<CudaStream>) -> CuRes<u64> {
        let mut p = 0;
        // SAFETY: valid out-pointer; the stream belongs to this context.
        ck(unsafe { sys::cuMemAllocAsync(&mut p, size as usize, raw_stream(stream)) })?;
        Ok(p)
    }

    pub(super) fn free_async(&mut self, dptr: u64, stream: Option<CudaStream>) -> CuRes<()> {
        // SAFETY: the session frees only addresses this context allocated.
        ck(unsafe { sys::cuMemFreeAsync(dptr, raw_stream(stream)) })
    }

    pub(super) fn pool_attribute(&mut self, attr: u32, set: Option<u64>) -> CuRes<u64> {
        let mut pool = ptr::null_mut();
        // SAFETY: valid out-pointer; the context's device.
        ck(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, self.dev) })?;
        // Attributes 1 to 3 are ints, the others 64-bit values.
        let wide = attr >= 4;
        let mut v = set.unwrap_or(0);
        let mut narrow = v as c_int;
        let p: *mut c_void = if wide { (&mut v as *mut u64).cast() } else { (&mut narrow as *mut c_int).cast() };
        let call = if set.is_some() { self.ext.pool_set } else { self.ext.pool_get };
        // SAFETY: the pool of this context's device, an attribute number
        // the session allowed, storage of the attribute's width.
        ck_raw(unsafe { call(pool, attr as c_int, p) })?;
        Ok(if wide { v } else { narrow as u32 as u64 })
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
        let mut out = RawTensorMap([0; 128]);
        let dims: Vec<u64> = r.global_dim.iter().map(|v| v.get()).collect();
        let strides: Vec<u64> = r.global_strides.iter().map(|v| v.get()).collect();
        let boxes: Vec<u32> = r.box_dim.iter().map(|v| v.get()).collect();
        let elem: Vec<u32> = r.element_strides.iter().map(|v| v.get()).collect();
        let addr = r.global_address.get() as usize as *mut c_void;
        let e = |v: zerocopy::little_endian::U32| v.get();
        // SAFETY: arrays of the rank's length (at most 5, checked at
        // decode) and an output aligned as CUtensorMap; enum values are
        // plain integers the driver validates; the address was checked to
        // lie, with the whole tensor, in this session's memory.
        ck_raw(unsafe {
            if r.kind.get() == 0 {
                (self.ext.tiled)(
                    &mut out,
                    e(r.data_type),
                    e(r.rank),
                    addr,
                    dims.as_ptr(),
                    strides.as_ptr(),
                    boxes.as_ptr(),
                    elem.as_ptr(),
                    e(r.interleave),
                    e(r.swizzle),
                    e(r.l2_promotion),
                    e(r.oob_fill),
                )
            } else {
                let lower: Vec<c_int> = r.pixel_box_lower.iter().map(|v| v.get()).collect();
                let upper: Vec<c_int> = r.pixel_box_upper.iter().map(|v| v.get()).collect();
                (self.ext.im2col)(
                    &mut out,
                    e(r.data_type),
                    e(r.rank),
                    addr,
                    dims.as_ptr(),
                    strides.as_ptr(),
                    lower.as_ptr(),
                    upper.as_ptr(),
                    e(r.channels_per_pixel),
                    e(r.pixels_per_column),
                    elem.as_ptr(),
                    e(r.interleave),
                    e(r.swizzle),
                    e(r.l2_promotion),
                    e(r.oob_fill),
                )
            }
        })?;
        Ok(out.0)
    }
}
