//! Replies with a fixed layout.

use zerocopy::little_endian::{F32, I32, I64, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// [`GlobalRep::flags`]: the global is a `__managed__` variable (the
/// driver says so of its address).
pub const GLOBAL_MANAGED: u32 = 1;

// Replies.
wire_structs! {
    /// `Hello` reply.
    pub struct HelloRep {
        /// The version both sides will speak.
        pub version: U16,
        /// The address space the session's handles carry (the hello's;
        /// a backend from before spaces answers 0 whatever was asked).
        pub space: U16,
        /// `cuDriverGetVersion` of the backend's driver.
        pub driver_version: I32,
        /// Session number, for logs on both sides.
        pub session_id: U64,
        /// Executor name, NUL-padded (`cuda`, `host`).
        pub executor: [u8; 16],
        /// The session's token: a new connection that opens with
        /// `Resume` and this token takes the session back after a
        /// checkpoint (the backend's peer check applies too).
        pub resume_token: [u8; 16],
    }
    /// `DeviceStatus` reply: memory as the session sees it, and the
    /// device's own gauges. A gauge the backend cannot read is `u32::MAX`.
    pub struct DeviceStatusRep {
        /// Device memory the session may use: the device's, or its quota.
        pub mem_total: U64,
        /// Device memory the session holds.
        pub mem_used: U64,
        /// Percent of the last sample period a kernel ran (device-wide).
        pub gpu_util: U32,
        /// Percent of it device memory was read or written (device-wide).
        pub mem_util: U32,
        /// Temperature in degrees Celsius.
        pub temperature: U32,
        /// Power draw in milliwatts.
        pub power_mw: U32,
        /// The driver's version (`580.159.04`), NUL-padded.
        pub driver_version: [u8; 32],
        /// The PCIe link now: generation and lanes.
        pub pcie_gen: U32,
        /// Lanes.
        pub pcie_width: U32,
        /// The most the link may run at: generation and lanes.
        pub pcie_max_gen: U32,
        /// Lanes.
        pub pcie_max_width: U32,
    }
    /// A signed 32-bit answer (counts, versions, attribute values, devices).
    pub struct I32Rep {
        /// The value.
        pub value: I32,
    }
    /// Replies that return one 64-bit value.
    pub struct U64Rep {
        /// The value.
        pub value: U64,
    }
    /// Head of the `DeviceGetProperties` reply: `attr_count` [`AttrPair`]s
    /// follow.
    pub struct DevicePropsHead {
        /// `cuDeviceTotalMem`.
        pub total_mem: U64,
        /// `cuDeviceGetUuid`.
        pub uuid: [u8; 16],
        /// `cuDeviceGetName`, NUL-padded.
        pub name: [u8; 256],
        /// Number of [`AttrPair`]s that follow.
        pub attr_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// One device attribute.
    pub struct AttrPair {
        /// `CUdevice_attribute`.
        pub attr: I32,
        /// Its value.
        pub value: I32,
    }
    /// Replies that return one object id.
    pub struct HandleRep {
        /// The new object's id.
        pub handle: U64,
    }
    /// Head of the `ModuleGetFunction` reply: `param_count` [`ParamInfo`]s
    /// follow.
    pub struct FunctionHead {
        /// Function id.
        pub function: U64,
        /// Number of kernel parameters.
        pub param_count: U32,
        /// Size of the packed parameter buffer in bytes.
        pub param_bytes: U32,
    }
    /// Head of the `ModuleFunctionNames` reply: `bytes` bytes of
    /// NUL-terminated names follow, `count` of them.
    pub struct NamesHead {
        /// Number of names.
        pub count: U32,
        /// Bytes of names that follow.
        pub bytes: U32,
        /// How many names the module has in all.
        pub total: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Offset and size of one kernel parameter in the packed buffer.
    pub struct ParamInfo {
        /// Byte offset.
        pub offset: U32,
        /// Size in bytes.
        pub size: U32,
    }
    /// `ModuleGetGlobal` reply.
    pub struct GlobalRep {
        /// Device address.
        pub dptr: U64,
        /// Size in bytes.
        pub size: U64,
        /// [`GLOBAL_MANAGED`]: a `__managed__` variable.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Replies that return a device address.
    pub struct DptrRep {
        /// Device address.
        pub dptr: U64,
    }
    /// `MemGetInfo` reply.
    pub struct MemInfoRep {
        /// Free bytes.
        pub free: U64,
        /// Total bytes.
        pub total: U64,
    }
    /// `EventElapsedTime` reply.
    pub struct ElapsedRep {
        /// Milliseconds.
        pub ms: F32,
    }
    /// `CtxGetInfo` reply.
    pub struct CtxInfoRep {
        /// `cuCtxGetApiVersion`.
        pub api_version: U32,
        /// `cuCtxGetFlags`.
        pub flags: U32,
        /// Least (numerically greatest) stream priority.
        pub least_priority: I32,
        /// Greatest (numerically least) stream priority.
        pub greatest_priority: I32,
    }
    /// `TensorMapEncode` reply: the 128-byte `CUtensorMap`.
    pub struct TensorMapRep {
        /// The descriptor.
        pub bytes: [u8; 128],
    }
    /// `Occupancy` reply.
    pub struct OccupancyRep {
        /// Kind 0: blocks; kind 1: minimum grid size; kind 2: bytes.
        pub a: I64,
        /// Kind 1: block size; otherwise 0.
        pub b: I64,
    }
}
