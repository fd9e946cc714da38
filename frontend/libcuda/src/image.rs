//! What of a module image reaches the backend: of a fatbin, only what the
//! context's device runs (its best cubin, else its best PTX). Libraries are
//! built for many architectures (PyTorch's for ten); sending one cuts what
//! crosses the transport and what the backend checks and caches to a
//! fraction.

use crate::state::{self, ctx};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::borrow::Cow;

/// `image` as it should be loaded in context handle `h`.
pub fn for_context(image: &[u8], h: u64) -> Result<Cow<'_, [u8]>, CuError> {
    if !pvgpu_fatbin::is_fatbin(image) {
        return Ok(Cow::Borrowed(image));
    }
    let dev = ctx::device_of(h)?;
    let major = state::device_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = state::device_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let cc = (major * 10 + minor) as u32;
    Ok(match pvgpu_fatbin::select(image, cc) {
        Some(chosen) => {
            tracing::debug!(cc, image = image.len(), sent = chosen.len(), "fatbin: sending what the device runs");
            Cow::Owned(chosen)
        }
        None => Cow::Borrowed(image),
    })
}
