//! The fixed-layout structs of protocol version 1.
//!
//! A request without a tail is one struct named after its command
//! ([`MemAlloc`]); a request with a tail has a head struct here
//! ([`ModuleLoadHead`]) and a command type in [`super::body`] that pairs it
//! with its tail. Replies are named `...Rep`. Every field is little-endian
//! and unaligned; `reserved` fields are sent as zero and ignored.

use super::DecodeError;
use zerocopy::little_endian::{F32, I32, I64, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Where bulk data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataLoc {
    /// In this message, right after the fixed struct (TCP).
    Inline,
    /// In the shared data area at `offset` (ring transports).
    Area {
        /// Byte offset into the data area.
        offset: u64,
    },
}

/// Wire form of a bulk-data reference.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct DataRef {
    /// 0: inline, 1: data area.
    pub loc: U32,
    /// Reserved, zero.
    pub reserved: U32,
    /// Offset into the data area (zero when inline).
    pub offset: U64,
    /// Length in bytes.
    pub len: U64,
}

impl DataRef {
    /// Inline data of `len` bytes.
    pub fn inline(len: usize) -> Self {
        DataRef { loc: 0.into(), reserved: 0.into(), offset: 0.into(), len: (len as u64).into() }
    }

    /// `len` bytes at `offset` in the data area.
    pub fn area(offset: u64, len: usize) -> Self {
        DataRef { loc: 1.into(), reserved: 0.into(), offset: offset.into(), len: (len as u64).into() }
    }

    /// Decodes the location.
    pub fn location(&self) -> Result<DataLoc, DecodeError> {
        match self.loc.get() {
            0 if self.offset.get() == 0 => Ok(DataLoc::Inline),
            1 => Ok(DataLoc::Area { offset: self.offset.get() }),
            other => Err(DecodeError::BadDataRef(other)),
        }
    }
}

/// Facts about a context: what [`CtxInfoRep`] carries, in native types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtxInfo {
    /// `cuCtxGetApiVersion`.
    pub api_version: u32,
    /// `cuCtxGetFlags`.
    pub flags: u32,
    /// Least (numerically greatest) stream priority.
    pub least_priority: i32,
    /// Greatest (numerically least) stream priority.
    pub greatest_priority: i32,
}

impl From<CtxInfo> for CtxInfoRep {
    fn from(i: CtxInfo) -> Self {
        CtxInfoRep {
            api_version: i.api_version.into(),
            flags: i.flags.into(),
            least_priority: i.least_priority.into(),
            greatest_priority: i.greatest_priority.into(),
        }
    }
}

impl From<CtxInfoRep> for CtxInfo {
    fn from(r: CtxInfoRep) -> Self {
        CtxInfo {
            api_version: r.api_version.get(),
            flags: r.flags.get(),
            least_priority: r.least_priority.get(),
            greatest_priority: r.greatest_priority.get(),
        }
    }
}

/// Copies a NUL-padded string into a fixed array, truncating if needed.
pub fn fixed_str<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// Reads a NUL-padded string out of a fixed array (lossy for non-UTF-8).
pub fn str_from_fixed(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Declares wire structs: `#[repr(C)]`, zerocopy-derived, zero by default.
macro_rules! wire_structs {
    ($( $(#[$m:meta])* pub struct $name:ident { $( $(#[$fm:meta])* pub $f:ident : $t:ty ),* $(,)? } )*) => {
        $(
            $(#[$m])*
            #[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq)]
            #[repr(C)]
            pub struct $name { $( $(#[$fm])* pub $f: $t ),* }

            impl Default for $name {
                fn default() -> Self {
                    <Self as zerocopy::FromZeros>::new_zeroed()
                }
            }
        )*
    };
}

// Requests without a payload.
wire_structs! {
    /// `Hello`'s companion: orderly end of the session (no payload).
    pub struct Goodbye {}
    /// A round trip that does nothing (no payload).
    pub struct Nop {}
    /// `cuInit` (no payload).
    pub struct Init {}
    /// `cuDriverGetVersion` (no payload).
    pub struct DriverGetVersion {}
    /// What monitoring tools ask of a device (NVML in the guest).
    pub struct DeviceStatus {
        /// Device ordinal.
        pub device: I32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// The device address of the session's data area (no payload): where
    /// kernels reach page-locked memory the program allocated in it.
    pub struct DataAreaDevice {}
    /// `cuDeviceGetCount` (no payload).
    pub struct DeviceGetCount {}
}

// Requests: devices and contexts.
wire_structs! {
    /// First message on every connection: version negotiation.
    pub struct Hello {
        /// Oldest protocol version the frontend speaks.
        pub min_version: U16,
        /// Newest protocol version the frontend speaks.
        pub max_version: U16,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuDeviceGet`.
    pub struct DeviceGet {
        /// Device ordinal.
        pub device: I32,
    }
    /// Name, UUID, total memory and every attribute of a device.
    pub struct DeviceGetProperties {
        /// Device ordinal.
        pub device: I32,
    }
    /// `cuDeviceGetAttribute` of one attribute.
    pub struct DeviceGetAttribute {
        /// Device ordinal.
        pub device: I32,
        /// `CUdevice_attribute`.
        pub attr: I32,
    }
    /// `cuDevicePrimaryCtxRetain`.
    pub struct PrimaryCtxRetain {
        /// Device ordinal.
        pub device: I32,
    }
    /// `cuDevicePrimaryCtxRelease`.
    pub struct PrimaryCtxRelease {
        /// Device ordinal.
        pub device: I32,
    }
    /// `cuCtxCreate`.
    pub struct CtxCreate {
        /// Device ordinal.
        pub device: I32,
        /// `CUctx_flags`.
        pub flags: U32,
    }
    /// `cuCtxDestroy`.
    pub struct CtxDestroy {
        /// Context id.
        pub ctx: U64,
    }
    /// `cuCtxSynchronize`.
    pub struct CtxSynchronize {
        /// Context id.
        pub ctx: U64,
    }
    /// Facts about a context (`cuCtxGetApiVersion`, `cuCtxGetFlags`,
    /// `cuCtxGetStreamPriorityRange`).
    pub struct CtxGetInfo {
        /// Context id.
        pub ctx: U64,
    }
    /// `cuCtxGetLimit` / `cuCtxSetLimit`.
    pub struct CtxLimit {
        /// Context id.
        pub ctx: U64,
        /// `CUlimit`.
        pub limit: U32,
        /// 1 to set, 0 to get.
        pub set: U32,
        /// Value to set.
        pub value: U64,
    }
}

// Requests: modules and functions.
wire_structs! {
    /// Head of `ModuleLoad`: inline image bytes follow when `image` is inline.
    pub struct ModuleLoadHead {
        /// Context id.
        pub ctx: U64,
        /// The image: PTX text, cubin or fatbin.
        pub image: DataRef,
    }
    /// `cuModuleLoadData` of an image the backend may hold already: named
    /// by its SHA-256 and length instead of sent.
    pub struct ModuleLoadCached {
        /// Context id.
        pub ctx: U64,
        /// The image's length in bytes.
        pub len: U64,
        /// The image's SHA-256.
        pub sha256: [u8; 32],
    }
    /// `cuModuleUnload`.
    pub struct ModuleUnload {
        /// Module id.
        pub module: U64,
    }
    /// Head of `ModuleGetFunction` and `ModuleGetGlobal`: `name_len` bytes
    /// of name follow.
    pub struct SymbolHead {
        /// Module id.
        pub module: U64,
        /// Bytes of name that follow.
        pub name_len: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// The names of a module's kernels (`cuModuleEnumerateFunctions`,
    /// `cuLibraryEnumerateKernels`).
    pub struct ModuleFunctionNames {
        /// Module id.
        pub module: U64,
    }
    /// `cuFuncGetAttribute`.
    pub struct FuncGetAttribute {
        /// Function id.
        pub function: U64,
        /// `CUfunction_attribute`.
        pub attr: I32,
        /// Reserved, zero.
        pub reserved: I32,
    }
    /// `cuFuncSetAttribute`.
    pub struct FuncSetAttribute {
        /// Function id.
        pub function: U64,
        /// `CUfunction_attribute`.
        pub attr: I32,
        /// Value to set.
        pub value: I32,
    }
    /// The occupancy calculator (`cuOccupancy*`).
    pub struct Occupancy {
        /// Function id.
        pub function: U64,
        /// 0: max active blocks per multiprocessor (`block_size`,
        /// `dyn_smem`); 1: max potential block size (`dyn_smem`, `limit`);
        /// 2: available dynamic shared memory per block (`limit` blocks of
        /// `block_size`).
        pub kind: U32,
        /// `CU_OCCUPANCY_*` flags.
        pub flags: U32,
        /// Block size.
        pub block_size: I32,
        /// Block-size limit (kind 1) or number of blocks (kind 2).
        pub limit: I32,
        /// Dynamic shared memory per block.
        pub dyn_smem: U64,
    }
    /// Head of `LaunchKernel`: `param_len` bytes of packed parameters follow,
    /// laid out as the function reply described.
    pub struct LaunchHead {
        /// Function id.
        pub function: U64,
        /// Grid dimensions.
        pub grid: [U32; 3],
        /// Block dimensions.
        pub block: [U32; 3],
        /// Dynamic shared memory in bytes.
        pub shared_mem: U32,
        /// Bytes of packed parameters that follow.
        pub param_len: U32,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
}

// Requests: launches with attributes.
wire_structs! {
    /// Head of `LaunchKernelEx`: `attr_count` [`LaunchAttr`]s then
    /// `param_len` bytes of packed parameters follow.
    pub struct LaunchExHead {
        /// Function id.
        pub function: U64,
        /// Grid dimensions.
        pub grid: [U32; 3],
        /// Block dimensions.
        pub block: [U32; 3],
        /// Dynamic shared memory in bytes.
        pub shared_mem: U32,
        /// Bytes of packed parameters.
        pub param_len: U32,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// Number of attributes.
        pub attr_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// One launch attribute, as `CUlaunchAttribute` holds it: its id and its
    /// 64-byte value.
    pub struct LaunchAttr {
        /// `CUlaunchAttributeID`.
        pub id: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// The value, laid out as the attribute's member of
        /// `CUlaunchAttributeValue`.
        pub value: [u8; 64],
    }
    /// Head of `OccupancyClusters`: `attr_count` [`LaunchAttr`]s follow.
    pub struct OccupancyClustersHead {
        /// Function id.
        pub function: U64,
        /// Grid dimensions.
        pub grid: [U32; 3],
        /// Block dimensions.
        pub block: [U32; 3],
        /// Dynamic shared memory in bytes.
        pub shared_mem: U32,
        /// 0: `cuOccupancyMaxActiveClusters`; 1:
        /// `cuOccupancyMaxPotentialClusterSize`.
        pub kind: U32,
        /// Number of attributes.
        pub attr_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuTensorMapEncodeTiled` (kind 0) and `cuTensorMapEncodeIm2col`
    /// (kind 1): the descriptor is built by the backend's driver.
    pub struct TensorMapEncode {
        /// 0: tiled; 1: im2col.
        pub kind: U32,
        /// `CUtensorMapDataType`.
        pub data_type: U32,
        /// Rank, 1 to 5.
        pub rank: U32,
        /// `CUtensorMapInterleave`.
        pub interleave: U32,
        /// `CUtensorMapSwizzle`.
        pub swizzle: U32,
        /// `CUtensorMapL2promotion`.
        pub l2_promotion: U32,
        /// `CUtensorMapFloatOOBfill`.
        pub oob_fill: U32,
        /// Im2col: channels per pixel.
        pub channels_per_pixel: U32,
        /// Device address of the tensor.
        pub global_address: U64,
        /// Size of each dimension, in elements.
        pub global_dim: [U64; 5],
        /// Stride of dimensions 1.. in bytes.
        pub global_strides: [U64; 4],
        /// Tiled: box size per dimension.
        pub box_dim: [U32; 5],
        /// Traversal stride per dimension.
        pub element_strides: [U32; 5],
        /// Im2col: lower corner of the bounding box.
        pub pixel_box_lower: [I32; 3],
        /// Im2col: upper corner of the bounding box.
        pub pixel_box_upper: [I32; 3],
        /// Im2col: pixels per column.
        pub pixels_per_column: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

// Requests: memory.
wire_structs! {
    /// `cuMemAllocAsync`: from the device's default pool, ordered on a
    /// stream.
    pub struct MemAllocAsync {
        /// Context id.
        pub ctx: U64,
        /// Bytes.
        pub size: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuMemFreeAsync`.
    pub struct MemFreeAsync {
        /// Device address from `MemAllocAsync` (or `MemAlloc`).
        pub dptr: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` of the default
    /// pool of a context's device.
    pub struct MemPoolAttribute {
        /// Context id.
        pub ctx: U64,
        /// `CUmemPool_attribute`.
        pub attr: U32,
        /// 1 to set, 0 to get.
        pub set: U32,
        /// Value to set.
        pub value: U64,
    }
    /// Head of `Memcpy2D`: a 2D copy of `height` rows of `width` bytes.
    /// The host side (kinds 1 and 2) is `data`, rows packed; inline bytes
    /// follow when it is inline and the copy goes to the device.
    pub struct Memcpy2DHead {
        /// 1: host to device; 2: device to host; 3: device to device.
        pub kind: U32,
        /// `COPY_ASYNC`, `COPY_PINNED`.
        pub flags: U32,
        /// Destination device address (kinds 1, 3).
        pub dst: U64,
        /// Destination pitch in bytes.
        pub dst_pitch: U64,
        /// Source device address (kinds 2, 3).
        pub src: U64,
        /// Source pitch in bytes.
        pub src_pitch: U64,
        /// Bytes per row.
        pub width: U64,
        /// Rows.
        pub height: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// The host side's bytes, `width * height` of them.
        pub data: DataRef,
    }
    /// `cuMemsetD2D8/16/32` and their `Async` forms.
    pub struct Memset2D {
        /// Device address.
        pub dptr: U64,
        /// Pitch in bytes.
        pub pitch: U64,
        /// The value; the low `elem_size` bytes are used.
        pub value: U32,
        /// 1, 2 or 4.
        pub elem_size: U32,
        /// Elements per row.
        pub width: U64,
        /// Rows.
        pub height: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuMemAlloc`.
    pub struct MemAlloc {
        /// Context id.
        pub ctx: U64,
        /// Bytes to allocate.
        pub size: U64,
    }
    /// `cuMemFree`.
    pub struct MemFree {
        /// Device address returned by `MemAlloc`.
        pub dptr: U64,
    }
    /// `cuMemGetInfo`.
    pub struct MemGetInfo {
        /// Context id.
        pub ctx: U64,
    }
    /// `cuMemsetD8/D16/D32` and their `Async` forms.
    pub struct Memset {
        /// Device address.
        pub dptr: U64,
        /// Number of elements.
        pub count: U64,
        /// The value; the low `elem_size` bytes are used.
        pub value: U32,
        /// 1, 2 or 4.
        pub elem_size: U32,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// Head of `MemcpyHtoD`: inline data follows when `data` is inline.
    pub struct HtoDHead {
        /// Device address.
        pub dst: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// `COPY_ASYNC`, `COPY_PINNED`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Source bytes.
        pub data: DataRef,
    }
    /// `cuMemcpyDtoH` / `cuMemcpyDtoHAsync`.
    pub struct MemcpyDtoH {
        /// Device address.
        pub src: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// `COPY_ASYNC`, `COPY_PINNED`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Where the bytes go: inline in the reply, or the data area.
        pub data: DataRef,
    }
    /// `cuMemcpyDtoD` / `cuMemcpyDtoDAsync`.
    pub struct MemcpyDtoD {
        /// Destination device address.
        pub dst: U64,
        /// Source device address.
        pub src: U64,
        /// Bytes.
        pub len: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// `COPY_ASYNC`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

// Requests: virtual memory management (`cuMemAddressReserve`, `cuMemCreate`,
// `cuMemMap`, ...). Reservations, physical allocations and mappings belong
// to the context they were made in.
wire_structs! {
    /// `cuMemGetAllocationGranularity` for device memory of a device (no
    /// context needed, as with the driver).
    pub struct MemGranularity {
        /// Device ordinal.
        pub device: I32,
        /// 0: minimum; 1: recommended.
        pub option: U32,
    }
    /// `cuMemAddressReserve`: a range of device addresses, no memory.
    pub struct MemAddressReserve {
        /// Context id.
        pub ctx: U64,
        /// Bytes.
        pub size: U64,
        /// Alignment, 0 for the granularity.
        pub alignment: U64,
        /// Address wanted (a hint), 0 for any.
        pub addr: U64,
    }
    /// `cuMemAddressFree` of a whole reservation.
    pub struct MemAddressFree {
        /// Start of the reservation.
        pub ptr: U64,
        /// Its size.
        pub size: U64,
    }
    /// `cuMemCreate`: physical device memory on a context's device.
    pub struct MemCreate {
        /// Context id.
        pub ctx: U64,
        /// Bytes, a multiple of the granularity.
        pub size: U64,
    }
    /// `cuMemRelease` of a physical allocation.
    pub struct MemRelease {
        /// Handle from `MemCreate`.
        pub handle: U64,
    }
    /// `cuMemMap`: `size` bytes of a physical allocation from `offset`, at
    /// `ptr` inside a reservation.
    pub struct MemMap {
        /// Device address.
        pub ptr: U64,
        /// Bytes.
        pub size: U64,
        /// Offset in the physical allocation.
        pub offset: U64,
        /// Handle from `MemCreate`.
        pub handle: U64,
    }
    /// `cuMemUnmap` of whole mappings.
    pub struct MemUnmap {
        /// Device address.
        pub ptr: U64,
        /// Bytes.
        pub size: U64,
    }
    /// `cuMemSetAccess` from the context's device to whole mappings.
    pub struct MemSetAccess {
        /// Device address.
        pub ptr: U64,
        /// Bytes.
        pub size: U64,
        /// `CUmemAccess_flags`: 0 none, 1 read, 3 read and write.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

// Requests: streams and events.
wire_structs! {
    /// `cuStreamCreate` / `cuStreamCreateWithPriority`.
    pub struct StreamCreate {
        /// Context id.
        pub ctx: U64,
        /// `CUstream_flags`.
        pub flags: U32,
        /// Priority (`cuStreamCreateWithPriority`), 0 by default.
        pub priority: I32,
    }
    /// `cuStreamDestroy`.
    pub struct StreamDestroy {
        /// Stream id.
        pub stream: U64,
    }
    /// `cuStreamSynchronize`.
    pub struct StreamSynchronize {
        /// Stream id.
        pub stream: U64,
    }
    /// `cuStreamQuery`.
    pub struct StreamQuery {
        /// Stream id.
        pub stream: U64,
    }
    /// `cuStreamWaitEvent`.
    pub struct StreamWaitEvent {
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// Event id.
        pub event: U64,
        /// Flags (0).
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuEventCreate`.
    pub struct EventCreate {
        /// Context id.
        pub ctx: U64,
        /// `CUevent_flags`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuEventRecord`.
    pub struct EventRecord {
        /// Event id.
        pub event: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuEventQuery`.
    pub struct EventQuery {
        /// Event id.
        pub event: U64,
    }
    /// `cuEventSynchronize`.
    pub struct EventSynchronize {
        /// Event id.
        pub event: U64,
    }
    /// `cuEventElapsedTime`.
    pub struct EventElapsedTime {
        /// Start event id.
        pub start: U64,
        /// End event id.
        pub end: U64,
    }
    /// `cuEventDestroy`.
    pub struct EventDestroy {
        /// Event id.
        pub event: U64,
    }
}

// Replies.
wire_structs! {
    /// `Hello` reply.
    pub struct HelloRep {
        /// The version both sides will speak.
        pub version: U16,
        /// Reserved, zero.
        pub reserved: U16,
        /// `cuDriverGetVersion` of the backend's driver.
        pub driver_version: I32,
        /// Session number, for logs on both sides.
        pub session_id: U64,
        /// Executor name, NUL-padded (`cuda`, `host`).
        pub executor: [u8; 16],
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
