//! Kernel launches: `cuLaunchKernel` (with `kernelParams` or the `extra`
//! buffer), `cuLaunchKernelEx` with its attributes, cooperative launches,
//! cluster occupancy, and tensor maps (built by the backend's driver).
//! Launches are sent without waiting; their errors come back at the next
//! synchronising call. Every function argument may be a `CUfunction` or a
//! `CUkernel`.

use crate::state::{self, Res, id, put, run};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::cuda::api::{
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE, CUlaunchAttribute, CUlaunchConfig, CUstream, CUtensorMap, CUtensorMapDataType,
    CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use pvgpu_ring::proto::{LaunchAttr, TensorMapEncode};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_uint, c_void};

const CU_LAUNCH_PARAM_END: usize = 0x00;
const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;

/// Packs the arguments of a launch into the kernel's parameter layout,
/// mirrors private page-locked memory they point into, which the kernel
/// will reach ([`super::host::mirror_pointers`]), and gives pointers into
/// the data area's page-locked memory the device's address where it is not
/// the program's ([`super::host::area_pointers`]).
///
/// # Safety
/// As [`pack_args`].
pub(crate) unsafe fn pack(f: &pvgpu_frontend::Function, params: *mut *mut c_void, extra: *mut *mut c_void) -> Result<Vec<u8>, CuError> {
    // SAFETY: per the caller.
    let mut packed = unsafe { pack_args(f, params, extra) }?;
    super::host::mirror_pointers(&packed);
    super::host::area_pointers(&mut packed);
    Ok(packed)
}

/// Packs the arguments of a launch into the kernel's parameter layout.
///
/// # Safety
/// `params` is null or holds one pointer per kernel parameter, each to a
/// value of that parameter's size; `extra` is null or a
/// `CU_LAUNCH_PARAM_END`-terminated list as the driver API defines it.
unsafe fn pack_args(f: &pvgpu_frontend::Function, params: *mut *mut c_void, extra: *mut *mut c_void) -> Result<Vec<u8>, CuError> {
    let mut packed = vec![0u8; f.param_bytes];
    if !params.is_null() {
        for (i, p) in f.params.iter().enumerate() {
            // SAFETY: one pointer per parameter, per the caller.
            let arg = unsafe { *params.add(i) } as *const u8;
            if arg.is_null() {
                return Err(CuError::INVALID_VALUE);
            }
            let at = p.offset as usize;
            // SAFETY: `arg` points to `size` readable bytes, per the caller;
            // the layout was checked to fit in `packed` when it arrived.
            unsafe { std::ptr::copy_nonoverlapping(arg, packed.as_mut_ptr().add(at), p.size as usize) };
        }
        return Ok(packed);
    }
    if !extra.is_null() {
        let (mut buf, mut size) = (std::ptr::null::<u8>(), None);
        let mut i = 0;
        loop {
            if i >= 64 {
                return Err(CuError::INVALID_VALUE);
            }
            // SAFETY: the list is END-terminated, per the caller.
            let key = unsafe { *extra.add(i) } as usize;
            match key {
                CU_LAUNCH_PARAM_END => break,
                CU_LAUNCH_PARAM_BUFFER_POINTER => {
                    // SAFETY: a key is followed by its value.
                    buf = unsafe { *extra.add(i + 1) } as *const u8;
                }
                CU_LAUNCH_PARAM_BUFFER_SIZE => {
                    // SAFETY: the value is a pointer to a size_t.
                    let sp = unsafe { *extra.add(i + 1) } as *const usize;
                    if sp.is_null() {
                        return Err(CuError::INVALID_VALUE);
                    }
                    // SAFETY: non-null pointer to a size_t, per the API.
                    size = Some(unsafe { sp.read_unaligned() });
                }
                _ => return Err(CuError::INVALID_VALUE),
            }
            i += 2;
        }
        let size = size.ok_or(CuError::INVALID_VALUE)?;
        if buf.is_null() || size < f.param_bytes {
            return Err(CuError::INVALID_VALUE);
        }
        if size > f.param_bytes {
            // What the driver answers for a buffer larger than the kernel's
            // parameters.
            return Err(CuError::LAUNCH_OUT_OF_RESOURCES);
        }
        // SAFETY: `buf` holds `size >= param_bytes` readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(buf, packed.as_mut_ptr(), f.param_bytes) };
        return Ok(packed);
    }
    if f.params.is_empty() { Ok(packed) } else { Err(CuError::INVALID_VALUE) }
}

/// The checks the driver makes before it accepts a launch, made here so
/// that their errors come back at the call: no dimension is zero, the block
/// fits the device's limits, the grid fits its limits, and a stream belongs
/// to the function's context.
pub(crate) fn check_launch(fid: u64, grid: [c_uint; 3], block: [c_uint; 3], s: *mut c_void) -> Res {
    if grid.contains(&0) || block.contains(&0) {
        return Err(CuError::INVALID_VALUE);
    }
    let fn_ctx = {
        let o = state::objects();
        o.functions.get(&fid).and_then(|f| o.modules.get(&f.module)).copied()
    };
    let Some(ctx) = fn_ctx else { return Ok(()) };
    let stream = state::stream(s);
    if stream != pvgpu_frontend::Stream::DEFAULT && state::objects().streams.get(&stream.0).is_some_and(|st| st.ctx != ctx) {
        return Err(CuError::INVALID_HANDLE);
    }
    let dev = state::ctx::device_of(ctx)?;
    let a = |k| state::device_attribute(dev, k);
    let threads = block.iter().map(|&b| b as u64).product::<u64>();
    if threads > a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u64
        || block[0] > a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)? as u32
        || block[1] > a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)? as u32
        || block[2] > a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)? as u32
        || grid[0] > a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)? as u32
        || grid[1] > a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)? as u32
        || grid[2] > a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)? as u32
    {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn launch(
    hfunc: *mut c_void,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    s: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Res {
    let (fid, f) = crate::library::function(id(hfunc))?;
    check_launch(fid, grid, block, s)?;
    // SAFETY: the driver API's contract for kernelParams and extra.
    let packed = unsafe { pack(&f, params, extra) }?;
    state::client_of(f.id)?.launch_packed(&f, grid, block, shared, state::ordered(s), &packed).map_err(state::cu)
}

/// `cuLaunchKernel`, with `kernelParams` or the `extra` packed buffer.
///
/// # Safety
/// As the driver API requires of `kernelParams` and `extra`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    s: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    run("cuLaunchKernel", || launch(f, [gx, gy, gz], [bx, by, bz], shared, s, params, extra))
}

/// What a launch configuration says besides its attributes.
struct Shape {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem: c_uint,
    stream: CUstream,
}

impl Shape {
    fn of(c: &CUlaunchConfig) -> Shape {
        Shape {
            grid: [c.gridDimX, c.gridDimY, c.gridDimZ],
            block: [c.blockDimX, c.blockDimY, c.blockDimZ],
            shared_mem: c.sharedMemBytes,
            stream: c.hStream,
        }
    }
}

/// The attributes of a launch configuration, as the wire carries them.
///
/// # Safety
/// `cfg.attrs` holds `cfg.num_attrs` attributes, per the driver API.
unsafe fn attributes(cfg: &CUlaunchConfig) -> Result<Vec<LaunchAttr>, CuError> {
    const { assert!(std::mem::size_of::<CUlaunchAttribute>() == 72) };
    if cfg.numAttrs as usize > pvgpu_ring::proto::MAX_LAUNCH_ATTRS {
        return Err(CuError::INVALID_VALUE);
    }
    if cfg.numAttrs > 0 && cfg.attrs.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let mut out = Vec::with_capacity(cfg.numAttrs as usize);
    for i in 0..cfg.numAttrs as usize {
        // SAFETY: `numAttrs` readable attributes of 72 bytes each.
        let raw = unsafe { cfg.attrs.add(i).cast::<[u8; 72]>().read_unaligned() };
        out.push(<LaunchAttr as zerocopy::FromBytes>::read_from_bytes(&raw).map_err(|_| CuError::INVALID_VALUE)?);
    }
    Ok(out)
}

fn launch_ex(cfg: &Shape, hfunc: *mut c_void, attrs: &[LaunchAttr], params: *mut *mut c_void, extra: *mut *mut c_void) -> Res {
    let (fid, f) = crate::library::function(id(hfunc))?;
    check_launch(fid, cfg.grid, cfg.block, cfg.stream)?;
    // SAFETY: the driver API's contract for kernelParams and extra.
    let packed = unsafe { pack(&f, params, extra) }?;
    let s = state::ordered(cfg.stream);
    state::client_of(f.id)?.launch_ex(&f, cfg.grid, cfg.block, cfg.shared_mem, s, attrs, &packed).map_err(state::cu)
}

/// `cuLaunchKernelEx`: a launch with attributes. Accepted: access policy
/// window, cooperative, cluster dimension and scheduling policy,
/// programmatic stream serialisation, priority, memory synchronisation
/// domains, shared memory carveout; others are `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
/// `config` must point to a `CUlaunchConfig`; `params` and `extra` as for
/// `cuLaunchKernel`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const CUlaunchConfig,
    f: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    run("cuLaunchKernelEx", || {
        if config.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: a readable CUlaunchConfig, per the API.
        let cfg = unsafe { &*config };
        // SAFETY: the configuration's attribute array, per the API.
        let attrs = unsafe { attributes(cfg) }?;
        launch_ex(&Shape::of(cfg), f, &attrs, params, extra)
    })
}

/// `cuLaunchCooperativeKernel`: a launch with the cooperative attribute.
///
/// # Safety
/// As `cuLaunchKernel` with `kernelParams`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    f: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    s: *mut c_void,
    params: *mut *mut c_void,
) -> CuResult {
    run("cuLaunchCooperativeKernel", || {
        let cfg = Shape { grid: [gx, gy, gz], block: [bx, by, bz], shared_mem: shared, stream: s };
        let mut value = [0u8; 64];
        value[..4].copy_from_slice(&1i32.to_le_bytes());
        let attr = LaunchAttr { id: CU_LAUNCH_ATTRIBUTE_COOPERATIVE.0.into(), reserved: 0.into(), value };
        launch_ex(&cfg, f, &[attr], params, std::ptr::null_mut())
    })
}

fn clusters(out: *mut c_int, hfunc: *mut c_void, config: *const CUlaunchConfig, kind: u32) -> Res {
    if config.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: a readable CUlaunchConfig, per the API.
    let cfg = unsafe { &*config };
    // SAFETY: the configuration's attribute array, per the API.
    let attrs = unsafe { attributes(cfg) }?;
    let (_, f) = crate::library::function(id(hfunc))?;
    let shape = Shape::of(cfg);
    let n = state::client_of(f.id)?.occupancy_clusters(&f, shape.grid, shape.block, shape.shared_mem, &attrs, kind).map_err(state::cu)?;
    // SAFETY: writable per the API.
    unsafe { put(out, n) }
}

/// `cuOccupancyMaxActiveClusters`.
///
/// # Safety
/// `num_clusters` must be writable and `config` a `CUlaunchConfig`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyMaxActiveClusters(num_clusters: *mut c_int, f: *mut c_void, config: *const CUlaunchConfig) -> CuResult {
    run("cuOccupancyMaxActiveClusters", || clusters(num_clusters, f, config, 0))
}

/// `cuOccupancyMaxPotentialClusterSize`.
///
/// # Safety
/// `size` must be writable and `config` a `CUlaunchConfig`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyMaxPotentialClusterSize(size: *mut c_int, f: *mut c_void, config: *const CUlaunchConfig) -> CuResult {
    run("cuOccupancyMaxPotentialClusterSize", || clusters(size, f, config, 1))
}

/// Reads `n` values of `T` from a C array into a fixed array of 5.
///
/// # Safety
/// `p` holds `n <= 5` readable values.
unsafe fn array5<T: Copy + Default>(p: *const T, n: usize) -> Result<[T; 5], CuError> {
    let mut out = [T::default(); 5];
    if n > 0 && p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    for (i, v) in out.iter_mut().enumerate().take(n.min(5)) {
        // SAFETY: `n` readable values, per the caller.
        *v = unsafe { p.add(i).read_unaligned() };
    }
    Ok(out)
}

/// Sends a tensor-map request and writes the descriptor the backend's
/// driver built.
fn encode(map: *mut CUtensorMap, r: TensorMapEncode) -> Res {
    if map.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let bytes = state::client()?.tensor_map_encode(&r).map_err(state::cu)?;
    // SAFETY: a writable CUtensorMap (128 bytes), per the API.
    unsafe { map.cast::<[u8; 128]>().write_unaligned(bytes) };
    Ok(())
}

/// `cuTensorMapEncodeTiled`: built by the backend's driver for the
/// backend's GPU, and returned (it names device memory of the session, the
/// only memory the backend accepts).
///
/// # Safety
/// As the driver API requires of each array (rank entries; strides rank-1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTensorMapEncodeTiled(
    map: *mut CUtensorMap,
    data_type: CUtensorMapDataType,
    rank: c_uint,
    global_address: *mut c_void,
    global_dim: *const u64,
    global_strides: *const u64,
    box_dim: *const u32,
    element_strides: *const u32,
    interleave: CUtensorMapInterleave,
    swizzle: CUtensorMapSwizzle,
    l2_promotion: CUtensorMapL2promotion,
    oob_fill: CUtensorMapFloatOOBfill,
) -> CuResult {
    run("cuTensorMapEncodeTiled", || {
        let n = rank as usize;
        if !(1..=5).contains(&n) {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: arrays of `rank` (strides: `rank - 1`) entries, per the API.
        let arrays = unsafe { (array5(global_dim, n)?, array5(global_strides, n - 1)?, array5(box_dim, n)?, array5(element_strides, n)?) };
        let (dims, strides, boxes, elems) = arrays;
        let r = TensorMapEncode {
            kind: 0.into(),
            data_type: data_type.0.into(),
            rank: rank.into(),
            interleave: interleave.0.into(),
            swizzle: swizzle.0.into(),
            l2_promotion: l2_promotion.0.into(),
            oob_fill: oob_fill.0.into(),
            global_address: (global_address as u64).into(),
            global_dim: dims.map(Into::into),
            global_strides: [strides[0], strides[1], strides[2], strides[3]].map(Into::into),
            box_dim: boxes.map(Into::into),
            element_strides: elems.map(Into::into),
            ..Default::default()
        };
        encode(map, r)
    })
}

/// `cuTensorMapEncodeIm2col`: as [`cuTensorMapEncodeTiled`].
///
/// # Safety
/// As the driver API requires of each array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTensorMapEncodeIm2col(
    map: *mut CUtensorMap,
    data_type: CUtensorMapDataType,
    rank: c_uint,
    global_address: *mut c_void,
    global_dim: *const u64,
    global_strides: *const u64,
    lower: *const c_int,
    upper: *const c_int,
    channels_per_pixel: c_uint,
    pixels_per_column: c_uint,
    element_strides: *const u32,
    interleave: CUtensorMapInterleave,
    swizzle: CUtensorMapSwizzle,
    l2_promotion: CUtensorMapL2promotion,
    oob_fill: CUtensorMapFloatOOBfill,
) -> CuResult {
    run("cuTensorMapEncodeIm2col", || {
        let n = rank as usize;
        if !(3..=5).contains(&n) {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: arrays of `rank` (strides: `rank - 1`, corners: `rank - 2`)
        // entries, per the API.
        let (dims, strides, elems, lo, hi) = unsafe {
            (
                array5(global_dim, n)?,
                array5(global_strides, n - 1)?,
                array5(element_strides, n)?,
                array5(lower, n - 2)?,
                array5(upper, n - 2)?,
            )
        };
        let r = TensorMapEncode {
            kind: 1.into(),
            data_type: data_type.0.into(),
            rank: rank.into(),
            interleave: interleave.0.into(),
            swizzle: swizzle.0.into(),
            l2_promotion: l2_promotion.0.into(),
            oob_fill: oob_fill.0.into(),
            channels_per_pixel: channels_per_pixel.into(),
            global_address: (global_address as u64).into(),
            global_dim: dims.map(Into::into),
            global_strides: [strides[0], strides[1], strides[2], strides[3]].map(Into::into),
            element_strides: elems.map(Into::into),
            pixel_box_lower: [lo[0], lo[1], lo[2]].map(Into::into),
            pixel_box_upper: [hi[0], hi[1], hi[2]].map(Into::into),
            pixels_per_column: pixels_per_column.into(),
            ..Default::default()
        };
        encode(map, r)
    })
}
