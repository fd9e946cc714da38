//! The fixed-layout structs of protocol version 1.
//!
//! A request without a tail is one struct named after its command
//! ([`MemAlloc`]); a request with a tail has a head struct here
//! ([`ModuleLoadHead`]) and a command type in [`super::body`] that pairs it
//! with its tail. Replies are named `...Rep`. Every field is little-endian
//! and unaligned; `reserved` fields are sent as zero and ignored.

use super::DecodeError;
use zerocopy::little_endian::{I32, U16, U32, U64};
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

/// How many backends one program may use at once: [`Hello::space`] is
/// below it.
pub const MAX_SPACES: u16 = 16;
/// Where a handle carries its [`Hello::space`].
pub const SPACE_SHIFT: u32 = 56;

/// The address space a backend's handle `id` belongs to.
pub fn space_of(id: u64) -> u16 {
    ((id >> SPACE_SHIFT) & 0x3f) as u16
}

mod array;
mod exec;
mod graph;
mod host_call;
mod ipc;
mod link;
mod memop;
mod memory;
mod mirror;
mod peer_copy;
mod replies;

pub use array::*;
pub use exec::*;
pub use graph::*;
pub use host_call::*;
pub use ipc::*;
pub use link::*;
pub use memop::*;
pub use memory::*;
pub use mirror::*;
pub use peer_copy::*;
pub use replies::*;

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
    /// The frontend lays out its data area as copy staging, its first
    /// `staging` bytes, then the pool of page-locked memory it allocates;
    /// the backend page-locks each part when it is first needed (the
    /// staging at the first large copy through it, the pool when the
    /// device address of the area is asked) instead of the whole area with
    /// the session's first context.
    pub struct AreaPinOnDemand {
        /// Bytes of copy staging at the start of the area (a multiple of 4 KiB).
        pub staging: U64,
    }
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
        /// The program's address space for this backend: its place in
        /// the program's list of backends (`PVGPU_BACKEND=a,b`), below
        /// [`MAX_SPACES`]. The backend puts it in every handle it makes
        /// (bits 56 to 61) and keeps its device addresses apart from the
        /// other spaces' where it places them itself, so that one program's
        /// handles and pointers name one backend each. 0 for a program with
        /// one backend.
        pub space: U16,
        /// What the frontend understands besides the protocol version:
        /// [`FEATURE_LEAVE_FRAMES`](crate::proto::FEATURE_LEAVE_FRAMES).
        /// A backend ignores bits it does not know.
        pub features: U16,
    }
    /// First message of a connection that takes back a checkpointed
    /// session: its token, and the versions the frontend speaks.
    pub struct Resume {
        /// The token from the session's `HelloRep`.
        pub token: [u8; 16],
        /// Oldest protocol version the frontend speaks.
        pub min_version: U16,
        /// Newest protocol version the frontend speaks.
        pub max_version: U16,
        /// As [`Hello::features`].
        pub features: U16,
        /// Reserved, zero.
        pub reserved: U16,
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
    /// `cuCtxResetPersistingL2Cache`: every persisting line of the L2
    /// cache back to normal.
    pub struct CtxResetL2 {
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
