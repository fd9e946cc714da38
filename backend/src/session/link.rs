//! Linking (`cuLinkComplete`): the program's inputs arrive in one request,
//! checked here before the driver sees them; the linked image and the
//! driver's logs wait in the session until the program has read them.

use super::{Io, Session};
use crate::exec::{CuRes, ExecContext, Executor};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{self, DataLoc, LinkRep, LinkSpec};
use std::collections::HashMap;

/// Most links a session keeps unread; the program reads and forgets each
/// one in its `cuLinkComplete`.
const MAX_LINKS: usize = 4;

/// The JIT options a guest may set: each takes a plain number. Options
/// whose value is an address (log buffers, symbol tables, name lists) are
/// never passed on: the driver would write through it in the backend.
const PLAIN_OPTIONS: [CUjit_option; 21] = [
    CU_JIT_MAX_REGISTERS,
    CU_JIT_THREADS_PER_BLOCK,
    CU_JIT_OPTIMIZATION_LEVEL,
    CU_JIT_TARGET_FROM_CUCONTEXT,
    CU_JIT_TARGET,
    CU_JIT_FALLBACK_STRATEGY,
    CU_JIT_GENERATE_DEBUG_INFO,
    CU_JIT_LOG_VERBOSE,
    CU_JIT_GENERATE_LINE_INFO,
    CU_JIT_CACHE_MODE,
    CU_JIT_LTO,
    CU_JIT_FTZ,
    CU_JIT_PREC_DIV,
    CU_JIT_PREC_SQRT,
    CU_JIT_FMA,
    CU_JIT_OPTIMIZE_UNUSED_DEVICE_VARIABLES,
    CU_JIT_POSITION_INDEPENDENT_CODE,
    CU_JIT_MIN_CTA_PER_SM,
    CU_JIT_MAX_THREADS_PER_BLOCK,
    CU_JIT_OVERRIDE_DIRECTIVE_VALUES,
    CU_JIT_SPLIT_COMPILE,
];

/// Linked images and their logs, by handle: each one run of bytes, the
/// image, then the info log, then the error log.
#[derive(Default)]
pub(super) struct Links {
    runs: HashMap<u64, Vec<u8>>,
    next: u64,
}

impl Links {
    /// Whether it holds nothing (a checkpoint covers only such sessions).
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// Whether the guest may link inputs of this type: PTX, cubin and fatbin
/// (checked like module images). Host objects and libraries hold host
/// code pvgpu cannot check.
fn linkable(kind: u32) -> bool {
    [CU_JIT_INPUT_PTX, CU_JIT_INPUT_CUBIN, CU_JIT_INPUT_FATBINARY].iter().any(|k| k.0 == kind)
}

pub(super) fn link_module<E: Executor>(s: &mut Session<E>, r: proto::LinkModule<'_>, io: &mut Io<'_>) -> CuRes<LinkRep> {
    let ctx = r.head.ctx.get();
    s.enter(ctx)?;
    if s.links.runs.len() >= MAX_LINKS {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let (p, len) = Session::<E>::source(&r.head.blob, r.blob, io.area)?;
    if len > s.limits.max_image {
        return Err(CuError::INVALID_IMAGE);
    }
    // Copy out of shared memory before anything reads it.
    // SAFETY: `source` checked that [p, p+len) is inside the request payload
    // or the data area, both mapped for the duration of this call.
    let blob = unsafe { std::slice::from_raw_parts(p, len) }.to_vec();
    let spec = LinkSpec::decode(&blob).map_err(|_| CuError::INVALID_VALUE)?;
    if spec.options.iter().any(|&(o, _)| !PLAIN_OPTIONS.contains(&CUjit_option(o))) {
        return Err(CuError::INVALID_VALUE);
    }
    if spec.inputs.iter().any(|i| !linkable(i.kind)) {
        return Err(CuError::NOT_SUPPORTED);
    }
    // PTX ends in a NUL so the driver's parser stops in bounds; cubins and
    // fatbins are bounds-checked as module images are.
    let owned: Vec<Vec<u8>> = spec.inputs.iter().map(|i| terminated(i.kind, i.data)).collect::<CuRes<_>>()?;
    let inputs = spec.inputs.iter().zip(&owned).map(|(i, data)| proto::LinkInput { kind: i.kind, name: i.name, data }).collect();
    let linked = s.enter(ctx)?.link(&LinkSpec { options: spec.options.clone(), inputs });
    let status = linked.image.as_ref().map_or_else(|e| e.code() as i32, |_| 0);
    let image = linked.image.unwrap_or_default();
    let info = &linked.info_log[..linked.info_log.len().min(proto::MAX_LINK_LOG)];
    let error = &linked.error_log[..linked.error_log.len().min(proto::MAX_LINK_LOG)];
    s.links.next += 1;
    let id = s.links.next;
    s.links.runs.insert(id, [&image[..], info, error].concat());
    Ok(LinkRep {
        status: status.into(),
        wall_ms: linked.wall_ms.to_bits().into(),
        link: id.into(),
        size: (image.len() as u64).into(),
        info_len: (info.len() as u32).into(),
        error_len: (error.len() as u32).into(),
    })
}

/// An input as the driver may read it: PTX with a NUL after it, a cubin or
/// fatbin once its headers are checked.
fn terminated(kind: u32, data: &[u8]) -> CuRes<Vec<u8>> {
    if kind == CU_JIT_INPUT_PTX.0 {
        let mut v = Vec::with_capacity(data.len() + 1);
        v.extend_from_slice(data.strip_suffix(&[0]).unwrap_or(data));
        v.push(0);
        return Ok(v);
    }
    crate::exec::image::check_bounds(data)?;
    Ok(data.to_vec())
}

pub(super) fn link_read<E: Executor>(s: &mut Session<E>, r: proto::LinkRead, io: &mut Io<'_>) -> CuRes<proto::Bulk> {
    let run = s.links.runs.get(&r.link.get()).ok_or(CuError::INVALID_HANDLE)?;
    let len = usize::try_from(r.data.len.get()).map_err(|_| CuError::INVALID_VALUE)?;
    let start = usize::try_from(r.offset.get()).map_err(|_| CuError::INVALID_VALUE)?;
    let bytes = start.checked_add(len).and_then(|end| run.get(start..end)).ok_or(CuError::INVALID_VALUE)?;
    match r.data.location().map_err(|_| CuError::INVALID_VALUE)? {
        DataLoc::Inline => io.out.extend_from_slice(bytes),
        DataLoc::Area { offset } => {
            let area = io.area.ok_or(CuError::INVALID_VALUE)?;
            let p = area.ptr(offset, len as u64).map_err(|_| CuError::INVALID_VALUE)?;
            // SAFETY: [p, p+len) was checked to lie in the data area, which
            // stays mapped for the session; `bytes` is the backend's own.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, len) };
        }
    }
    Ok(proto::Bulk)
}

pub(super) fn link_destroy<E: Executor>(s: &mut Session<E>, r: proto::LinkDestroy, _: &mut Io<'_>) -> CuRes<()> {
    s.links.runs.remove(&r.link.get()).map(drop).ok_or(CuError::INVALID_HANDLE)
}
