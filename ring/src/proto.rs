//! Wire protocol, version 1.
//!
//! Every message is a 24-byte [`Header`] followed by `payload_len` bytes of
//! payload. The payload of each opcode starts with one fixed-layout struct
//! (all fields little-endian and unaligned, so any byte offset decodes) and
//! may be followed by a variable tail whose length the struct declares: a
//! symbol name, kernel parameters, or bulk data carried inline.
//!
//! The same encoding travels in ring records (local shared memory, Xen
//! grants) and in TCP frames. Bulk data is either inline (TCP) or lives in the
//! shared data area and is named by a [`DataRef`].
//!
//! Decoding never trusts the peer: [`Request::decode`] checks the version,
//! the opcode, that the payload is exactly as long as the struct plus its
//! declared tail, and that names are plain NUL-free UTF-8 of bounded length.
//! Anything else is a [`DecodeError`]. See `docs/protocol.md` for the
//! sequence diagrams and the versioning rules.

use crate::cuda::CuResult;
use zerocopy::little_endian::{F32, I32, I64, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// Size of [`Header`] on the wire.
pub const HEADER_LEN: usize = 24;

/// Largest payload a peer may send in one message (64 MiB of bulk data plus
/// room for the fixed part). Larger copies are split by the frontend.
pub const MAX_PAYLOAD: usize = (64 << 20) + 4096;

/// Largest kernel or global name accepted.
pub const MAX_NAME_LEN: usize = 4096;

/// Largest kernel parameter buffer accepted (CUDA's own limit is 32 764
/// bytes on Volta and later).
pub const MAX_PARAM_BYTES: usize = 32 * 1024;

/// Largest number of kernel parameters described in a function reply.
pub const MAX_PARAMS: usize = 1024;

/// Request flag: the sender waits for a reply. Without it the backend sends
/// none, and an error is kept for the next request that has it.
pub const FLAG_REPLY: u32 = 1;
/// Set on every reply.
pub const FLAG_IS_REPLY: u32 = 2;

/// Copy flag: the copy is ordered on its stream and need not be complete
/// when the backend moves on (the `*Async` driver calls).
pub const COPY_ASYNC: u32 = 1;
/// Copy flag: the host side is page-locked memory the program allocated in
/// the data area (`cuMemAllocHost`); with [`COPY_ASYNC`] the backend only
/// queues the copy, and the program owns the bytes until its stream is
/// synchronised, as with CUDA's own pinned memory.
pub const COPY_PINNED: u32 = 2;

/// Message header.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Header {
    /// [`PROTOCOL_VERSION`].
    pub version: U16,
    /// An [`Opcode`]; a reply repeats its request's opcode.
    pub opcode: U16,
    /// [`FLAG_REPLY`], [`FLAG_IS_REPLY`].
    pub flags: U32,
    /// Chosen by the frontend, echoed in the reply.
    pub request_id: U64,
    /// Bytes of payload after the header.
    pub payload_len: U32,
    /// Replies: the `CUresult` of the call. Requests: zero.
    pub status: U32,
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER_LEN);

impl Header {
    /// A request header.
    pub fn request(opcode: Opcode, request_id: u64, flags: u32, payload_len: usize) -> Self {
        Header {
            version: PROTOCOL_VERSION.into(),
            opcode: (opcode as u16).into(),
            flags: flags.into(),
            request_id: request_id.into(),
            payload_len: (payload_len as u32).into(),
            status: 0.into(),
        }
    }

    /// The reply header to `self`.
    pub fn reply(&self, status: CuResult, payload_len: usize) -> Self {
        Header {
            version: PROTOCOL_VERSION.into(),
            opcode: self.opcode,
            flags: FLAG_IS_REPLY.into(),
            request_id: self.request_id,
            payload_len: (payload_len as u32).into(),
            status: status.0.into(),
        }
    }

    /// Whether the sender waits for a reply.
    pub fn wants_reply(&self) -> bool {
        self.flags.get() & FLAG_REPLY != 0
    }

    /// Parses a header from the first [`HEADER_LEN`] bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (h, _) = Header::read_from_prefix(bytes).map_err(|_| DecodeError::Truncated)?;
        if h.version.get() != PROTOCOL_VERSION {
            return Err(DecodeError::Version(h.version.get()));
        }
        if h.payload_len.get() as usize > MAX_PAYLOAD {
            return Err(DecodeError::TooLarge(h.payload_len.get() as usize));
        }
        Ok(h)
    }
}

macro_rules! opcodes {
    ($( $(#[$m:meta])* $name:ident = $val:expr ),* $(,)?) => {
        /// Operation codes of protocol version 1.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Opcode { $( $(#[$m])* $name = $val ),* }

        impl Opcode {
            /// Every opcode, in numeric order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$name ),* ];
        }

        impl TryFrom<u16> for Opcode {
            type Error = DecodeError;
            fn try_from(v: u16) -> Result<Self, DecodeError> {
                match v {
                    $( $val => Ok(Opcode::$name), )*
                    other => Err(DecodeError::UnknownOpcode(other)),
                }
            }
        }
    };
}

opcodes! {
    /// First message on every connection: version negotiation.
    Hello = 1,
    /// Orderly end of the session.
    Goodbye = 2,
    /// Does nothing; measures the round trip.
    Nop = 3,
    /// `cuInit`.
    Init = 4,
    /// `cuDriverGetVersion`.
    DriverGetVersion = 5,
    /// `cuDeviceGetCount`.
    DeviceGetCount = 6,
    /// `cuDeviceGet`.
    DeviceGet = 7,
    /// Name, UUID, total memory and every attribute of a device, cached by
    /// the frontend (`cuDeviceGetName`, `cuDeviceGetUuid`,
    /// `cuDeviceTotalMem`, `cuDeviceGetAttribute`).
    DeviceGetProperties = 8,
    /// `cuDeviceGetAttribute` of one attribute.
    DeviceGetAttribute = 9,
    /// `cuDevicePrimaryCtxRetain`.
    PrimaryCtxRetain = 10,
    /// `cuDevicePrimaryCtxRelease`.
    PrimaryCtxRelease = 11,
    /// `cuCtxCreate`.
    CtxCreate = 12,
    /// `cuCtxDestroy`.
    CtxDestroy = 13,
    /// `cuCtxSynchronize`.
    CtxSynchronize = 14,
    /// `cuModuleLoadData` / `cuModuleLoadFatBinary`.
    ModuleLoad = 15,
    /// `cuModuleUnload`.
    ModuleUnload = 16,
    /// `cuModuleGetFunction`, with the parameter layout (`cuFuncGetParamInfo`).
    ModuleGetFunction = 17,
    /// `cuModuleGetGlobal`.
    ModuleGetGlobal = 18,
    /// `cuMemAlloc`.
    MemAlloc = 19,
    /// `cuMemFree`.
    MemFree = 20,
    /// `cuMemGetInfo`.
    MemGetInfo = 21,
    /// `cuMemsetD8/D16/D32` and their `Async` forms.
    Memset = 22,
    /// `cuMemcpyHtoD` / `cuMemcpyHtoDAsync`.
    MemcpyHtoD = 23,
    /// `cuMemcpyDtoH` / `cuMemcpyDtoHAsync`.
    MemcpyDtoH = 24,
    /// `cuMemcpyDtoD` / `cuMemcpyDtoDAsync`.
    MemcpyDtoD = 25,
    /// `cuStreamCreate` / `cuStreamCreateWithPriority`.
    StreamCreate = 26,
    /// `cuStreamDestroy`.
    StreamDestroy = 27,
    /// `cuStreamSynchronize`.
    StreamSynchronize = 28,
    /// `cuStreamQuery`.
    StreamQuery = 29,
    /// `cuEventCreate`.
    EventCreate = 30,
    /// `cuEventRecord`.
    EventRecord = 31,
    /// `cuEventQuery`.
    EventQuery = 32,
    /// `cuEventSynchronize`.
    EventSynchronize = 33,
    /// `cuEventElapsedTime`.
    EventElapsedTime = 34,
    /// `cuEventDestroy`.
    EventDestroy = 35,
    /// `cuLaunchKernel`.
    LaunchKernel = 36,
    /// `cuStreamWaitEvent`.
    StreamWaitEvent = 37,
    /// `cuFuncGetAttribute`.
    FuncGetAttribute = 38,
    /// `cuFuncSetAttribute`.
    FuncSetAttribute = 39,
    /// Facts about a context: API version, flags, stream priority range
    /// (`cuCtxGetApiVersion`, `cuCtxGetFlags`, `cuCtxGetStreamPriorityRange`).
    CtxGetInfo = 40,
    /// `cuCtxGetLimit` / `cuCtxSetLimit`.
    CtxLimit = 41,
    /// The occupancy calculator (`cuOccupancy*`).
    Occupancy = 42,
}

/// Why a message did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The opcode is not one this version knows.
    #[error("Unknown opcode {0}")]
    UnknownOpcode(u16),
    /// The header names another protocol version.
    #[error("Unsupported protocol version {0}; this side speaks version {PROTOCOL_VERSION}")]
    Version(u16),
    /// Fewer bytes than a header.
    #[error("Message shorter than its header")]
    Truncated,
    /// The payload is larger than [`MAX_PAYLOAD`] or a declared limit.
    #[error("Payload of {0} bytes is over the limit")]
    TooLarge(usize),
    /// The payload length does not match what the opcode's struct declares.
    #[error("Payload of {opcode:?} is {got} bytes, expected {expected}")]
    Length {
        /// The message's opcode.
        opcode: Opcode,
        /// Payload bytes received.
        got: usize,
        /// Payload bytes the opcode's struct and its declared tail need.
        expected: usize,
    },
    /// A name is empty, too long, contains NUL or is not UTF-8.
    #[error("Symbol name is empty, over {MAX_NAME_LEN} bytes, contains NUL or is not UTF-8")]
    BadName,
    /// A [`DataRef`] has an unknown location or an impossible length.
    #[error("Bad data reference (location {0})")]
    BadDataRef(u32),
    /// A field holds a value outside its domain.
    #[error("Field {0} is out of range")]
    BadField(&'static str),
}

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

wire_structs! {
    /// [`Opcode::Hello`] request.
    pub struct HelloReq {
        /// Oldest protocol version the frontend speaks.
        pub min_version: U16,
        /// Newest protocol version the frontend speaks.
        pub max_version: U16,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// [`Opcode::Hello`] reply.
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
    /// Requests that name a device.
    pub struct DeviceReq {
        /// Device ordinal.
        pub device: I32,
    }
    /// A signed 32-bit answer (counts, versions, attribute values, devices).
    pub struct I32Rep {
        /// The value.
        pub value: I32,
    }
    /// [`Opcode::DeviceGetProperties`] reply; followed by `attr_count`
    /// [`AttrPair`]s.
    pub struct DevicePropsRep {
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
    /// [`Opcode::DeviceGetAttribute`] request.
    pub struct DeviceAttrReq {
        /// Device ordinal.
        pub device: I32,
        /// `CUdevice_attribute`.
        pub attr: I32,
    }
    /// [`Opcode::CtxCreate`] request.
    pub struct CtxCreateReq {
        /// Device ordinal.
        pub device: I32,
        /// `CUctx_flags`.
        pub flags: U32,
    }
    /// Requests that name one object (context, module, stream, event).
    pub struct HandleReq {
        /// The object's id.
        pub handle: U64,
    }
    /// Replies that return one object id.
    pub struct HandleRep {
        /// The new object's id.
        pub handle: U64,
    }
    /// [`Opcode::ModuleLoad`] request.
    pub struct ModuleLoadReq {
        /// Context id.
        pub ctx: U64,
        /// The image: PTX text, cubin or fatbin.
        pub image: DataRef,
    }
    /// [`Opcode::ModuleGetFunction`] and [`Opcode::ModuleGetGlobal`]
    /// requests; followed by `name_len` bytes of name.
    pub struct SymbolReq {
        /// Module id.
        pub module: U64,
        /// Bytes of name that follow.
        pub name_len: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// [`Opcode::ModuleGetFunction`] reply; followed by `param_count`
    /// [`ParamInfo`]s.
    pub struct FunctionRep {
        /// Function id.
        pub function: U64,
        /// Number of kernel parameters.
        pub param_count: U32,
        /// Size of the packed parameter buffer in bytes.
        pub param_bytes: U32,
    }
    /// Offset and size of one kernel parameter in the packed buffer.
    pub struct ParamInfo {
        /// Byte offset.
        pub offset: U32,
        /// Size in bytes.
        pub size: U32,
    }
    /// [`Opcode::ModuleGetGlobal`] reply.
    pub struct GlobalRep {
        /// Device address.
        pub dptr: U64,
        /// Size in bytes.
        pub size: U64,
    }
    /// [`Opcode::MemAlloc`] request.
    pub struct MemAllocReq {
        /// Context id.
        pub ctx: U64,
        /// Bytes to allocate.
        pub size: U64,
    }
    /// Replies that return a device address.
    pub struct DptrRep {
        /// Device address.
        pub dptr: U64,
    }
    /// [`Opcode::MemFree`] request.
    pub struct MemFreeReq {
        /// Device address returned by [`Opcode::MemAlloc`].
        pub dptr: U64,
    }
    /// [`Opcode::MemGetInfo`] reply.
    pub struct MemInfoRep {
        /// Free bytes.
        pub free: U64,
        /// Total bytes.
        pub total: U64,
    }
    /// [`Opcode::Memset`] request.
    pub struct MemsetReq {
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
    /// [`Opcode::MemcpyHtoD`] request; inline data follows when
    /// `data` is inline.
    pub struct HtoDReq {
        /// Device address.
        pub dst: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// [`COPY_ASYNC`].
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Source bytes.
        pub data: DataRef,
    }
    /// [`Opcode::MemcpyDtoH`] request.
    pub struct DtoHReq {
        /// Device address.
        pub src: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// [`COPY_ASYNC`].
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Where the bytes go: inline in the reply, or the data area.
        pub data: DataRef,
    }
    /// [`Opcode::MemcpyDtoD`] request.
    pub struct DtoDReq {
        /// Destination device address.
        pub dst: U64,
        /// Source device address.
        pub src: U64,
        /// Bytes.
        pub len: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// [`COPY_ASYNC`].
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// [`Opcode::StreamCreate`] request.
    pub struct StreamCreateReq {
        /// Context id.
        pub ctx: U64,
        /// `CUstream_flags`.
        pub flags: U32,
        /// Priority (`cuStreamCreateWithPriority`), 0 by default.
        pub priority: I32,
    }
    /// [`Opcode::EventCreate`] request.
    pub struct EventCreateReq {
        /// Context id.
        pub ctx: U64,
        /// `CUevent_flags`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// [`Opcode::EventRecord`] request.
    pub struct EventRecordReq {
        /// Event id.
        pub event: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// [`Opcode::EventElapsedTime`] request.
    pub struct ElapsedReq {
        /// Start event id.
        pub start: U64,
        /// End event id.
        pub end: U64,
    }
    /// [`Opcode::EventElapsedTime`] reply.
    pub struct ElapsedRep {
        /// Milliseconds.
        pub ms: F32,
    }
    /// [`Opcode::StreamWaitEvent`] request.
    pub struct StreamWaitReq {
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// Event id.
        pub event: U64,
        /// Flags (0).
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// [`Opcode::FuncGetAttribute`] and [`Opcode::FuncSetAttribute`]
    /// requests.
    pub struct FuncAttrReq {
        /// Function id.
        pub function: U64,
        /// `CUfunction_attribute`.
        pub attr: I32,
        /// Value to set (set only).
        pub value: I32,
    }
    /// [`Opcode::CtxGetInfo`] reply.
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
    /// [`Opcode::CtxLimit`] request.
    pub struct CtxLimitReq {
        /// Context id.
        pub ctx: U64,
        /// `CUlimit`.
        pub limit: U32,
        /// 1 to set, 0 to get.
        pub set: U32,
        /// Value to set.
        pub value: U64,
    }
    /// [`Opcode::Occupancy`] request.
    pub struct OccupancyReq {
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
    /// [`Opcode::Occupancy`] reply.
    pub struct OccupancyRep {
        /// Kind 0: blocks; kind 1: minimum grid size; kind 2: bytes.
        pub a: I64,
        /// Kind 1: block size; otherwise 0.
        pub b: I64,
    }
    /// Replies that return one 64-bit value.
    pub struct U64Rep {
        /// The value.
        pub value: U64,
    }
    /// [`Opcode::LaunchKernel`] request; followed by `param_len` bytes of
    /// packed parameters laid out as [`FunctionRep`] described.
    pub struct LaunchReq {
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

/// A decoded request. Borrowed tails point into the caller's private copy of
/// the payload, never into shared memory.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<'a> {
    /// [`Opcode::Hello`].
    Hello(HelloReq),
    /// [`Opcode::Goodbye`].
    Goodbye,
    /// [`Opcode::Nop`].
    Nop,
    /// [`Opcode::Init`].
    Init,
    /// [`Opcode::DriverGetVersion`].
    DriverGetVersion,
    /// [`Opcode::DeviceGetCount`].
    DeviceGetCount,
    /// [`Opcode::DeviceGet`].
    DeviceGet(DeviceReq),
    /// [`Opcode::DeviceGetProperties`].
    DeviceGetProperties(DeviceReq),
    /// [`Opcode::DeviceGetAttribute`].
    DeviceGetAttribute(DeviceAttrReq),
    /// [`Opcode::PrimaryCtxRetain`].
    PrimaryCtxRetain(DeviceReq),
    /// [`Opcode::PrimaryCtxRelease`].
    PrimaryCtxRelease(DeviceReq),
    /// [`Opcode::CtxCreate`].
    CtxCreate(CtxCreateReq),
    /// [`Opcode::CtxDestroy`].
    CtxDestroy(HandleReq),
    /// [`Opcode::CtxSynchronize`].
    CtxSynchronize(HandleReq),
    /// [`Opcode::ModuleLoad`], with inline image bytes (empty when the image
    /// is in the data area).
    ModuleLoad(ModuleLoadReq, &'a [u8]),
    /// [`Opcode::ModuleUnload`].
    ModuleUnload(HandleReq),
    /// [`Opcode::ModuleGetFunction`].
    ModuleGetFunction {
        /// Module id.
        module: u64,
        /// Kernel name.
        name: &'a str,
    },
    /// [`Opcode::ModuleGetGlobal`].
    ModuleGetGlobal {
        /// Module id.
        module: u64,
        /// Global name.
        name: &'a str,
    },
    /// [`Opcode::MemAlloc`].
    MemAlloc(MemAllocReq),
    /// [`Opcode::MemFree`].
    MemFree(MemFreeReq),
    /// [`Opcode::MemGetInfo`].
    MemGetInfo(HandleReq),
    /// [`Opcode::Memset`].
    Memset(MemsetReq),
    /// [`Opcode::MemcpyHtoD`], with inline bytes (empty when in the data
    /// area).
    MemcpyHtoD(HtoDReq, &'a [u8]),
    /// [`Opcode::MemcpyDtoH`].
    MemcpyDtoH(DtoHReq),
    /// [`Opcode::MemcpyDtoD`].
    MemcpyDtoD(DtoDReq),
    /// [`Opcode::StreamCreate`].
    StreamCreate(StreamCreateReq),
    /// [`Opcode::StreamDestroy`].
    StreamDestroy(HandleReq),
    /// [`Opcode::StreamSynchronize`].
    StreamSynchronize(HandleReq),
    /// [`Opcode::StreamQuery`].
    StreamQuery(HandleReq),
    /// [`Opcode::EventCreate`].
    EventCreate(EventCreateReq),
    /// [`Opcode::EventRecord`].
    EventRecord(EventRecordReq),
    /// [`Opcode::EventQuery`].
    EventQuery(HandleReq),
    /// [`Opcode::EventSynchronize`].
    EventSynchronize(HandleReq),
    /// [`Opcode::EventElapsedTime`].
    EventElapsedTime(ElapsedReq),
    /// [`Opcode::EventDestroy`].
    EventDestroy(HandleReq),
    /// [`Opcode::LaunchKernel`], with the packed parameters.
    LaunchKernel(LaunchReq, &'a [u8]),
    /// [`Opcode::StreamWaitEvent`].
    StreamWaitEvent(StreamWaitReq),
    /// [`Opcode::FuncGetAttribute`].
    FuncGetAttribute(FuncAttrReq),
    /// [`Opcode::FuncSetAttribute`].
    FuncSetAttribute(FuncAttrReq),
    /// [`Opcode::CtxGetInfo`].
    CtxGetInfo(HandleReq),
    /// [`Opcode::CtxLimit`].
    CtxLimit(CtxLimitReq),
    /// [`Opcode::Occupancy`].
    Occupancy(OccupancyReq),
}

fn exact<T: FromBytes + KnownLayout + Immutable + Unaligned>(op: Opcode, p: &[u8]) -> Result<T, DecodeError> {
    let expected = core::mem::size_of::<T>();
    if p.len() != expected {
        return Err(DecodeError::Length { opcode: op, got: p.len(), expected });
    }
    T::read_from_bytes(p).map_err(|_| DecodeError::Length { opcode: op, got: p.len(), expected })
}

/// Splits `p` into a `T` and a tail that must be exactly `tail_len` bytes.
fn with_tail<T, F>(op: Opcode, p: &[u8], tail_len: F) -> Result<(T, &[u8]), DecodeError>
where
    T: FromBytes + KnownLayout + Immutable + Unaligned,
    F: FnOnce(&T) -> Result<usize, DecodeError>,
{
    let fixed = core::mem::size_of::<T>();
    let (t, tail) = T::read_from_prefix(p).map_err(|_| DecodeError::Length { opcode: op, got: p.len(), expected: fixed })?;
    let want = tail_len(&t)?;
    if tail.len() != want {
        return Err(DecodeError::Length { opcode: op, got: p.len(), expected: fixed.saturating_add(want) });
    }
    Ok((t, tail))
}

fn empty(op: Opcode, p: &[u8]) -> Result<(), DecodeError> {
    if p.is_empty() { Ok(()) } else { Err(DecodeError::Length { opcode: op, got: p.len(), expected: 0 }) }
}

/// Checks a symbol name: non-empty, bounded, NUL-free UTF-8.
pub fn check_name(bytes: &[u8]) -> Result<&str, DecodeError> {
    if bytes.is_empty() || bytes.len() > MAX_NAME_LEN || bytes.contains(&0) {
        return Err(DecodeError::BadName);
    }
    core::str::from_utf8(bytes).map_err(|_| DecodeError::BadName)
}

/// Length of the inline tail a data reference declares.
fn inline_len(d: &DataRef) -> Result<usize, DecodeError> {
    let len = usize::try_from(d.len.get()).map_err(|_| DecodeError::TooLarge(usize::MAX))?;
    if len > MAX_PAYLOAD {
        return Err(DecodeError::TooLarge(len));
    }
    match d.location()? {
        DataLoc::Inline => Ok(len),
        DataLoc::Area { .. } => Ok(0),
    }
}

impl<'a> Request<'a> {
    /// Decodes a request from its header and a private copy of its payload.
    pub fn decode(h: &Header, p: &'a [u8]) -> Result<Request<'a>, DecodeError> {
        if h.version.get() != PROTOCOL_VERSION {
            return Err(DecodeError::Version(h.version.get()));
        }
        if h.payload_len.get() as usize != p.len() {
            return Err(DecodeError::Truncated);
        }
        let op = Opcode::try_from(h.opcode.get())?;
        use Opcode as O;
        Ok(match op {
            O::Hello => Request::Hello(exact(op, p)?),
            O::Goodbye => {
                empty(op, p)?;
                Request::Goodbye
            }
            O::Nop => {
                empty(op, p)?;
                Request::Nop
            }
            O::Init => {
                empty(op, p)?;
                Request::Init
            }
            O::DriverGetVersion => {
                empty(op, p)?;
                Request::DriverGetVersion
            }
            O::DeviceGetCount => {
                empty(op, p)?;
                Request::DeviceGetCount
            }
            O::DeviceGet => Request::DeviceGet(exact(op, p)?),
            O::DeviceGetProperties => Request::DeviceGetProperties(exact(op, p)?),
            O::DeviceGetAttribute => Request::DeviceGetAttribute(exact(op, p)?),
            O::PrimaryCtxRetain => Request::PrimaryCtxRetain(exact(op, p)?),
            O::PrimaryCtxRelease => Request::PrimaryCtxRelease(exact(op, p)?),
            O::CtxCreate => Request::CtxCreate(exact(op, p)?),
            O::CtxDestroy => Request::CtxDestroy(exact(op, p)?),
            O::CtxSynchronize => Request::CtxSynchronize(exact(op, p)?),
            O::ModuleLoad => {
                let (r, tail) = with_tail::<ModuleLoadReq, _>(op, p, |r| inline_len(&r.image))?;
                Request::ModuleLoad(r, tail)
            }
            O::ModuleUnload => Request::ModuleUnload(exact(op, p)?),
            O::ModuleGetFunction | O::ModuleGetGlobal => {
                let (r, tail) = with_tail::<SymbolReq, _>(op, p, |r| Ok(r.name_len.get() as usize))?;
                let name = check_name(tail)?;
                let module = r.module.get();
                if op == O::ModuleGetFunction {
                    Request::ModuleGetFunction { module, name }
                } else {
                    Request::ModuleGetGlobal { module, name }
                }
            }
            O::MemAlloc => Request::MemAlloc(exact(op, p)?),
            O::MemFree => Request::MemFree(exact(op, p)?),
            O::MemGetInfo => Request::MemGetInfo(exact(op, p)?),
            O::Memset => {
                let r: MemsetReq = exact(op, p)?;
                if !matches!(r.elem_size.get(), 1 | 2 | 4) {
                    return Err(DecodeError::BadField("elem_size"));
                }
                Request::Memset(r)
            }
            O::MemcpyHtoD => {
                let (r, tail) = with_tail::<HtoDReq, _>(op, p, |r| inline_len(&r.data))?;
                Request::MemcpyHtoD(r, tail)
            }
            O::MemcpyDtoH => {
                let r: DtoHReq = exact(op, p)?;
                r.data.location()?;
                if r.data.len.get() > MAX_PAYLOAD as u64 {
                    return Err(DecodeError::TooLarge(r.data.len.get() as usize));
                }
                Request::MemcpyDtoH(r)
            }
            O::MemcpyDtoD => Request::MemcpyDtoD(exact(op, p)?),
            O::StreamCreate => Request::StreamCreate(exact(op, p)?),
            O::StreamDestroy => Request::StreamDestroy(exact(op, p)?),
            O::StreamSynchronize => Request::StreamSynchronize(exact(op, p)?),
            O::StreamQuery => Request::StreamQuery(exact(op, p)?),
            O::EventCreate => Request::EventCreate(exact(op, p)?),
            O::EventRecord => Request::EventRecord(exact(op, p)?),
            O::EventQuery => Request::EventQuery(exact(op, p)?),
            O::EventSynchronize => Request::EventSynchronize(exact(op, p)?),
            O::EventElapsedTime => Request::EventElapsedTime(exact(op, p)?),
            O::EventDestroy => Request::EventDestroy(exact(op, p)?),
            O::LaunchKernel => {
                let (r, tail) = with_tail::<LaunchReq, _>(op, p, |r| {
                    let n = r.param_len.get() as usize;
                    if n > MAX_PARAM_BYTES { Err(DecodeError::TooLarge(n)) } else { Ok(n) }
                })?;
                Request::LaunchKernel(r, tail)
            }
            O::StreamWaitEvent => Request::StreamWaitEvent(exact(op, p)?),
            O::FuncGetAttribute => Request::FuncGetAttribute(exact(op, p)?),
            O::FuncSetAttribute => Request::FuncSetAttribute(exact(op, p)?),
            O::CtxGetInfo => Request::CtxGetInfo(exact(op, p)?),
            O::CtxLimit => Request::CtxLimit(exact(op, p)?),
            O::Occupancy => {
                let r: OccupancyReq = exact(op, p)?;
                if r.kind.get() > 2 {
                    return Err(DecodeError::BadField("kind"));
                }
                Request::Occupancy(r)
            }
        })
    }
}

/// Decodes a reply payload that must be exactly one `T`.
pub fn decode_reply<T: FromBytes + KnownLayout + Immutable + Unaligned>(op: Opcode, p: &[u8]) -> Result<T, DecodeError> {
    exact(op, p)
}

/// Splits a reply payload into a `T` and `count` items of `U` that follow.
pub fn decode_reply_list<T, U>(op: Opcode, p: &[u8], count: impl FnOnce(&T) -> usize, max: usize) -> Result<(T, Vec<U>), DecodeError>
where
    T: FromBytes + KnownLayout + Immutable + Unaligned,
    U: FromBytes + KnownLayout + Immutable + Unaligned + Clone,
{
    let (t, tail) = with_tail::<T, _>(op, p, |t| {
        let n = count(t);
        if n > max {
            return Err(DecodeError::TooLarge(n));
        }
        Ok(n * core::mem::size_of::<U>())
    })?;
    let items = <[U]>::ref_from_bytes(tail).map_err(|_| DecodeError::Truncated)?.to_vec();
    Ok((t, items))
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

/// Encodes a message: header, fixed struct, then tail parts, into `out`.
pub fn encode_into(out: &mut Vec<u8>, header: Header, fixed: &[u8], tails: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(fixed);
    for t in tails {
        out.extend_from_slice(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(op: Opcode, fixed: &[u8], tail: &[u8]) -> (Header, Vec<u8>) {
        let mut p = fixed.to_vec();
        p.extend_from_slice(tail);
        (Header::request(op, 7, FLAG_REPLY, p.len()), p)
    }

    #[test]
    fn ctx_info_round_trips_through_its_reply() {
        let i = CtxInfo { api_version: 13000, flags: 0x9, least_priority: 0, greatest_priority: -5 };
        let rep = CtxInfoRep::from(i);
        assert_eq!(
            rep.as_bytes(),
            [&13000u32.to_le_bytes()[..], &9u32.to_le_bytes(), &0i32.to_le_bytes(), &(-5i32).to_le_bytes()].concat()
        );
        assert_eq!(CtxInfo::from(rep), i);
    }

    #[test]
    fn header_round_trip() {
        let h = Header::request(Opcode::LaunchKernel, 42, FLAG_REPLY, 100);
        let b = h.as_bytes().to_vec();
        assert_eq!(b.len(), HEADER_LEN);
        assert_eq!(Header::parse(&b).unwrap(), h);
        assert!(h.wants_reply());
        let r = h.reply(CuResult::NOT_FOUND, 0);
        assert_eq!(r.request_id.get(), 42);
        assert_eq!(r.status.get(), 500);
        assert_eq!(r.flags.get(), FLAG_IS_REPLY);
    }

    #[test]
    fn unknown_opcode_is_an_error() {
        let mut h = Header::request(Opcode::Nop, 1, 0, 0);
        h.opcode = 0xBEEF.into();
        assert_eq!(Request::decode(&h, &[]), Err(DecodeError::UnknownOpcode(0xBEEF)));
        h.opcode = 0.into();
        assert_eq!(Request::decode(&h, &[]), Err(DecodeError::UnknownOpcode(0)));
    }

    #[test]
    fn every_opcode_round_trips_its_number() {
        for &op in Opcode::ALL {
            assert_eq!(Opcode::try_from(op as u16), Ok(op));
        }
    }

    #[test]
    fn wrong_version_is_rejected() {
        let mut h = Header::request(Opcode::Nop, 1, 0, 0);
        h.version = 2.into();
        assert_eq!(Request::decode(&h, &[]), Err(DecodeError::Version(2)));
        assert_eq!(Header::parse(h.as_bytes()), Err(DecodeError::Version(2)));
    }

    #[test]
    fn lengths_must_be_exact() {
        let r = MemAllocReq { ctx: 1.into(), size: 4096.into() };
        let (h, p) = msg(Opcode::MemAlloc, r.as_bytes(), &[]);
        assert_eq!(Request::decode(&h, &p), Ok(Request::MemAlloc(r)));
        let (h, p) = msg(Opcode::MemAlloc, r.as_bytes(), &[0]);
        assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
        let (h, p) = msg(Opcode::MemAlloc, &r.as_bytes()[..15], &[]);
        assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
        let (h, p) = msg(Opcode::Nop, &[1], &[]);
        assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
    }

    #[test]
    fn payload_len_must_match_the_bytes() {
        let (mut h, p) = msg(Opcode::Nop, &[], &[]);
        h.payload_len = 4.into();
        assert_eq!(Request::decode(&h, &p), Err(DecodeError::Truncated));
    }

    #[test]
    fn names_are_checked() {
        let r = SymbolReq { module: 3.into(), name_len: 7.into(), reserved: 0.into() };
        let (h, p) = msg(Opcode::ModuleGetFunction, r.as_bytes(), b"mat_sum");
        assert_eq!(Request::decode(&h, &p), Ok(Request::ModuleGetFunction { module: 3, name: "mat_sum" }));
        let (h, p) = msg(Opcode::ModuleGetFunction, r.as_bytes(), b"mat\0sum");
        assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadName));
        let (h, p) = msg(Opcode::ModuleGetFunction, r.as_bytes(), b"mat_su");
        assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
        let r0 = SymbolReq { module: 3.into(), name_len: 0.into(), reserved: 0.into() };
        let (h, p) = msg(Opcode::ModuleGetGlobal, r0.as_bytes(), b"");
        assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadName));
    }

    #[test]
    fn inline_data_must_match_its_declared_length() {
        let r = HtoDReq { dst: 0x1000.into(), stream: 0.into(), flags: 0.into(), reserved: 0.into(), data: DataRef::inline(4) };
        let (h, p) = msg(Opcode::MemcpyHtoD, r.as_bytes(), &[1, 2, 3, 4]);
        assert_eq!(Request::decode(&h, &p), Ok(Request::MemcpyHtoD(r, &[1, 2, 3, 4])));
        let (h, p) = msg(Opcode::MemcpyHtoD, r.as_bytes(), &[1, 2, 3]);
        assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
        let a = HtoDReq { data: DataRef::area(4096, 1 << 20), ..r };
        let (h, p) = msg(Opcode::MemcpyHtoD, a.as_bytes(), &[]);
        assert_eq!(Request::decode(&h, &p), Ok(Request::MemcpyHtoD(a, &[])));
        let bad = HtoDReq { data: DataRef { loc: 9.into(), ..DataRef::inline(0) }, ..r };
        let (h, p) = msg(Opcode::MemcpyHtoD, bad.as_bytes(), &[]);
        assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadDataRef(9)));
    }

    #[test]
    fn memset_element_size_is_checked() {
        let r = MemsetReq { dptr: 1.into(), count: 1.into(), value: 0.into(), elem_size: 3.into(), stream: 0.into() };
        let (h, p) = msg(Opcode::Memset, r.as_bytes(), &[]);
        assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadField("elem_size")));
    }

    #[test]
    fn launch_params_are_bounded() {
        let r = LaunchReq { param_len: ((MAX_PARAM_BYTES + 1) as u32).into(), ..Default::default() };
        let (h, p) = msg(Opcode::LaunchKernel, r.as_bytes(), &[]);
        assert!(matches!(Request::decode(&h, &p), Err(DecodeError::TooLarge(_))));
    }

    #[test]
    fn reply_lists_decode() {
        let f = FunctionRep { function: 9.into(), param_count: 2.into(), param_bytes: 16.into() };
        let mut p = f.as_bytes().to_vec();
        for (o, s) in [(0u32, 8u32), (8, 4)] {
            p.extend_from_slice(ParamInfo { offset: o.into(), size: s.into() }.as_bytes());
        }
        let (g, items): (FunctionRep, Vec<ParamInfo>) =
            decode_reply_list(Opcode::ModuleGetFunction, &p, |f: &FunctionRep| f.param_count.get() as usize, MAX_PARAMS).unwrap();
        assert_eq!(g, f);
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].offset.get(), 8);
        assert!(
            decode_reply_list::<FunctionRep, ParamInfo>(
                Opcode::ModuleGetFunction,
                &p[..p.len() - 1],
                |f| f.param_count.get() as usize,
                MAX_PARAMS
            )
            .is_err()
        );
    }

    #[test]
    fn fixed_strings() {
        let a: [u8; 8] = fixed_str("cuda");
        assert_eq!(str_from_fixed(&a), "cuda");
        let b: [u8; 4] = fixed_str("toolong");
        assert_eq!(str_from_fixed(&b), "too");
    }
}
