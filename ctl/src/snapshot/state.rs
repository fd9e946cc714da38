//! What a snapshot's description holds: the session's devices, contexts,
//! memory, modules, streams and events ([`State`]), under [`Meta`]; its
//! graphs and executable graphs are in [`super::graph`].

use super::graph::{ExecGraphRec, GraphRec};
use serde::{Deserialize, Serialize};

/// A device the session used, as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Its ordinal in the backend.
    pub ordinal: usize,
    /// `cuDeviceGetName`.
    pub name: String,
    /// Total memory in bytes.
    pub total_memory_bytes: u64,
    /// The GPU itself, as `cuDeviceGetUuid` gives it (32 hex digits):
    /// memory handed over in place ([`Handed`]) is restored only on the
    /// same GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// A context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// The handle the guest holds.
    pub id: u64,
    /// Its device's ordinal.
    pub device: usize,
    /// `cuCtxCreate` flags.
    pub flags: u32,
    /// A primary context (retained, not created).
    pub primary: bool,
    /// How many retains the guest holds (primary contexts).
    pub retains: u32,
    /// Limits the guest set (`cuCtxSetLimit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitRec>,
}

/// A context limit the guest set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitRec {
    /// `CUlimit`.
    pub limit: u32,
    /// Its value, as the context had it.
    pub value: u64,
    /// When it was set (see [`Module::seq`]): the driver reserves memory
    /// for some, which places what it makes later.
    pub seq: u64,
}

/// Device memory from `cuMemAlloc` (or an asynchronous allocation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Its context.
    pub ctx: u64,
    /// Its device address (kept on restore).
    pub address: u64,
    /// Its length.
    pub length: u64,
    /// The blob with its bytes.
    pub blob: u32,
    /// The pool of the program's own it came from (the handle the guest
    /// holds), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<u64>,
    /// Its bytes stayed on the device, in memory handed over in place
    /// ([`State::handed`]); its blob is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handed: bool,
}

/// Device memory handed from one backend process to another on the same
/// GPU without copying it (a migration on one host): the source exported
/// it as a descriptor of the driver's, which travels beside the snapshot
/// (never in it), and the target maps it at the same address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handed {
    /// The context it is mapped in.
    pub ctx: u64,
    /// Where it is mapped.
    pub address: u64,
    /// Its bytes.
    pub length: u64,
}

/// A memory pool of the program's own (`cuMemPoolCreate`), as made and set
/// up since; its allocations are [`Allocation`]s that name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRec {
    /// The handle the guest holds.
    pub id: u64,
    /// The context it was made in.
    pub ctx: u64,
    /// Its size limit (0: the driver's default).
    pub max_size: u64,
    /// Attributes set on it (reuse policies, release threshold): attribute,
    /// value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<(u32, u64)>,
    /// Access set for devices: the device's ordinal as the guest numbers
    /// it (a restore has the same devices), flags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access: Vec<(i32, u32)>,
    /// When it was made (see [`Module::seq`]).
    pub seq: u64,
}

/// Addresses the guest reserved (`cuMemAddressReserve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Its context.
    pub ctx: u64,
    /// Its first address (kept on restore).
    pub address: u64,
    /// Its length.
    pub length: u64,
}

/// Physical memory the guest made (`cuMemCreate`); its bytes are those of
/// its mappings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Physical {
    /// The handle the guest holds.
    pub id: u64,
    /// Its context.
    pub ctx: u64,
    /// Its length.
    pub length: u64,
    /// `MEM_COMPRESSIBLE` and `MEM_SHAREABLE` as it had them.
    pub flags: u32,
    /// `cuMemRelease` was called: it goes with its last mapping.
    pub released: bool,
}

/// Physical memory mapped in a reservation (`cuMemMap`), with its access
/// (`cuMemSetAccess`) and bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapped {
    /// Its context.
    pub ctx: u64,
    /// Where it is mapped.
    pub address: u64,
    /// Its length.
    pub length: u64,
    /// The physical memory's handle.
    pub physical: u64,
    /// Where in it the mapping starts.
    pub offset: u64,
    /// `CUmemAccess_flags` of its device.
    pub access: u32,
    /// The blob with its bytes.
    pub blob: u32,
}

/// Host memory of the program held a second time in the backend, at the
/// program's address (over TCP: page-locked memory the device reaches
/// through the program's pointer, or ordinary memory graphs copy from or
/// to).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorRec {
    /// Its address, in the program and in the backend (kept on restore).
    pub address: u64,
    /// Its length.
    pub length: u64,
    /// Ordinary memory, never registered for the device.
    pub pageable: bool,
    /// The context it is registered through, if any.
    pub ctx: Option<u64>,
    /// The blob with its bytes.
    pub blob: u32,
    /// The blob with what the program last knew of it, where that differs
    /// from its bytes (device writes it has not pulled yet).
    pub known: Option<u32>,
}

/// A module global the guest looked up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Global {
    /// Its name.
    pub name: String,
    /// Its device address (the same again after restore, or the restore
    /// fails).
    pub address: u64,
    /// Its size.
    pub length: u64,
    /// The blob with its bytes.
    pub blob: u32,
}

/// A function the guest looked up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Function {
    /// The handle the guest holds.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Attributes the guest set (`cuFuncSetAttribute`): attribute, value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<(i32, i32)>,
}

/// A loaded module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    /// The handle the guest holds.
    pub id: u64,
    /// Its context.
    pub ctx: u64,
    /// The blob with its image, as loaded.
    pub image: u32,
    /// Its functions the guest looked up.
    pub functions: Vec<Function>,
    /// Its globals the guest looked up.
    pub globals: Vec<Global>,
    /// Globals its image declares that the guest never looked up (a
    /// kernel's own state), with their bytes: a restore writes them once
    /// every module is loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlooked: Vec<Global>,
    /// When it was loaded, in the order of the session's modules, streams
    /// and events (0 in snapshots before this field).
    #[serde(default)]
    pub seq: u64,
}

/// A stream or an event: its handle, context and creation flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queue {
    /// The handle the guest holds.
    pub id: u64,
    /// Its context.
    pub ctx: u64,
    /// Creation flags.
    pub flags: u32,
    /// Priority (streams).
    pub priority: i32,
    /// When it was made (see [`Module::seq`]).
    #[serde(default)]
    pub seq: u64,
}

/// A CUDA array, or a mipmapped array with the levels the guest looked
/// up, with the bytes of every level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayRec {
    /// The handle the guest holds.
    pub id: u64,
    /// Its context.
    pub ctx: u64,
    /// Elements per row.
    pub width: u64,
    /// Rows (0: one dimension).
    pub height: u64,
    /// Slices or layers (0: fewer than three dimensions).
    pub depth: u64,
    /// `CUarray_format`.
    pub format: u32,
    /// Channels per element.
    pub channels: u32,
    /// `CUDA_ARRAY3D_*` flags.
    pub flags: u32,
    /// 0: an array; `n`: a mipmapped array of `n` levels.
    pub levels: u32,
    /// The handles the guest holds of levels it looked up: level, handle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub level_ids: Vec<(u32, u64)>,
    /// The blobs with each level's elements (one for an array), rows and
    /// slices packed.
    pub blobs: Vec<u32>,
    /// When it was made (see [`Module::seq`]).
    pub seq: u64,
}

/// A texture or surface object. Kernels receive its value, which the
/// driver numbers per context; a restore makes it again with that value or
/// fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TexObjectRec {
    /// Its context.
    pub ctx: u64,
    /// Its value.
    pub value: u64,
    /// The request that made it (the protocol's `TexObjectCreate`, in
    /// hex), checked again as a request when it is restored.
    pub request: String,
}

/// What a session held at its checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Whether the guest had called `cuInit`.
    pub initialized: bool,
    /// Contexts, in the order they were made.
    pub contexts: Vec<Context>,
    /// The context current on the session's thread.
    pub current: Option<u64>,
    /// Device memory.
    pub allocations: Vec<Allocation>,
    /// Modules, with functions and globals.
    pub modules: Vec<Module>,
    /// Streams.
    pub streams: Vec<Queue>,
    /// Events.
    pub events: Vec<Queue>,
    /// An error of work sent without waiting, not yet reported.
    pub pending_error: Option<u32>,
    /// Address reservations of the virtual memory API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,
    /// Physical memory of the virtual memory API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub physical: Vec<Physical>,
    /// Its mappings, with their bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mappings: Vec<Mapped>,
    /// Graphs the guest holds (made, cloned or captured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graphs: Vec<GraphRec>,
    /// Executable graphs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graph_execs: Vec<ExecGraphRec>,
    /// Mirrored host memory, with its bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<MirrorRec>,
    /// CUDA arrays, with their bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arrays: Vec<ArrayRec>,
    /// Texture and surface objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tex_objects: Vec<TexObjectRec>,
    /// Memory pools of the program's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolRec>,
    /// Device memory handed over in place, in the order its descriptors
    /// travel: the snapshot restores only with them
    /// ([`Allocation::handed`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handed: Vec<Handed>,
    /// The ring's data area page-locked part by part as first needed, as
    /// the program asked; absent, it was page-locked whole with the first
    /// context, and is so again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub area: Option<AreaRec>,
}

/// How the program's data area is page-locked when it is first needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AreaRec {
    /// Bytes of copy staging at its start, page-locked at the first large
    /// copy through them.
    pub staging: u64,
    /// The program allocated page-locked memory in the area (the pool, the
    /// rest of it). A restore does not page-lock the new connection's pool
    /// for it: the program's library asks for that at its first
    /// page-locked allocation on the new connection.
    pub pool_wanted: bool,
}

/// The description at the head of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// When it was taken, seconds since the Unix epoch.
    pub created_unix_seconds: u64,
    /// The session's number in the backend that took it.
    pub session: u64,
    /// Whose session it is (`uid:N`, `tcp:ADDRESS`, `xen:DOMID`): only that
    /// peer may take it back.
    pub peer: String,
    /// The session's resume token, in hex: the guest's new connection
    /// presents it to take the session back.
    pub token: String,
    /// The executor it ran on (`cuda`, `host`); a restore needs the same.
    pub executor: String,
    /// The devices it used; a restore needs the same models.
    pub devices: Vec<Device>,
    /// The backend's devices the guest saw, by the guest's ordinal (its
    /// device handles are those ordinals): a restore needs the same.
    /// Snapshots of backends before this field saw all of them.
    #[serde(default)]
    pub gpus: Option<Vec<usize>>,
    /// The program's address space at the backend (its place in the
    /// program's list of backends): in every handle of the session, and
    /// in those the restored session makes. Snapshots of backends before
    /// this field are of space 0.
    #[serde(default)]
    pub space: u16,
    /// The bytes of device state the blobs hold.
    pub state_bytes: u64,
    /// The session's objects.
    pub state: State,
    /// Only what decides where a restore places things, for a worker
    /// prepared before a migration's pause ([`super::skeleton`]): never
    /// restored as a session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skeleton: bool,
    /// The device memory the session held as its quota counts it (its
    /// allocations, arrays, mirrors, physical memory): a skeleton, which
    /// lists no allocation, says it too, so a backend checks its quotas
    /// before the pause. Snapshots of backends before this field say 0.
    #[serde(default)]
    pub held_bytes: u64,
}
