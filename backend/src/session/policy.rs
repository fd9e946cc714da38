//! What a guest may ask the driver for: context flags, context limits and
//! function attributes are passed on only where they act on the guest's
//! own session. Some reach outside it: `CU_CTX_COREDUMP_ENABLE` made the
//! driver end the worker silently, `CU_CTX_USER_COREDUMP_ENABLE` leaves a
//! FIFO in the backend's working directory per session, and
//! `CU_LIMIT_PERSISTING_L2_CACHE_SIZE` sets aside L2 cache of the whole
//! device (granted up to the session's share, see [`persisting_l2`]).

use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;

/// `CU_CTX_SCHED_*` (spin, yield, blocking sync).
const SCHED_MASK: u32 = CU_CTX_SCHED_MASK.0;
/// Context flags that act on the session alone.
const SESSION_FLAGS: u32 = SCHED_MASK | CU_CTX_MAP_HOST.0 | CU_CTX_LMEM_RESIZE_TO_MAX.0 | CU_CTX_SYNC_MEMOPS.0;
/// Core dumps: the driver ends the worker, or leaves a FIFO per session.
const COREDUMP: u32 = CU_CTX_COREDUMP_ENABLE.0 | CU_CTX_USER_COREDUMP_ENABLE.0;

/// Checks the flags of a new context: scheduling, mapped host memory,
/// local-memory sizing and synchronous memory operations pass; core dumps
/// are not supported (`CUDA_ERROR_NOT_SUPPORTED`); unknown bits are
/// invalid, as the driver says of them.
pub(super) fn ctx_flags(flags: u32) -> Result<u32, CuError> {
    if flags & COREDUMP != 0 {
        return Err(CuError::NOT_SUPPORTED);
    }
    let sched = flags & SCHED_MASK;
    let known_sched = [CU_CTX_SCHED_AUTO, CU_CTX_SCHED_SPIN, CU_CTX_SCHED_YIELD, CU_CTX_SCHED_BLOCKING_SYNC].iter().any(|s| s.0 == sched);
    if flags & !SESSION_FLAGS != 0 || !known_sched {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(flags)
}

/// Checks a limit a guest sets: the stack, printf buffer, device heap,
/// device-runtime depths and L2 fetch granularity act on its own context;
/// the persisting L2 set-aside acts on the device and is cut to the
/// session's share ([`persisting_l2`]).
pub(super) fn ctx_limit(limit: u32) -> Result<(), CuError> {
    match CUlimit(limit) {
        CU_LIMIT_STACK_SIZE
        | CU_LIMIT_PRINTF_FIFO_SIZE
        | CU_LIMIT_MALLOC_HEAP_SIZE
        | CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH
        | CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT
        | CU_LIMIT_MAX_L2_FETCH_GRANULARITY
        | CU_LIMIT_PERSISTING_L2_CACHE_SIZE => Ok(()),
        _ => Err(CuError::INVALID_VALUE),
    }
}

/// The persisting-L2 set-aside a session gets when it asks for `want`
/// bytes: at most `percent` of the device's largest (`max`). The driver
/// rounds what it is given to its own granularity.
pub(super) fn persisting_l2(want: u64, max: u64, percent: u32) -> u64 {
    want.min(max.saturating_mul(u64::from(percent.min(100))) / 100)
}

/// Checks a function attribute a guest sets: dynamic shared memory, the
/// shared-memory carve-out and the cluster attributes; the rest are
/// read-only.
pub(super) fn func_attribute(attr: i32) -> Result<(), CuError> {
    match CUfunction_attribute(attr as u32) {
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        | CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        | CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH
        | CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT
        | CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH
        | CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        | CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE => Ok(()),
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
        assert_eq!(ctx_limit(6), Ok(()));
        assert_eq!(persisting_l2(1 << 30, 100 << 20, 25), 25 << 20);
        assert_eq!(persisting_l2(1 << 20, 100 << 20, 25), 1 << 20);
        assert_eq!(persisting_l2(1 << 20, 100 << 20, 0), 0);
        assert_eq!(ctx_limit(99), Err(CuError::INVALID_VALUE));
        assert_eq!(func_attribute(8), Ok(()));
        assert_eq!(func_attribute(0), Err(CuError::INVALID_VALUE));
        assert_eq!(func_attribute(10), Err(CuError::INVALID_VALUE));
    }
}
