//! What a guest may ask the driver for: context flags, context limits and
//! function attributes are passed on only where they act on the guest's
//! own session. Some reach outside it: `CU_CTX_COREDUMP_ENABLE` made the
//! driver end the worker silently, `CU_CTX_USER_COREDUMP_ENABLE` leaves a
//! FIFO in the backend's working directory per session, and
//! `CU_LIMIT_PERSISTING_L2_CACHE_SIZE` sets aside L2 cache of the whole
//! device.

use pvgpu_ring::CuError;

/// `CU_CTX_SCHED_*` (spin, yield, blocking sync).
const SCHED_MASK: u32 = 0x07;
/// `CU_CTX_MAP_HOST`.
const MAP_HOST: u32 = 0x08;
/// `CU_CTX_LMEM_RESIZE_TO_MAX`.
const LMEM_RESIZE_TO_MAX: u32 = 0x10;
/// `CU_CTX_COREDUMP_ENABLE`, `CU_CTX_USER_COREDUMP_ENABLE`.
const COREDUMP: u32 = 0x20 | 0x40;
/// `CU_CTX_SYNC_MEMOPS`.
const SYNC_MEMOPS: u32 = 0x80;

/// Checks the flags of a new context: scheduling, mapped host memory,
/// local-memory sizing and synchronous memory operations pass; core dumps
/// are not supported (`CUDA_ERROR_NOT_SUPPORTED`); unknown bits are
/// invalid, as the driver says of them.
pub(super) fn ctx_flags(flags: u32) -> Result<u32, CuError> {
    if flags & COREDUMP != 0 {
        return Err(CuError::NOT_SUPPORTED);
    }
    if flags & !(SCHED_MASK | MAP_HOST | LMEM_RESIZE_TO_MAX | SYNC_MEMOPS) != 0 || flags & SCHED_MASK == 3 || flags & SCHED_MASK > 4 {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(flags)
}

/// `CU_LIMIT_PERSISTING_L2_CACHE_SIZE`: device-wide.
const LIMIT_PERSISTING_L2: u32 = 6;

/// Checks a limit a guest sets: the stack, printf buffer, device heap,
/// device-runtime depths and L2 fetch granularity act on its own context;
/// the persisting L2 set-aside acts on the device (`NOT_SUPPORTED`).
pub(super) fn ctx_limit(limit: u32) -> Result<(), CuError> {
    match limit {
        0..=5 => Ok(()),
        LIMIT_PERSISTING_L2 => Err(CuError::NOT_SUPPORTED),
        _ => Err(CuError::INVALID_VALUE),
    }
}

/// Checks a function attribute a guest sets: dynamic shared memory, the
/// shared-memory carve-out and the cluster attributes; the rest are
/// read-only.
pub(super) fn func_attribute(attr: i32) -> Result<(), CuError> {
    match attr {
        // MAX_DYNAMIC_SHARED_SIZE_BYTES, PREFERRED_SHARED_MEMORY_CARVEOUT.
        8 | 9 => Ok(()),
        // REQUIRED_CLUSTER_WIDTH/HEIGHT/DEPTH, NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
        // CLUSTER_SCHEDULING_POLICY_PREFERENCE.
        11..=15 => Ok(()),
        _ => Err(CuError::INVALID_VALUE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coredumps_and_unknown_context_flags_are_refused() {
        assert_eq!(ctx_flags(0), Ok(0));
        assert_eq!(ctx_flags(0x04 | 0x08 | 0x10 | 0x80), Ok(0x9c));
        assert_eq!(ctx_flags(0x20), Err(CuError::NOT_SUPPORTED));
        assert_eq!(ctx_flags(0x40 | 0x01), Err(CuError::NOT_SUPPORTED));
        assert_eq!(ctx_flags(0x100), Err(CuError::INVALID_VALUE));
        assert_eq!(ctx_flags(0x03), Err(CuError::INVALID_VALUE));
    }

    #[test]
    fn device_wide_limits_and_read_only_attributes_are_refused() {
        assert_eq!(ctx_limit(0), Ok(()));
        assert_eq!(ctx_limit(6), Err(CuError::NOT_SUPPORTED));
        assert_eq!(ctx_limit(99), Err(CuError::INVALID_VALUE));
        assert_eq!(func_attribute(8), Ok(()));
        assert_eq!(func_attribute(0), Err(CuError::INVALID_VALUE));
        assert_eq!(func_attribute(10), Err(CuError::INVALID_VALUE));
    }
}
