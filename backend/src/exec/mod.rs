//! Executors: what actually runs the commands of a session.
//!
//! [`Executor`] describes the devices and makes contexts; [`ExecContext`]
//! runs commands in one context. Two implementations:
//!
//! - [`cuda::CudaExecutor`]: the GPU, through cudarc's `sys` layer with our
//!   own RAII context handle;
//! - [`host::HostExecutor`]: a **test double**. Device memory is host RAM and
//!   kernels are Rust functions from a small registry keyed by kernel name,
//!   so the whole path runs in CI without a GPU. It is not a CUDA emulator.
//!
//! The session layer above validates every guest-supplied handle and device
//! range before it calls an executor; executors trust their arguments to
//! that extent, but still return errors rather than panic.

pub mod array;
pub mod cuda;
pub mod graph;
pub mod host;
pub mod host_call;
pub mod image;
pub mod pool;

use pvgpu_ring::CuError;

/// Result of executor operations: a CUDA error on failure.
pub type CuRes<T> = Result<T, CuError>;

/// Static description of a device, gathered once.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// `cuDeviceGetName`.
    pub name: String,
    /// `cuDeviceGetUuid`.
    pub uuid: [u8; 16],
    /// `cuDeviceTotalMem`.
    pub total_mem: u64,
    /// Every attribute the driver answers, as (attribute, value).
    pub attrs: Vec<(i32, i32)>,
}

impl DeviceInfo {
    /// Value of one attribute.
    pub fn attr(&self, a: i32) -> Option<i32> {
        self.attrs.iter().find(|(k, _)| *k == a).map(|(_, v)| *v)
    }
}

/// Device memory handed over in place ([`ExecContext::hand_over`]).
#[derive(Debug)]
pub struct HandedPiece {
    /// Where it is mapped.
    pub address: u64,
    /// Its bytes.
    pub length: u64,
    /// The driver's descriptor of it (the host double's memory file).
    pub fd: std::os::fd::OwnedFd,
}

/// A device's gauges, for monitoring tools in the guest; `None` where the
/// executor cannot read one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Percent of the last sample period a kernel ran.
    pub gpu_util: Option<u32>,
    /// Percent of it device memory was read or written.
    pub mem_util: Option<u32>,
    /// Degrees Celsius.
    pub temperature: Option<u32>,
    /// Milliwatts.
    pub power_mw: Option<u32>,
    /// The driver's version (`580.159.04`), empty when unknown.
    pub driver_version: String,
    /// The device's PCIe link.
    pub link: pvgpu_ring::device_status::PcieLink,
}

/// Offset and size of one kernel parameter in the packed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Byte offset.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A stream memory operation (`CUstreamBatchMemOpParams`), its address
/// checked by the session: a wait for, or a write of, a 32- or 64-bit
/// value, a barrier or a flush of remote writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemOp {
    /// `CUstreamBatchMemOpType`.
    pub kind: u32,
    /// Its flags.
    pub flags: u32,
    /// Device address (a wait or a write).
    pub addr: u64,
    /// The value (low 32 bits for 32-bit operations).
    pub value: u64,
}

/// Launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub shared_mem: u32,
}

/// A pitched region of device memory: `height` rows of `width` units,
/// `pitch` bytes apart, from `ptr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    /// First byte.
    pub ptr: u64,
    /// Bytes between rows.
    pub pitch: u64,
    /// Units per row.
    pub width: u64,
    /// Rows.
    pub height: u64,
}

/// A 2D copy's two sides (each `height` rows of `width` bytes); host sides
/// are packed rows.
#[derive(Debug, Clone, Copy)]
pub enum Copy2D {
    /// Host to device.
    HtoD {
        /// Destination.
        dst: u64,
        /// Destination pitch.
        dst_pitch: u64,
        /// Packed host rows.
        src: *const u8,
    },
    /// Device to host.
    DtoH {
        /// Packed host rows.
        dst: *mut u8,
        /// Source.
        src: u64,
        /// Source pitch.
        src_pitch: u64,
    },
    /// Device to device.
    DtoD {
        /// Destination.
        dst: u64,
        /// Destination pitch.
        dst_pitch: u64,
        /// Source.
        src: u64,
        /// Source pitch.
        src_pitch: u64,
    },
}

pub use array::{ArrayCopy, ArrayShape, CopySide, Resource, Sampling, View};
pub use pvgpu_ring::proto::{LaunchAttr, TensorMapEncode};

/// What a link gave: the image or the driver's error, and its logs.
#[derive(Debug)]
pub struct Linked {
    /// The linked image.
    pub image: CuRes<Vec<u8>>,
    /// The driver's info log.
    pub info_log: Vec<u8>,
    /// The driver's error log.
    pub error_log: Vec<u8>,
    /// Milliseconds the driver spent.
    pub wall_ms: f32,
}

/// A set of devices and the means to make contexts on them.
pub trait Executor: Send + Sync + 'static {
    /// Context type.
    type Context: graph::ExecGraph;
    /// Short name reported to clients (`cuda`, `host`).
    fn kind(&self) -> &'static str;
    /// `cuDriverGetVersion`.
    fn driver_version(&self) -> i32;
    /// The devices, by ordinal.
    fn devices(&self) -> &[DeviceInfo];
    /// Creates a context on `device` (an index into [`Executor::devices`])
    /// for a session of address space `space`
    /// ([`pvgpu_ring::proto::Hello::space`]): where the executor places the
    /// context's device addresses itself, it keeps each space's apart.
    fn create_context(&self, device: usize, flags: u32, space: u16) -> CuRes<Self::Context>;
    /// `cuDeviceCanAccessPeer` between two devices (indices into
    /// [`Executor::devices`]).
    fn can_access_peer(&self, device: usize, peer: usize) -> CuRes<i32>;
    /// `cuDeviceGetP2PAttribute` of the link from `src` to `dst`.
    fn p2p_attribute(&self, attr: u32, src: usize, dst: usize) -> CuRes<i32>;
    /// `cuMemPoolSetAccess` (`set`: the `CUmemAccess_flags`) or
    /// `cuMemPoolGetAccess` of `peer`'s access to the default pool of
    /// `device`; returns the flags. The caller has a context of `device`
    /// current.
    fn mem_pool_access(&self, device: usize, peer: usize, set: Option<u32>) -> CuRes<u32>;
    /// The gauges of `device`.
    fn gauges(&self, device: usize) -> CuRes<Gauges>;
    /// `cuMemGetAllocationGranularity` of device memory on `device`:
    /// option 0 the minimum, 1 the recommended.
    fn vmm_granularity(&self, device: usize, option: u32) -> CuRes<u64>;
    /// Device memory this process holds on every device, as the device
    /// sees it: allocations, and what the driver reserved for contexts,
    /// their limits (stacks, heaps) and module code and globals. `None`
    /// where the executor cannot tell. Meaningful for one session only in
    /// a process that serves one session (a worker).
    fn process_footprint(&self) -> Option<u64> {
        None
    }
    /// Whether a session restored from a checkpoint gets every device
    /// address back (allocations and module globals,
    /// [`ExecContext::restore_memory`], [`ExecContext::module_load_placed`]).
    /// Where not, a checkpoint may not take a session away from its
    /// backend (one that leaves it running may).
    fn restores_addresses(&self) -> bool {
        false
    }
}

/// One context: dropping it frees everything made in it.
pub trait ExecContext: Send + 'static {
    /// Module handle.
    type Module: Send + 'static;
    /// Function handle.
    type Function: Send + Copy + PartialEq + 'static;
    /// Stream handle.
    type Stream: Send + Copy + 'static;
    /// Event handle.
    type Event: Send + Copy + PartialEq + 'static;

    /// Makes this context current on the calling thread.
    fn make_current(&mut self) -> CuRes<()>;
    /// What names this context to another's `peer_access`.
    fn peer_id(&self) -> u64;
    /// `cuCtxEnablePeerAccess` (`enable`) or `cuCtxDisablePeerAccess` of
    /// the context `peer_id` names, from this one.
    fn peer_access(&mut self, peer: u64, enable: bool, flags: u32) -> CuRes<()>;
    /// Page-locks host memory shared with the frontend (the data area) so
    /// copies from and to it run at pinned-memory speed, and maps it for the
    /// device where it can: returns the device address of `ptr` then.
    /// Optional: the default does nothing, and copies work either way.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must stay mapped until this context is dropped.
    unsafe fn register_host(&mut self, _ptr: *mut u8, _len: usize) -> CuRes<Option<u64>> {
        Ok(None)
    }
    /// Undoes [`ExecContext::register_host`] of `ptr` (nothing if it was
    /// not registered).
    fn unregister_host(&mut self, _ptr: *mut u8) -> CuRes<()> {
        Ok(())
    }
    /// Page-locks host memory of the backend's own (a stream connection's
    /// staging) so copies from and to it run at pinned-memory speed; unlike
    /// [`ExecContext::register_host`], never mapped for the device.
    /// Optional: the default does nothing, and copies work either way.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must stay mapped until this context is dropped or
    /// [`ExecContext::unpin_host`] undoes it.
    unsafe fn pin_host(&mut self, _ptr: *mut u8, _len: usize) -> CuRes<()> {
        Ok(())
    }
    /// Undoes [`ExecContext::pin_host`] or [`ExecContext::pin_read_only`]
    /// of `ptr`.
    fn unpin_host(&mut self, _ptr: *mut u8) -> CuRes<()> {
        Ok(())
    }
    /// Page-locks a read-only mapping of the backend's own (a snapshot's
    /// bytes, mapped from its file) for copies to the device, which then
    /// read it where it is; whether it did. Optional: the default does not,
    /// and copies work either way.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must stay mapped until [`ExecContext::unpin_host`]
    /// undoes it.
    // SAFETY: the default touches no memory.
    unsafe fn pin_read_only(&mut self, _ptr: *const u8, _len: usize) -> CuRes<bool> {
        Ok(false)
    }
    /// `cuCtxSynchronize`.
    fn synchronize(&mut self) -> CuRes<()>;
    /// `cuCtxResetPersistingL2Cache` (the default: nothing to reset).
    fn reset_persisting_l2(&mut self) -> CuRes<()> {
        Ok(())
    }
    /// `cuArray3DCreate` (`levels` 0) or `cuMipmappedArrayCreate`: the
    /// executor's handle.
    fn array_create(&mut self, shape: &ArrayShape, levels: u32) -> CuRes<u64>;
    /// `cuArrayDestroy` or `cuMipmappedArrayDestroy`.
    fn array_destroy(&mut self, raw: u64, mipmapped: bool) -> CuRes<()>;
    /// `cuMipmappedArrayGetLevel`: the level's array, owned by the
    /// mipmapped array.
    fn mipmap_level(&mut self, raw: u64, level: u32) -> CuRes<u64>;
    /// A copy with an array side, ordered on `stream`; complete when this
    /// returns if `wait`.
    ///
    /// # Safety
    /// Host sides hold `width * height * depth` bytes (writable for a
    /// destination) until the copy is complete; arrays and device ranges
    /// were checked by the session.
    unsafe fn array_copy(&mut self, c: &ArrayCopy, stream: Option<Self::Stream>, wait: bool) -> CuRes<()>;
    /// `cuTexObjectCreate` (with `sampling`) or `cuSurfObjectCreate`
    /// (without): the object's value, which kernels receive.
    fn tex_object_create(&mut self, res: &Resource, sampling: Option<&Sampling>) -> CuRes<u64>;
    /// `cuTexObjectDestroy` or `cuSurfObjectDestroy`.
    fn tex_object_destroy(&mut self, object: u64, surface: bool) -> CuRes<()>;
    /// `cuIpcGetMemHandle` of the allocation at `ptr`: what another
    /// process of the guest opens.
    fn ipc_export_mem(&mut self, ptr: u64) -> CuRes<crate::ipc::IpcObject>;
    /// `cuIpcOpenMemHandle`: the `size` bytes another session exported,
    /// mapped here; their address and the size actually mapped (the
    /// driver's word, not the exporter's, where the executor can tell).
    fn ipc_open_mem(&mut self, o: &crate::ipc::IpcObject, size: u64, flags: u32) -> CuRes<(u64, u64)>;
    /// `cuIpcCloseMemHandle` of an address `ipc_open_mem` returned.
    fn ipc_close_mem(&mut self, ptr: u64) -> CuRes<()>;
    /// `cuIpcGetEventHandle`.
    fn ipc_export_event(&mut self, e: Self::Event) -> CuRes<crate::ipc::IpcObject>;
    /// `cuIpcOpenEventHandle`: another session's event, as an event of
    /// this context (destroyed with `event_destroy`).
    fn ipc_open_event(&mut self, o: &crate::ipc::IpcObject) -> CuRes<Self::Event>;
    /// `cuMemAlloc`.
    fn mem_alloc(&mut self, size: u64) -> CuRes<u64>;
    /// `cuMemFree` of an address `mem_alloc` returned.
    fn mem_free(&mut self, dptr: u64) -> CuRes<()>;
    /// `cuMemGetInfo`.
    fn mem_get_info(&mut self) -> CuRes<(u64, u64)>;
    /// `cuMemsetD8/16/32[Async]` over a range the caller checked.
    fn memset(&mut self, dptr: u64, value: u32, elem_size: u32, count: u64, stream: Option<Self::Stream>) -> CuRes<()>;
    /// Copies `len` host bytes at `src` to `dst`; with `stream` the copy is
    /// ordered on that stream. With `wait`, the host bytes have been read
    /// when this returns (the caller may reuse them); without, an
    /// asynchronous copy may still be reading them.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes until the copy is done
    /// (when this returns with `wait`, else until the stream is
    /// synchronised or the context dropped); the device range was checked
    /// by the caller.
    unsafe fn htod(&mut self, dst: u64, src: *const u8, len: usize, stream: Option<Self::Stream>, wait: bool) -> CuRes<()>;
    /// Copies `len` device bytes at `src` to host memory at `dst`: complete
    /// when this returns with `wait`, else (on a stream) ordered on the
    /// stream.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes until the copy is done
    /// (as for `htod`); the device range was checked by the caller.
    unsafe fn dtoh(&mut self, dst: *mut u8, src: u64, len: usize, stream: Option<Self::Stream>, wait: bool) -> CuRes<()>;
    /// Device-to-device copy over ranges the caller checked.
    fn dtod(&mut self, dst: u64, src: u64, len: u64, stream: Option<Self::Stream>, is_async: bool) -> CuRes<()>;
    /// Loads a module from PTX, cubin or fatbin bytes.
    fn module_load(&mut self, image: &[u8]) -> CuRes<Self::Module>;
    /// Loads a module being restored, with its globals placed at the
    /// addresses `globals` names where the executor places them itself
    /// (the host double); a driver places them as it does for any load,
    /// and the caller checks where they landed.
    fn module_load_placed(&mut self, image: &[u8], globals: &[(String, u64)]) -> CuRes<Self::Module> {
        let _ = globals;
        self.module_load(image)
    }
    /// Device memory at the addresses of a checkpoint: `ranges` are the
    /// (address, length) of allocations of this context, each freed later
    /// with `mem_free(address)` as if `mem_alloc` had returned it. All or
    /// nothing; `CUDA_ERROR_ALREADY_MAPPED` when an address is taken.
    /// `handed` is memory another process of this GPU handed over in place
    /// ([`ExecContext::hand_over`]): the ranges inside it get it, with its
    /// bytes, and every piece must be taken (else
    /// `CUDA_ERROR_INVALID_VALUE`); the others get new memory.
    fn restore_memory(&mut self, ranges: &[(u64, u64)], handed: Vec<HandedPiece>) -> CuRes<()>;
    /// The memory behind `ranges` (allocations of this context, made by
    /// `mem_alloc`, a pool of the program's own or `restore_memory`) as
    /// descriptors another process of this GPU maps without a copy (a
    /// migration on one host): pieces that cover every range, each once.
    /// The context's work is done (the caller synchronised it).
    fn hand_over(&mut self, ranges: &[(u64, u64)]) -> CuRes<Vec<HandedPiece>> {
        let _ = ranges;
        Err(CuError::NOT_SUPPORTED)
    }
    /// Links `spec`'s inputs into one image (`cuLinkCreate` ..
    /// `cuLinkComplete`). The caller checked the options (plain values
    /// only), the input types (PTX, cubin, fatbin), NUL-terminated every
    /// PTX input and bounds-checked every cubin and fatbin.
    fn link(&mut self, spec: &pvgpu_ring::proto::LinkSpec<'_>) -> Linked;
    /// Unloads a module.
    fn module_unload(&mut self, module: Self::Module) -> CuRes<()>;
    /// Looks up a kernel and its parameter layout.
    fn function(&mut self, module: &Self::Module, name: &str) -> CuRes<(Self::Function, Vec<Param>)>;
    /// The names of a module's kernels.
    fn function_names(&mut self, module: &Self::Module) -> CuRes<Vec<String>>;
    /// Looks up a device global: (address, size).
    fn global(&mut self, module: &Self::Module, name: &str) -> CuRes<(u64, u64)>;
    /// Launches a kernel. `params` is the packed buffer laid out as `layout`
    /// says; the caller checked that every parameter lies inside it, and
    /// that `attrs` holds only attributes a guest may set.
    fn launch(
        &mut self,
        f: Self::Function,
        dims: LaunchDims,
        params: &[u8],
        layout: &[Param],
        attrs: &[LaunchAttr],
        stream: Option<Self::Stream>,
    ) -> CuRes<()>;
    /// Cluster occupancy of a launch configuration: kind 0, the most
    /// clusters active at once; kind 1, the largest cluster size.
    fn occupancy_clusters(&mut self, f: Self::Function, dims: LaunchDims, attrs: &[LaunchAttr], kind: u32) -> CuRes<i32>;
    /// `cuMemAllocAsync` from the device's default pool.
    fn mem_alloc_async(&mut self, size: u64, stream: Option<Self::Stream>) -> CuRes<u64>;
    /// `cuMemFreeAsync` of an address the caller checked.
    fn mem_free_async(&mut self, dptr: u64, stream: Option<Self::Stream>) -> CuRes<()>;
    /// Gets (`set` is `None`) or sets an attribute of the device's default
    /// memory pool; returns the value.
    fn mem_pool_attribute(&mut self, attr: u32, set: Option<u64>) -> CuRes<u64>;
    /// Whether device address `dptr` (a module global the caller looked up)
    /// is managed memory (`__managed__`). The default: no.
    fn is_managed(&mut self, _dptr: u64) -> bool {
        false
    }
    /// An operation on a memory pool of the program's own, or the trim of
    /// the device's default pool ([`pool::PoolOp`]).
    fn pool(&mut self, op: pool::PoolOp<Self::Stream>) -> CuRes<u64>;
    /// `cuMemPoolExportToShareableHandle` of a pool made shareable: what
    /// another session imports.
    fn pool_export(&mut self, pool: u64) -> CuRes<crate::ipc::IpcObject>;
    /// `cuMemPoolImportFromShareableHandle`: another session's pool, as a
    /// pool value of this context.
    fn pool_import(&mut self, o: &crate::ipc::IpcObject) -> CuRes<u64>;
    /// `cuMemPoolExportPointer` of an allocation of the session's from a
    /// shareable pool (`INVALID_VALUE` for one of another pool).
    fn pool_export_pointer(&mut self, ptr: u64) -> CuRes<crate::ipc::IpcObject>;
    /// `cuMemPoolImportPointer`: `size` bytes another session exported
    /// from the pool this context imported as `pool`; their address here.
    /// Freed as an allocation is (`mem_free`, `mem_free_async`), and
    /// counted in the exporter's quota.
    fn pool_import_pointer(&mut self, pool: u64, o: &crate::ipc::IpcObject, size: u64) -> CuRes<u64>;
    /// A 2D copy over ranges the caller checked.
    ///
    /// # Safety
    /// A host side must be valid for `width * height` bytes until the copy
    /// is done (when this returns with `wait`, else until the stream is
    /// synchronised or the context dropped).
    unsafe fn copy_2d(&mut self, c: Copy2D, width: u64, height: u64, stream: Option<Self::Stream>, wait: bool) -> CuRes<()>;
    /// `cuMemsetD2D8/16/32[Async]` of `rect` (its width in elements of
    /// `elem_size` bytes), over a range the caller checked.
    fn memset_2d(&mut self, rect: Rect, value: u32, elem_size: u32, stream: Option<Self::Stream>) -> CuRes<()>;
    /// `cuStreamBatchMemOp` of `ops` (their kinds, flags and ranges
    /// checked by the caller), in order on `stream`.
    fn stream_mem_ops(&mut self, ops: &[MemOp], stream: Option<Self::Stream>) -> CuRes<()>;
    /// `cuMemAddressReserve`: `size` bytes of device addresses aligned to
    /// `alignment` (0: the granularity), at `addr` if it is free (a hint).
    fn vmm_reserve(&mut self, size: u64, alignment: u64, addr: u64) -> CuRes<u64>;
    /// `cuMemAddressFree` of a whole reservation without mappings.
    fn vmm_free(&mut self, ptr: u64, size: u64) -> CuRes<()>;
    /// `cuMemCreate`: `size` bytes of physical memory on this context's
    /// device, with `flags` (`MEM_COMPRESSIBLE`, `MEM_SHAREABLE`); returns
    /// its handle and the flags it has.
    fn vmm_create(&mut self, size: u64, flags: u32) -> CuRes<(u64, u32)>;
    /// `cuMemExportToShareableHandle` of physical memory made with
    /// `MEM_SHAREABLE`: what another session imports.
    fn vmm_export(&mut self, handle: u64) -> CuRes<crate::ipc::IpcObject>;
    /// `cuMemImportFromShareableHandle`: another session's physical memory
    /// of `size` bytes, as a handle of this context.
    fn vmm_import(&mut self, o: &crate::ipc::IpcObject, size: u64) -> CuRes<u64>;
    /// `cuMemRelease`: the memory goes when its last mapping does.
    fn vmm_release(&mut self, handle: u64) -> CuRes<()>;
    /// `cuMemMap` of `size` bytes of `handle` from `offset` at `ptr`, in a
    /// reservation and over no other mapping (the caller checked).
    fn vmm_map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuRes<()>;
    /// `cuMemUnmap` of one whole mapping.
    fn vmm_unmap(&mut self, ptr: u64, size: u64) -> CuRes<()>;
    /// `cuMemSetAccess` from this context's device to one whole mapping.
    fn vmm_set_access(&mut self, ptr: u64, size: u64, flags: u32) -> CuRes<()>;
    /// Builds a tensor-map descriptor whose memory the caller checked.
    fn tensor_map_encode(&mut self, r: &TensorMapEncode) -> CuRes<[u8; 128]>;
    /// Moves what the context's kernels printed since the last call into
    /// `out`. The default has nothing to give.
    fn take_output(&mut self, _out: &mut Printed) {}
    /// Creates a stream.
    fn stream_create(&mut self, flags: u32, priority: i32) -> CuRes<Self::Stream>;
    /// Destroys a stream.
    fn stream_destroy(&mut self, s: Self::Stream) -> CuRes<()>;
    /// Waits for a stream.
    fn stream_synchronize(&mut self, s: Self::Stream) -> CuRes<()>;
    /// Whether a stream is idle (`Ok(false)` is `CUDA_ERROR_NOT_READY`).
    fn stream_query(&mut self, s: Self::Stream) -> CuRes<bool>;
    /// Creates an event.
    fn event_create(&mut self, flags: u32) -> CuRes<Self::Event>;
    /// Destroys an event.
    fn event_destroy(&mut self, e: Self::Event) -> CuRes<()>;
    /// Records an event on a stream.
    fn event_record(&mut self, e: Self::Event, s: Option<Self::Stream>) -> CuRes<()>;
    /// Whether an event has completed.
    fn event_query(&mut self, e: Self::Event) -> CuRes<bool>;
    /// Waits for an event.
    fn event_synchronize(&mut self, e: Self::Event) -> CuRes<()>;
    /// Milliseconds between two recorded events.
    fn event_elapsed(&mut self, start: Self::Event, end: Self::Event) -> CuRes<f32>;
    /// Makes `s` (the default stream if `None`) wait for `e`.
    fn stream_wait_event(&mut self, s: Option<Self::Stream>, e: Self::Event) -> CuRes<()>;
    /// Makes `s` wait for `e`, an event of another context of the session
    /// (on this device or another), as the driver allows.
    fn stream_wait_foreign_event(&mut self, s: Option<Self::Stream>, e: Self::Event) -> CuRes<()>;
    /// `cuStreamGetAttribute`, or `cuStreamSetAttribute` with `set`: the
    /// value (after a set, what the stream now holds), as
    /// `CUstreamAttrValue` lays it out.
    fn stream_attr(&mut self, s: Option<Self::Stream>, attr: u32, set: Option<&[u8; 64]>) -> CuRes<[u8; 64]>;
    /// `cuStreamCopyAttributes`.
    fn stream_copy_attrs(&mut self, dst: Option<Self::Stream>, src: Option<Self::Stream>) -> CuRes<()>;
    /// `cuFuncGetAttribute`.
    fn func_get_attribute(&mut self, f: Self::Function, attr: i32) -> CuRes<i32>;
    /// `cuFuncSetAttribute`.
    fn func_set_attribute(&mut self, f: Self::Function, attr: i32, value: i32) -> CuRes<()>;
    /// API version, flags, and stream priority range (least, greatest).
    fn info(&mut self) -> CuRes<CtxInfo>;
    /// `cuCtxGetLimit`.
    fn get_limit(&mut self, limit: u32) -> CuRes<u64>;
    /// `cuCtxSetLimit`.
    fn set_limit(&mut self, limit: u32, value: u64) -> CuRes<()>;
    /// The occupancy calculator; see `proto::OccupancyReq` for `kind`.
    fn occupancy(&mut self, f: Self::Function, kind: u32, block_size: i32, limit: i32, dyn_smem: u64, flags: u32) -> CuRes<(i64, i64)>;
}

/// Facts about a context.
pub use pvgpu_ring::proto::CtxInfo;

/// What a session's kernels printed (device `printf`), for the program's
/// standard output, and what the driver wrote to standard error for them
/// (device assertions).
#[derive(Debug, Default)]
pub struct Printed {
    /// For standard output.
    pub out: Vec<u8>,
    /// For standard error.
    pub err: Vec<u8>,
}

impl Printed {
    /// Whether there is nothing.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty() && self.err.is_empty()
    }

    /// Moves all of `other` after what this holds.
    pub fn append(&mut self, other: &mut Printed) {
        self.out.append(&mut other.out);
        self.err.append(&mut other.err);
    }
}
