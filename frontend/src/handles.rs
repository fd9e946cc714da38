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
/// does not provide across the connection (managed and mapped host memory,
/// pageable-memory access, memory-pool IPC and host-located pools, IPC and
/// interop handles (including shareable handles of virtual memory),
/// multi-device cooperative launches, stream memory operations,
/// multicast). Cooperative and cluster launches, the default memory pool,
/// virtual memory management and tensor maps are provided, so their
/// attributes read as the GPU reports them.
pub const MASKED_ATTRS: &[i32] = &[
    19, 83, 88, 89, 91, 92, 93, 94, 96, 98, 100, 101, 103, 104, 105, 107, 110, 112, 113, 114, 116, 117, 118, 119, 121, 122, 123, 124, 125,
    128, 132, 135, 138, 141, 142, 143, 144, 145, 146,
];

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
