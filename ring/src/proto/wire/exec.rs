//! Requests of modules, functions, launches, streams and events.

use super::*;
use zerocopy::little_endian::{I32, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

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
    /// `cuLibraryEnumerateKernels`), a page at a time: those from index
    /// `first` that fit in `max_bytes` (each with its NUL), so that a reply
    /// fits the smallest reply channel whatever the module holds.
    pub struct ModuleFunctionNames {
        /// Module id.
        pub module: U64,
        /// Index of the first name wanted.
        pub first: U32,
        /// Most bytes of names the reply may carry (at least
        /// [`crate::proto::MAX_NAME_LEN`] + 1).
        pub max_bytes: U32,
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
    /// `cuStreamGetAttribute`, `cuStreamSetAttribute`,
    /// `cuStreamCopyAttributes`.
    pub struct StreamAttr {
        /// Context id (the stream's, or the context whose default stream
        /// is meant).
        pub ctx: U64,
        /// Stream id read or changed, 0 for the default stream.
        pub stream: U64,
        /// Stream id copied from (`NODE_ATTR_COPY`), else 0.
        pub src: U64,
        /// `CUstreamAttrID` (a `CUlaunchAttributeID`); 0 when copying.
        pub attr: U32,
        /// `NODE_ATTR_GET`, `NODE_ATTR_SET` or `NODE_ATTR_COPY`.
        pub op: U32,
        /// The value set, laid out as the attribute's member of
        /// `CUstreamAttrValue`; zero otherwise.
        pub value: [u8; 64],
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
    /// The library's own query (`destroy` 0) or destroy (1) of the event it
    /// waits on to run a host function, made from its own thread: it must
    /// not disturb a capture the program has under way on another thread.
    pub struct HostFnEvent {
        /// Event id.
        pub event: U64,
        /// 0: query, 1: destroy.
        pub destroy: U32,
        /// Reserved, zero.
        pub reserved: U32,
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
