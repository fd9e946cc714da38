//! Stream attributes (`cuStreamGetAttribute`, `cuStreamSetAttribute`,
//! `cuStreamCopyAttributes`): the access-policy window (an L2 hint over
//! the program's memory), synchronisation policy, priority and memory
//! synchronisation domains, held by the backend's stream; and the reset
//! of the persisting L2 lines those windows made.

use super::exec::stream_info;
use crate::state::{self, Res, ctx, put, run, stream};
use pvgpu_frontend::Context;
use pvgpu_ring::cuda::api::{CUstream, CUstreamAttrID, CUstreamAttrValue};
use pvgpu_ring::{CuError, CuResult};

/// The backend context of work on stream `s`.
fn context_of(s: CUstream) -> Result<Context, CuError> {
    match stream_info(s)? {
        Some(i) => ctx::backend(i.ctx),
        None => ctx::current(),
    }
}

/// `cuStreamGetAttribute`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetAttribute(s: CUstream, attr: CUstreamAttrID, out: *mut CUstreamAttrValue) -> CuResult {
    run("cuStreamGetAttribute", || -> Res {
        if out.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let v = state::client()?.stream_attr(context_of(s)?, stream(s), attr.0, None).map_err(state::cu)?;
        // SAFETY: the value union is 64 plain bytes, any of which is valid.
        let v = unsafe { std::mem::transmute::<[u8; 64], CUstreamAttrValue>(v) };
        // SAFETY: writable per the API.
        unsafe { put(out, v) }
    })
}

/// `cuStreamSetAttribute`.
///
/// # Safety
/// `value` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamSetAttribute(s: CUstream, attr: CUstreamAttrID, value: *const CUstreamAttrValue) -> CuResult {
    run("cuStreamSetAttribute", || -> Res {
        // SAFETY: readable per the API (null refused).
        let v = unsafe { value.as_ref() }.ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: the union's 64 bytes, as the wire carries them.
        let bytes = unsafe { std::mem::transmute::<CUstreamAttrValue, [u8; 64]>(*v) };
        state::client()?.stream_attr(context_of(s)?, stream(s), attr.0, Some(bytes)).map(drop).map_err(state::cu)
    })
}

/// `cuStreamCopyAttributes`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCopyAttributes(dst: CUstream, src: CUstream) -> CuResult {
    run("cuStreamCopyAttributes", || -> Res {
        let c = context_of(dst)?;
        if context_of(src)? != c {
            return Err(CuError::INVALID_CONTEXT);
        }
        state::client()?.stream_copy_attrs(c, stream(dst), stream(src)).map_err(state::cu)
    })
}

/// `cuCtxResetPersistingL2Cache`: of the current context's device.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxResetPersistingL2Cache() -> CuResult {
    run("cuCtxResetPersistingL2Cache", || state::client()?.ctx_reset_persisting_l2(ctx::current()?).map_err(state::cu))
}
