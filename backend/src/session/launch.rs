//! Kernels: launches (parameters checked against the layout the function
//! reply described), function attributes and the occupancy calculator.

use super::Io;
use super::Session;
use crate::exec::{CuRes, ExecContext, Executor, LaunchAttr, LaunchDims};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::{
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, CU_LAUNCH_ATTRIBUTE_PRIORITY,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, CUlaunchAttributeID,
};
use pvgpu_ring::proto::{self, I32Rep, OccupancyRep, TensorMapRep};
use zerocopy::IntoBytes;
use zerocopy::little_endian::U32;

/// The function `id` and its context.
fn function<E: Executor>(s: &Session<E>, id: u64) -> CuRes<(u64, <super::Ctx<E> as ExecContext>::Function)> {
    s.functions.get(id).map(|f| (f.ctx, f.func)).ok_or(CuError::INVALID_HANDLE)
}

/// Launch attributes a guest may set. The others name events or graph
/// nodes of the driver, or belong to streams.
pub(in crate::session) const ALLOWED_ATTRS: &[CUlaunchAttributeID] = &[
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
    CU_LAUNCH_ATTRIBUTE_PRIORITY,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
    CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
];

fn check_attrs(attrs: &[LaunchAttr]) -> CuRes<()> {
    attrs.iter().try_for_each(|a| check_attr(a.id.get()))
}

/// Checks one launch (or kernel node) attribute a guest names: one of
/// [`ALLOWED_ATTRS`], else `CUDA_ERROR_NOT_SUPPORTED`.
pub(super) fn check_attr(id: u32) -> CuRes<()> {
    if ALLOWED_ATTRS.contains(&CUlaunchAttributeID(id)) { Ok(()) } else { Err(CuError::NOT_SUPPORTED) }
}

fn dims(grid: [U32; 3], block: [U32; 3], shared_mem: u32) -> CuRes<LaunchDims> {
    let d = LaunchDims { grid: grid.map(|v| v.get()), block: block.map(|v| v.get()), shared_mem };
    if d.grid.contains(&0) || d.block.contains(&0) {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(d)
}

pub(super) fn launch_kernel<E: Executor>(s: &mut Session<E>, r: proto::LaunchKernel<'_>, _: &mut Io<'_>) -> CuRes<()> {
    let h = &r.head;
    let d = dims(h.grid, h.block, h.shared_mem.get())?;
    launch_with(s, h.function.get(), d, r.params, &[], h.stream.get())
}

pub(super) fn launch_kernel_ex<E: Executor>(s: &mut Session<E>, r: proto::LaunchKernelEx<'_>, _: &mut Io<'_>) -> CuRes<()> {
    let h = &r.head;
    let d = dims(h.grid, h.block, h.shared_mem.get())?;
    let attrs = r.attrs();
    check_attrs(attrs)?;
    launch_with(s, h.function.get(), d, r.params(), attrs, h.stream.get())
}

fn launch_with<E: Executor>(
    s: &mut Session<E>,
    function: u64,
    dims: LaunchDims,
    params: &[u8],
    attrs: &[LaunchAttr],
    stream: u64,
) -> CuRes<()> {
    let f = s.functions.get(function).ok_or(CuError::INVALID_HANDLE)?;
    if params.len() != f.param_bytes {
        return Err(CuError::INVALID_VALUE);
    }
    let (ctx, func, layout) = (f.ctx, f.func, f.layout.clone());
    let st = s.stream(stream, ctx)?;
    // Copy the parameters into an 8-aligned buffer.
    let mut buf = std::mem::take(&mut s.param_buf);
    buf.clear();
    buf.resize(params.len().div_ceil(8), 0);
    buf.as_mut_bytes()[..params.len()].copy_from_slice(params);
    let r = s.enter(ctx).and_then(|c| c.launch(func, dims, &buf.as_bytes()[..params.len()], &layout, attrs, st));
    s.param_buf = buf;
    if let (Ok(()), Some(m)) = (&r, s.meter()) {
        m.kernel();
    }
    r
}

pub(super) fn func_get_attribute<E: Executor>(s: &mut Session<E>, r: proto::FuncGetAttribute, _: &mut Io<'_>) -> CuRes<I32Rep> {
    let (ctx, func) = function(s, r.function.get())?;
    let v = s.enter(ctx)?.func_get_attribute(func, r.attr.get())?;
    Ok(I32Rep { value: v.into() })
}

pub(super) fn func_set_attribute<E: Executor>(s: &mut Session<E>, r: proto::FuncSetAttribute, _: &mut Io<'_>) -> CuRes<()> {
    super::policy::func_attribute(r.attr.get())?;
    let (ctx, func) = function(s, r.function.get())?;
    s.enter(ctx)?.func_set_attribute(func, r.attr.get(), r.value.get())?;
    if let Some(f) = s.functions.get_mut(r.function.get()) {
        f.attributes.insert(r.attr.get(), r.value.get());
    }
    Ok(())
}

pub(super) fn occupancy<E: Executor>(s: &mut Session<E>, r: proto::Occupancy, _: &mut Io<'_>) -> CuRes<OccupancyRep> {
    let (ctx, func) = function(s, r.function.get())?;
    let (a, b) = s.enter(ctx)?.occupancy(func, r.kind.get(), r.block_size.get(), r.limit.get(), r.dyn_smem.get(), r.flags.get())?;
    Ok(OccupancyRep { a: a.into(), b: b.into() })
}

pub(super) fn occupancy_clusters<E: Executor>(s: &mut Session<E>, r: proto::OccupancyClusters<'_>, _: &mut Io<'_>) -> CuRes<I32Rep> {
    let h = &r.head;
    check_attrs(r.attrs)?;
    let d = dims(h.grid, h.block, h.shared_mem.get())?;
    let (ctx, func) = function(s, h.function.get())?;
    let n = s.enter(ctx)?.occupancy_clusters(func, d, r.attrs, h.kind.get())?;
    Ok(I32Rep { value: n.into() })
}

/// A tensor map may only describe memory of the session: its base address
/// and everything its dimensions and strides reach must lie in one
/// allocation.
pub(super) fn tensor_map_encode<E: Executor>(s: &mut Session<E>, r: proto::TensorMapEncode, _: &mut Io<'_>) -> CuRes<TensorMapRep> {
    let extent = tensor_extent(&r).ok_or(CuError::INVALID_VALUE)?;
    let ctx = s.range(r.global_address.get(), extent)?;
    Ok(TensorMapRep { bytes: s.enter(ctx)?.tensor_map_encode(&r)? })
}

/// Element sizes of `CUtensorMapDataType`, in bits.
fn element_bits(data_type: u32) -> Option<u64> {
    use pvgpu_ring::cuda::api::*;
    Some(match CUtensorMapDataType(data_type) {
        CU_TENSOR_MAP_DATA_TYPE_UINT8 => 8,
        CU_TENSOR_MAP_DATA_TYPE_UINT16 | CU_TENSOR_MAP_DATA_TYPE_FLOAT16 | CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 => 16,
        CU_TENSOR_MAP_DATA_TYPE_UINT32
        | CU_TENSOR_MAP_DATA_TYPE_INT32
        | CU_TENSOR_MAP_DATA_TYPE_FLOAT32
        | CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ
        | CU_TENSOR_MAP_DATA_TYPE_TFLOAT32
        | CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ => 32,
        CU_TENSOR_MAP_DATA_TYPE_UINT64 | CU_TENSOR_MAP_DATA_TYPE_INT64 | CU_TENSOR_MAP_DATA_TYPE_FLOAT64 => 64,
        CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B | CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B => 4,
        CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B => 6,
        _ => return None,
    })
}

/// The bytes a tensor map may reach from its base address: the last
/// element of the last row of the outermost dimension, past the base.
fn tensor_extent(r: &proto::TensorMapEncode) -> Option<u64> {
    let rank = r.rank.get() as usize;
    let bits = element_bits(r.data_type.get())?;
    let dims: Vec<u64> = r.global_dim.iter().take(rank).map(|d| d.get()).collect();
    if dims.contains(&0) {
        return None;
    }
    let mut end = dims[0].checked_mul(bits)?.div_ceil(8);
    for (d, stride) in dims.iter().skip(1).zip(&r.global_strides) {
        end = end.checked_add((d - 1).checked_mul(stride.get())?)?;
    }
    Some(end)
}
