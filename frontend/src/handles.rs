//! What the client hands out and caches: object ids, kernels with their
//! parameter layouts, device properties, and what the backend said about
//! itself.

use std::collections::HashMap;
use std::sync::Arc;

/// A context id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Context(pub u64);
/// A module id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Module(pub u64);
/// A stream id; [`Stream::DEFAULT`] is the context's default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream(pub u64);
/// An event id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Event(pub u64);
/// A memory pool of the program's own (`cuMemPoolCreate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemPool(pub u64);

impl Stream {
    /// The default (null) stream.
    pub const DEFAULT: Stream = Stream(0);
}

/// Offset and size of a kernel parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Byte offset in the packed buffer.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A kernel and its parameter layout (learned at lookup).
#[derive(Debug, Clone)]
pub struct Function {
    /// The function id.
    pub id: u64,
    /// Parameters in order.
    pub params: Arc<[Param]>,
    /// Size of the packed parameter buffer.
    pub param_bytes: usize,
}

impl Function {
    /// Packs one byte slice per parameter (the values the `kernelParams`
    /// pointers point to) into the function's layout. Sizes must match.
    pub fn pack(&self, args: &[&[u8]]) -> crate::Result<Vec<u8>> {
        let bad = || crate::Error::from(pvgpu_ring::CuError::INVALID_VALUE);
        if args.len() != self.params.len() {
            return Err(bad());
        }
        let mut packed = vec![0u8; self.param_bytes];
        for (a, p) in args.iter().zip(self.params.iter()) {
            let at = p.offset as usize;
            let slot = packed.get_mut(at..at + a.len()).filter(|_| a.len() == p.size as usize).ok_or_else(bad)?;
            slot.copy_from_slice(a);
        }
        Ok(packed)
    }
}

/// Facts about a context.
pub use pvgpu_ring::proto::CtxInfo;

/// What the backend said about itself at connection.
#[derive(Debug, Clone)]
pub struct BackendInfo {
    /// Session number (also in the backend's log).
    pub session_id: u64,
    /// `cuda` or `host` (the test double).
    pub executor: String,
    /// `cuDriverGetVersion` of the backend's driver.
    pub driver_version: i32,
    /// Transport in use.
    pub transport: &'static str,
}

/// Device attributes reported as 0: features of the local driver that pvgpu
/// does not provide across the connection (mapped host memory, direct
/// access to managed memory from the host (the drop-in library provides
/// managed memory, with concurrent access, without it: the CPU's pages are
/// its own), pageable-memory access, host-located
/// pools, Windows, fabric and interop handles, GPUDirect RDMA, multi-device
/// cooperative launches, multicast). Cooperative and cluster launches, the
/// default memory pool, virtual memory management (with compressible
/// memory and file-descriptor shareable handles), interprocess memory and
/// events, pools shared by file descriptor (the backend leaves only that
/// handle type in `CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES`),
/// tensor maps and stream memory operations are provided, so their
/// attributes read as the GPU reports
/// them.
pub const MASKED_ATTRS: &[CUdevice_attribute] = &[
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY,
    CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
    CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH,
    CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
    CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
    CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
    CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED,
];

use pvgpu_ring::cuda::api::*;
pub use pvgpu_ring::device_status::DeviceStatus;

/// Properties of a device, fetched once and cached.
#[derive(Debug, Clone)]
pub struct DeviceProps {
    /// Name.
    pub name: String,
    /// UUID.
    pub uuid: [u8; 16],
    /// Total memory in bytes.
    pub total_mem: u64,
    /// Attributes by number.
    pub attrs: HashMap<i32, i32>,
}
