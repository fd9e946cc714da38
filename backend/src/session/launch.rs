//! Kernels: launches (parameters checked against the layout the function
//! reply described), function attributes and the occupancy calculator.

use super::Session;
use crate::exec::{CuRes, ExecContext, Executor, LaunchDims};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, I32Rep, OccupancyRep};
use zerocopy::IntoBytes;

/// The function `id` and its context.
fn function<E: Executor>(s: &Session<E>, id: u64) -> CuRes<(u64, <super::Ctx<E> as ExecContext>::Function)> {
    s.functions.get(id).map(|f| (f.ctx, f.func)).ok_or(CuError::INVALID_HANDLE)
}

pub(super) fn launch<E: Executor>(s: &mut Session<E>, r: proto::LaunchKernel<'_>) -> CuRes<()> {
    let (h, params) = (&r.head, r.params);
    let f = s.functions.get(h.function.get()).ok_or(CuError::INVALID_HANDLE)?;
    if params.len() != f.param_bytes {
        return Err(CuError::INVALID_VALUE);
    }
    let (ctx, func, layout) = (f.ctx, f.func, f.layout.clone());
    let st = s.stream(h.stream.get(), ctx)?;
    let dims = LaunchDims { grid: h.grid.map(|v| v.get()), block: h.block.map(|v| v.get()), shared_mem: h.shared_mem.get() };
    if dims.grid.contains(&0) || dims.block.contains(&0) {
        return Err(CuError::INVALID_VALUE);
    }
    // Copy the parameters into an 8-aligned buffer.
    let mut buf = std::mem::take(&mut s.param_buf);
    buf.clear();
    buf.resize(params.len().div_ceil(8), 0);
    buf.as_mut_bytes()[..params.len()].copy_from_slice(params);
    let r = s.enter(ctx).and_then(|c| c.launch(func, dims, &buf.as_bytes()[..params.len()], &layout, st));
    s.param_buf = buf;
    r
}

pub(super) fn get_attribute<E: Executor>(s: &mut Session<E>, r: proto::FuncGetAttribute) -> CuRes<I32Rep> {
    let (ctx, func) = function(s, r.function.get())?;
    let v = s.enter(ctx)?.func_get_attribute(func, r.attr.get())?;
    Ok(I32Rep { value: v.into() })
}

pub(super) fn set_attribute<E: Executor>(s: &mut Session<E>, r: proto::FuncSetAttribute) -> CuRes<()> {
    let (ctx, func) = function(s, r.function.get())?;
    s.enter(ctx)?.func_set_attribute(func, r.attr.get(), r.value.get())
}

pub(super) fn occupancy<E: Executor>(s: &mut Session<E>, r: proto::Occupancy) -> CuRes<OccupancyRep> {
    let (ctx, func) = function(s, r.function.get())?;
    let (a, b) = s.enter(ctx)?.occupancy(func, r.kind.get(), r.block_size.get(), r.limit.get(), r.dyn_smem.get(), r.flags.get())?;
    Ok(OccupancyRep { a: a.into(), b: b.into() })
}
