//! Parity details: stream attributes (an access-policy window set, read
//! back and copied to another stream; attributes a stream cannot carry
//! refused) and the persisting-L2 set-aside granted up to the session's
//! share of the device's.

use super::*;
use pvgpu_ring::cuda::api::{CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, CU_LIMIT_PERSISTING_L2_CACHE_SIZE};

/// A `CUaccessPolicyWindow` as `CUstreamAttrValue` lays it out: base,
/// bytes, hit ratio, hit and miss properties.
fn window(base: u64, bytes: u64, ratio: f32, hit: u32, miss: u32) -> [u8; 64] {
    let mut v = [0u8; 64];
    v[..8].copy_from_slice(&base.to_le_bytes());
    v[8..16].copy_from_slice(&bytes.to_le_bytes());
    v[16..20].copy_from_slice(&ratio.to_le_bytes());
    v[20..24].copy_from_slice(&hit.to_le_bytes());
    v[24..28].copy_from_slice(&miss.to_le_bytes());
    v
}

pub(crate) fn stream_attributes_and_persisting_l2(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let d = c.mem_alloc(g.ctx, 1 << 20).unwrap();
    let (a, b) = (c.stream_create(g.ctx, 1, 0).unwrap(), c.stream_create(g.ctx, 1, 0).unwrap());
    // CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW; persisting hits (2),
    // normal misses (0).
    let w = window(d, 1 << 20, 0.5, 2, 0);
    assert_eq!(c.stream_attr(g.ctx, a, 1, Some(w)).unwrap(), w, "the window as set");
    assert_eq!(c.stream_attr(g.ctx, a, 1, None).unwrap(), w, "read back");
    c.stream_copy_attrs(g.ctx, b, a).unwrap();
    assert_eq!(c.stream_attr(g.ctx, b, 1, None).unwrap(), w, "copied to another stream");
    // Work on the stream runs under it.
    c.memset(d, 7, 1, 1 << 20, a).unwrap();
    c.stream_synchronize(a).unwrap();
    // Cooperative launch (2) is a launch's attribute, not a stream's.
    assert_eq!(code(c.stream_attr(g.ctx, a, 2, None)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.stream_attr(g.ctx, Stream(a.0 + 999), 1, None)), CuResult::INVALID_HANDLE);

    // The set-aside: a quarter of the device's largest (the backend's
    // default share), which the driver rounds up to its granularity (on
    // the H100, 9830400 bytes for 8192000 asked of 32768000).
    let max = c.device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE).unwrap() as u64;
    let limit = CU_LIMIT_PERSISTING_L2_CACHE_SIZE.0;
    c.ctx_set_limit(g.ctx, limit, u64::MAX).unwrap();
    let got = c.ctx_get_limit(g.ctx, limit).unwrap();
    assert!(got > 0 || max == 0, "granted nothing of {max}");
    assert!(got <= max / 4 + max / 8, "granted {got} of {max}");
    c.ctx_reset_persisting_l2(g.ctx).unwrap();
    c.ctx_set_limit(g.ctx, limit, 0).unwrap();
    assert_eq!(c.ctx_get_limit(g.ctx, limit).unwrap(), 0);
}
