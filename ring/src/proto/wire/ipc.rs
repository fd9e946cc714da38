//! Requests of interprocess sharing: memory and event handles
//! (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle`, `cuIpcGetEventHandle`, ...),
//! and physical memory made shareable and passed to another process
//! (`cuMemCreate` with a shareable handle type,
//! `cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`).
//!
//! The 64 bytes a program receives as a handle are made by the backend
//! ([`IpcHandle`]): a random token the backend looks up, never the driver's
//! own handle, so a guest learns nothing about the host and cannot forge a
//! handle of another guest's memory.

use zerocopy::little_endian::{I32, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// [`IpcHandle::kind`]: device memory (`CUipcMemHandle`).
pub const IPC_MEMORY: u32 = 1;
/// [`IpcHandle::kind`]: an event (`CUipcEventHandle`).
pub const IPC_EVENT: u32 = 2;

/// [`IpcHandle::kind`]: physical memory of the virtual memory API, as a
/// shareable handle names it.
pub const IPC_PHYSICAL: u32 = 3;

/// [`IpcHandle::kind`]: a memory pool made with a shareable handle type
/// (`cuMemPoolExportToShareableHandle`).
pub const IPC_POOL: u32 = 4;
/// [`IpcHandle::kind`]: an allocation of such a pool
/// (`cuMemPoolExportPointer`): what `CUmemPoolPtrExportData` holds.
pub const IPC_POOL_POINTER: u32 = 5;

/// [`MemCreateWith::flags`]: generic compression
/// (`CU_MEM_ALLOCATION_COMP_GENERIC`).
pub const MEM_COMPRESSIBLE: u32 = 1;
/// [`MemCreateWith::flags`]: exportable to another process of the guest
/// (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`).
pub const MEM_SHAREABLE: u32 = 2;

/// [`PeerAccess::op`]: whether `dev` can reach `peer`'s memory.
pub const PEER_CAN_ACCESS: u32 = 0;
/// [`PeerAccess::op`]: `ctx` gains access to `peer_ctx`'s memory.
pub const PEER_ENABLE: u32 = 1;
/// [`PeerAccess::op`]: `ctx` loses it.
pub const PEER_DISABLE: u32 = 2;
/// [`PeerAccess::op`]: a P2P attribute of the link from `dev` to `peer`.
pub const PEER_ATTRIBUTE: u32 = 3;

/// [`IpcHandle::magic`]: "pvgpuIPC" as a little-endian word.
pub const IPC_MAGIC: u64 = u64::from_le_bytes(*b"pvgpuIPC");

wire_structs! {
    /// A handle as the program holds it: the 64 bytes of a
    /// `CUipcMemHandle` or `CUipcEventHandle`, or what the file of a
    /// shareable handle of physical memory holds.
    pub struct IpcHandle {
        /// [`IPC_MAGIC`].
        pub magic: U64,
        /// [`IPC_MEMORY`], [`IPC_EVENT`] or [`IPC_PHYSICAL`].
        pub kind: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// The backend's token: random, looked up by the backend.
        pub token: [u8; 16],
        /// Bytes of the memory named (0 for an event).
        pub size: U64,
        /// Reserved, zero.
        pub pad: [u8; 24],
    }
    /// `cuIpcGetMemHandle`: a handle of the allocation holding `ptr`.
    pub struct IpcGetMemHandle {
        /// Context id (the current one).
        pub ctx: U64,
        /// A device address of one of the session's allocations.
        pub ptr: U64,
    }
    /// `cuIpcOpenMemHandle`: another process's memory, mapped in `ctx`.
    pub struct IpcOpenMemHandle {
        /// Context id (the current one).
        pub ctx: U64,
        /// The handle, as the program received it.
        pub handle: IpcHandle,
        /// `CUipcMem_flags`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuIpcOpenMemHandle` reply: where the memory is mapped, and its size.
    pub struct IpcOpenRep {
        /// Device address of the first byte.
        pub ptr: U64,
        /// Bytes mapped.
        pub size: U64,
    }
    /// `cuIpcCloseMemHandle`.
    pub struct IpcCloseMemHandle {
        /// Context id (the current one).
        pub ctx: U64,
        /// The address `cuIpcOpenMemHandle` returned.
        pub ptr: U64,
    }
    /// `cuIpcGetEventHandle`: a handle of an interprocess event.
    pub struct IpcGetEventHandle {
        /// Event id.
        pub event: U64,
    }
    /// `cuIpcOpenEventHandle`: another process's event, as an event of
    /// `ctx`.
    pub struct IpcOpenEventHandle {
        /// Context id (the current one).
        pub ctx: U64,
        /// The handle, as the program received it.
        pub handle: IpcHandle,
    }
    /// `cuMemCreate` of memory with properties: compressible, shareable.
    pub struct MemCreateWith {
        /// Context id.
        pub ctx: U64,
        /// Bytes, a multiple of the granularity.
        pub size: U64,
        /// [`MEM_COMPRESSIBLE`], [`MEM_SHAREABLE`].
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// The physical allocation `MemCreateWith` or `MemImport` made.
    pub struct MemCreateRep {
        /// Its id.
        pub handle: U64,
        /// Bytes.
        pub size: U64,
        /// The properties it has: [`MEM_COMPRESSIBLE`] only where the
        /// device gave compressible memory, [`MEM_SHAREABLE`].
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuMemExportToShareableHandle` of a physical allocation made
    /// shareable: the content of the file the program passes on.
    pub struct MemExport {
        /// Physical allocation id.
        pub handle: U64,
    }
    /// `cuMemImportFromShareableHandle`: a physical allocation of another
    /// process, as one of this session made in `ctx`.
    pub struct MemImport {
        /// Context id (the current one).
        pub ctx: U64,
        /// What the shareable handle's file holds.
        pub handle: IpcHandle,
    }
    /// `cuMemPoolCreate` of a pool whose handle may go to another process
    /// of the guest (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`).
    pub struct MemPoolCreateWith {
        /// Context id, on the pool's device.
        pub ctx: U64,
        /// As in `MemPoolCreate`.
        pub max_size: U64,
        /// [`MEM_SHAREABLE`].
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuMemPoolExportToShareableHandle`: a handle of a shareable pool.
    pub struct MemPoolExport {
        /// Pool id.
        pub pool: U64,
    }
    /// `cuMemPoolImportFromShareableHandle`: another process's pool, as a
    /// pool of this session's context `ctx` (allocations come from it only
    /// through `MemPoolImportPointer`).
    pub struct MemPoolImport {
        /// Context id, on the pool's device.
        pub ctx: U64,
        /// What the shareable handle's file holds.
        pub handle: IpcHandle,
    }
    /// `cuMemPoolExportPointer`: a handle of an allocation of a shareable
    /// pool, for a process that imported the pool.
    pub struct MemPoolExportPointer {
        /// A device address the session allocated from such a pool.
        pub ptr: U64,
    }
    /// `cuMemPoolImportPointer`: another process's allocation, from a pool
    /// this session imported; answered with `IpcOpenRep`.
    pub struct MemPoolImportPointer {
        /// Pool id (imported).
        pub pool: U64,
        /// The handle, as `CUmemPoolPtrExportData` holds it.
        pub handle: IpcHandle,
    }
    /// Peer access between the backend's devices: `cuDeviceCanAccessPeer`
    /// ([`PEER_CAN_ACCESS`]), `cuCtxEnablePeerAccess` ([`PEER_ENABLE`]),
    /// `cuCtxDisablePeerAccess` ([`PEER_DISABLE`]),
    /// `cuDeviceGetP2PAttribute` ([`PEER_ATTRIBUTE`]).
    pub struct PeerAccess {
        /// What is asked.
        pub op: U32,
        /// `CUdevice_P2PAttribute` ([`PEER_ATTRIBUTE`]).
        pub attr: U32,
        /// Device ordinal (asking, or the source).
        pub dev: I32,
        /// Peer device ordinal (or the destination).
        pub peer: I32,
        /// Context id that gains or loses access ([`PEER_ENABLE`],
        /// [`PEER_DISABLE`]).
        pub ctx: U64,
        /// Context id whose memory it reaches.
        pub peer_ctx: U64,
        /// `cuCtxEnablePeerAccess` flags (0).
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// A handle made by the backend.
    pub struct IpcHandleRep {
        /// The handle.
        pub handle: IpcHandle,
    }
}

impl IpcHandle {
    /// A handle of `kind` with `token`, naming `size` bytes.
    pub fn new(kind: u32, token: [u8; 16], size: u64) -> Self {
        IpcHandle { magic: IPC_MAGIC.into(), kind: kind.into(), token, size: size.into(), ..Default::default() }
    }

    /// The token, if these bytes are a handle of `kind` made by a backend.
    pub fn token(&self, kind: u32) -> Option<[u8; 16]> {
        (self.magic.get() == IPC_MAGIC && self.kind.get() == kind).then_some(self.token)
    }
}
