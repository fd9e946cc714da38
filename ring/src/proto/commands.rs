//! The command table: every opcode with its handler in the backend
//! (`family::handler`), what the client does with it, its request type and
//! its reply type. One line says all there is to know of a command:
//!
//! ```text
//! 19 MemAlloc(memory::mem_alloc) [quiet]: MemAlloc => DptrRep;
//! ```
//!
//! - `posted`: the client may send it without waiting for its reply (then
//!   the reply carries nothing the client needs: a copy to page-locked
//!   memory leaves its bytes there; an error it causes is reported at the
//!   next waited call, as CUDA reports it); every other command is waited
//!   for ([`Command::POSTED`], checked by the client's `post` at compile
//!   time and its sends in debug builds);
//! - `quiet`: it cannot make the driver print kernel output (it never
//!   synchronises), so the backend does not look for any before its reply
//!   ([`Opcode::may_print`]);
//! - `local`: session housekeeping, not a CUDA call, so a waited one does
//!   not first report an error a posted call left pending
//!   ([`Opcode::reports_pending`]).
//!
//! [`command_table!`](crate::command_table) hands the table to a macro:
//! this module builds [`Opcode`], [`Request`], [`Handler`] and the
//! [`Command`] impls from it, and the backend its handler glue. Adding a
//! command is its line here, its wire struct in [`super::wire`] (and, with
//! a tail, its [`Body`] in [`super::body`]), its handler in the backend's
//! family module, its client call, and a test.

use super::body::*;
use super::wire::*;
use super::{DecodeError, Header, PROTOCOL_VERSION};
use crate::cuda::CuError;

/// A request type: its opcode, what the backend answers, and whether the
/// client may send it without waiting.
pub trait Command<'a>: Body<'a> {
    /// The opcode.
    const OP: Opcode;
    /// Whether the client may post it (see the module docs).
    const POSTED: bool;
    /// The reply's payload.
    type Reply: Reply;
}

/// Whether a flag list has `posted`.
macro_rules! posted {
    () => { false };
    (posted $($rest:ident)*) => { true };
    ($other:ident $($rest:ident)*) => { posted!($($rest)*) };
}

/// Whether a flag list has `quiet`.
macro_rules! quiet {
    () => { false };
    (quiet $($rest:ident)*) => { true };
    ($other:ident $($rest:ident)*) => { quiet!($($rest)*) };
}

/// Whether a flag list has `local`.
macro_rules! local {
    () => { false };
    (local $($rest:ident)*) => { true };
    ($other:ident $($rest:ident)*) => { local!($($rest)*) };
}

/// A flag list holds only known flags (anything else does not compile).
macro_rules! known_flags {
    () => {};
    (posted $($rest:ident)*) => { known_flags!($($rest)*); };
    (quiet $($rest:ident)*) => { known_flags!($($rest)*); };
    (local $($rest:ident)*) => { known_flags!($($rest)*); };
}

macro_rules! define_commands {
    ($(
        $(#[$m:meta])*
        $val:literal $name:ident($family:ident::$method:ident) [$($flag:ident),*]: $req:ty => $rep:ty;
    )*) => {
        $( known_flags!($($flag)*); )*

        /// Operation codes of protocol version 1.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Opcode { $( $(#[$m])* $name = $val ),* }

        impl Opcode {
            /// Every opcode, in numeric order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$name ),* ];

            /// Whether the client may send it without waiting (`posted`).
            pub fn posted(self) -> bool {
                match self { $( Opcode::$name => posted!($($flag)*), )* }
            }

            /// Whether the reply to it may have kernel output to send
            /// before it (it is not `quiet`). The driver writes what
            /// kernels print when the program synchronises with them; a
            /// quiet command never does. Output a quiet command caused is
            /// not lost: it goes before the reply of the next command that
            /// may print.
            pub fn may_print(self) -> bool {
                match self { $( Opcode::$name => !quiet!($($flag)*), )* }
            }

            /// Whether a request waiting for its reply first reports the
            /// error a posted call left pending (it is not `local`).
            pub fn reports_pending(self) -> bool {
                match self { $( Opcode::$name => !local!($($flag)*), )* }
            }

            /// The backend's handler: `family::handler`.
            pub fn handler(self) -> &'static str {
                match self { $( Opcode::$name => concat!(stringify!($family), "::", stringify!($method)), )* }
            }
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

        $(
            impl<'a> Command<'a> for $req {
                const OP: Opcode = Opcode::$name;
                const POSTED: bool = posted!($($flag)*);
                type Reply = $rep;
            }
        )*

        /// A decoded request. Borrowed tails point into the caller's private
        /// copy of the payload, never into shared memory.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request<'a> { $( $(#[$m])* $name($req) ),* }

        /// What serves each request: one method per command, named as the
        /// table names its handler, returning the command's typed reply or
        /// the `CUresult` of its failure. [`Request::dispatch`] calls the
        /// method and encodes the reply.
        // Every method takes `'a`, the lifetime of requests with a tail.
        #[allow(clippy::extra_unused_lifetimes)]
        pub trait Handler {
            /// Per-call context the methods share (the backend's data area
            /// and the reply buffer bulk replies are written into).
            type Io<'io>;
            /// The buffer of `io` that the reply payload is appended to.
            fn reply_buffer<'b>(io: &'b mut Self::Io<'_>) -> &'b mut Vec<u8>;
            $(
                $(#[$m])*
                fn $method<'a>(&mut self, req: $req, io: &mut Self::Io<'_>) -> Result<$rep, CuError>;
            )*
        }

        impl<'a> Request<'a> {
            /// Decodes a request from its header and a private copy of its
            /// payload.
            pub fn decode(h: &Header, p: &'a [u8]) -> Result<Request<'a>, DecodeError> {
                if h.version.get() != PROTOCOL_VERSION {
                    return Err(DecodeError::Version(h.version.get()));
                }
                if h.payload_len.get() as usize != p.len() {
                    return Err(DecodeError::Truncated);
                }
                Ok(match Opcode::try_from(h.opcode.get())? {
                    $( Opcode::$name => Request::$name(<$req as Body>::decode(Opcode::$name, p)?), )*
                })
            }

            /// The request's opcode.
            pub fn opcode(&self) -> Opcode {
                match self { $( Request::$name(_) => Opcode::$name, )* }
            }

            /// Appends the request's payload to `out`.
            pub fn encode(&self, out: &mut Vec<u8>) {
                match self { $( Request::$name(r) => r.encode(out), )* }
            }

            /// Runs the request on `h` and appends the encoded reply to the
            /// reply buffer of `io` (after any bulk bytes the handler wrote
            /// there).
            pub fn dispatch<H: Handler>(self, h: &mut H, io: &mut H::Io<'_>) -> Result<(), CuError> {
                match self { $( Request::$name(r) => h.$method(r, io).map(|rep| rep.encode(H::reply_buffer(io))), )* }
            }
        }
    };
}

/// The command table (see the module docs), handed to macro `$cb`: each
/// line is `OPCODE Name(family::handler) [flags]: Request => Reply;` with
/// its doc comment.
#[macro_export]
macro_rules! command_table {
    ($cb:ident) => {
        $cb! {
            /// First message on every connection: version negotiation.
            1 Hello(device::hello) [quiet, local]: Hello => HelloRep;
            /// Orderly end of the session.
            2 Goodbye(device::goodbye) [posted, local]: Goodbye => ();
            /// Does nothing; measures the round trip.
            3 Nop(device::nop) [quiet, local]: Nop => ();
            /// `cuInit`.
            4 Init(device::init) [quiet]: Init => ();
            /// `cuDriverGetVersion`.
            5 DriverGetVersion(device::driver_get_version) [quiet, local]: DriverGetVersion => I32Rep;
            /// `cuDeviceGetCount`.
            6 DeviceGetCount(device::device_get_count) [quiet]: DeviceGetCount => I32Rep;
            /// `cuDeviceGet`.
            7 DeviceGet(device::device_get) [quiet]: DeviceGet => I32Rep;
            /// Name, UUID, total memory and every attribute of a device, cached by
            /// the frontend (`cuDeviceGetName`, `cuDeviceGetUuid`,
            /// `cuDeviceTotalMem`, `cuDeviceGetAttribute`).
            8 DeviceGetProperties(device::device_get_properties) [quiet]: DeviceGetProperties => DevicePropsRep;
            /// `cuDeviceGetAttribute` of one attribute.
            9 DeviceGetAttribute(device::device_get_attribute) [quiet]: DeviceGetAttribute => I32Rep;
            /// `cuDevicePrimaryCtxRetain`.
            10 PrimaryCtxRetain(device::primary_ctx_retain) []: PrimaryCtxRetain => HandleRep;
            /// `cuDevicePrimaryCtxRelease`.
            11 PrimaryCtxRelease(device::primary_ctx_release) []: PrimaryCtxRelease => ();
            /// `cuCtxCreate`.
            12 CtxCreate(device::ctx_create) []: CtxCreate => HandleRep;
            /// `cuCtxDestroy`.
            13 CtxDestroy(device::ctx_destroy) []: CtxDestroy => ();
            /// `cuCtxSynchronize`.
            14 CtxSynchronize(device::ctx_synchronize) []: CtxSynchronize => ();
            /// `cuModuleLoadData` / `cuModuleLoadFatBinary`.
            15 ModuleLoad(module::module_load) []: ModuleLoad<'a> => HandleRep;
            /// `cuModuleUnload`.
            16 ModuleUnload(module::module_unload) [posted]: ModuleUnload => ();
            /// `cuModuleGetFunction`, with the parameter layout (`cuFuncGetParamInfo`).
            17 ModuleGetFunction(module::module_get_function) [quiet]: ModuleGetFunction<'a> => FunctionRep;
            /// `cuModuleGetGlobal`.
            18 ModuleGetGlobal(module::module_get_global) [quiet]: ModuleGetGlobal<'a> => GlobalRep;
            /// `cuMemAlloc`.
            19 MemAlloc(memory::mem_alloc) [quiet]: MemAlloc => DptrRep;
            /// `cuMemFree`.
            20 MemFree(memory::mem_free) [posted]: MemFree => ();
            /// `cuMemGetInfo`.
            21 MemGetInfo(memory::mem_get_info) [quiet]: MemGetInfo => MemInfoRep;
            /// `cuMemsetD8/D16/D32` and their `Async` forms.
            22 Memset(memory::memset) [posted]: Memset => ();
            /// `cuMemcpyHtoD` / `cuMemcpyHtoDAsync`.
            23 MemcpyHtoD(memory::memcpy_htod) [posted]: MemcpyHtoD<'a> => ();
            /// `cuMemcpyDtoH` / `cuMemcpyDtoHAsync`.
            24 MemcpyDtoH(memory::memcpy_dtoh) [posted]: MemcpyDtoH => Bulk;
            /// `cuMemcpyDtoD` / `cuMemcpyDtoDAsync`.
            25 MemcpyDtoD(memory::memcpy_dtod) [posted]: MemcpyDtoD => ();
            /// `cuStreamCreate` / `cuStreamCreateWithPriority`.
            26 StreamCreate(stream::stream_create) [quiet]: StreamCreate => HandleRep;
            /// `cuStreamDestroy`.
            27 StreamDestroy(stream::stream_destroy) [posted]: StreamDestroy => ();
            /// `cuStreamSynchronize`.
            28 StreamSynchronize(stream::stream_synchronize) []: StreamSynchronize => ();
            /// `cuStreamQuery`.
            29 StreamQuery(stream::stream_query) []: StreamQuery => ();
            /// `cuEventCreate`.
            30 EventCreate(stream::event_create) [quiet]: EventCreate => HandleRep;
            /// `cuEventRecord`.
            31 EventRecord(stream::event_record) [posted]: EventRecord => ();
            /// `cuEventQuery`.
            32 EventQuery(stream::event_query) []: EventQuery => ();
            /// `cuEventSynchronize`.
            33 EventSynchronize(stream::event_synchronize) []: EventSynchronize => ();
            /// `cuEventElapsedTime`.
            34 EventElapsedTime(stream::event_elapsed_time) []: EventElapsedTime => ElapsedRep;
            /// `cuEventDestroy`.
            35 EventDestroy(stream::event_destroy) [posted]: EventDestroy => ();
            /// `cuLaunchKernel`.
            36 LaunchKernel(launch::launch_kernel) [posted]: LaunchKernel<'a> => ();
            /// `cuStreamWaitEvent`.
            37 StreamWaitEvent(stream::stream_wait_event) [posted]: StreamWaitEvent => ();
            /// `cuFuncGetAttribute`.
            38 FuncGetAttribute(launch::func_get_attribute) [quiet]: FuncGetAttribute => I32Rep;
            /// `cuFuncSetAttribute`.
            39 FuncSetAttribute(launch::func_set_attribute) [quiet]: FuncSetAttribute => ();
            /// Facts about a context: API version, flags, stream priority range
            /// (`cuCtxGetApiVersion`, `cuCtxGetFlags`, `cuCtxGetStreamPriorityRange`).
            40 CtxGetInfo(device::ctx_get_info) [quiet]: CtxGetInfo => CtxInfoRep;
            /// `cuCtxGetLimit` / `cuCtxSetLimit`.
            41 CtxLimit(device::ctx_limit) [quiet]: CtxLimit => U64Rep;
            /// The occupancy calculator (`cuOccupancy*`).
            42 Occupancy(launch::occupancy) [quiet]: Occupancy => OccupancyRep;
            /// The names of a module's kernels (`cuModuleEnumerateFunctions`).
            43 ModuleFunctionNames(module::module_function_names) [quiet]: ModuleFunctionNames => NamesRep;
            /// `cuLaunchKernelEx`.
            44 LaunchKernelEx(launch::launch_kernel_ex) [posted]: LaunchKernelEx<'a> => ();
            /// `cuOccupancyMaxActiveClusters`, `cuOccupancyMaxPotentialClusterSize`.
            45 OccupancyClusters(launch::occupancy_clusters) [quiet]: OccupancyClusters<'a> => I32Rep;
            /// `cuMemAllocAsync`.
            46 MemAllocAsync(memory::mem_alloc_async) []: MemAllocAsync => DptrRep;
            /// `cuMemFreeAsync`.
            47 MemFreeAsync(memory::mem_free_async) [posted]: MemFreeAsync => ();
            /// `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` of the default pool.
            48 MemPoolAttribute(memory::mem_pool_attribute) [quiet]: MemPoolAttribute => U64Rep;
            /// `cuMemcpy2D` and its `Async` form (host, device, pitched).
            49 Memcpy2D(pitched::memcpy_2d) [posted]: Memcpy2D<'a> => Bulk;
            /// `cuMemsetD2D8/16/32` and their `Async` forms.
            50 Memset2D(pitched::memset_2d) [posted]: Memset2D => ();
            /// `cuTensorMapEncodeTiled` / `cuTensorMapEncodeIm2col`.
            51 TensorMapEncode(launch::tensor_map_encode) [quiet]: TensorMapEncode => TensorMapRep;
            /// `cuMemGetAllocationGranularity`.
            52 MemGranularity(vmm::mem_granularity) [quiet]: MemGranularity => U64Rep;
            /// `cuMemAddressReserve`.
            53 MemAddressReserve(vmm::mem_address_reserve) []: MemAddressReserve => DptrRep;
            /// `cuMemAddressFree`.
            54 MemAddressFree(vmm::mem_address_free) []: MemAddressFree => ();
            /// `cuMemCreate`.
            55 MemCreate(vmm::mem_create) []: MemCreate => HandleRep;
            /// `cuMemRelease`.
            56 MemRelease(vmm::mem_release) []: MemRelease => ();
            /// `cuMemMap`.
            57 MemMap(vmm::mem_map) []: MemMap => ();
            /// `cuMemUnmap`.
            58 MemUnmap(vmm::mem_unmap) []: MemUnmap => ();
            /// `cuMemSetAccess`.
            59 MemSetAccess(vmm::mem_set_access) []: MemSetAccess => ();
            /// The device address of the data area, 0 when the GPU cannot reach
            /// it (`cuMemHostGetDevicePointer`).
            60 DataAreaDevice(device::data_area_device) [quiet]: DataAreaDevice => U64Rep;
            /// Memory and gauges of a device, for NVML in the guest.
            61 DeviceStatus(device::device_status) [quiet]: DeviceStatus => DeviceStatusRep;
            /// A module from the backend's image cache; `CUDA_ERROR_NOT_FOUND`
            /// when it does not hold the image for this guest (send it then).
            62 ModuleLoadCached(module::module_load_cached) []: ModuleLoadCached => HandleRep;
            /// `cuStreamBeginCapture`.
            63 StreamBeginCapture(graph::stream_begin_capture) [quiet]: StreamBeginCapture => ();
            /// `cuStreamEndCapture`: the captured graph.
            64 StreamEndCapture(graph::stream_end_capture) [quiet]: StreamEndCapture => HandleRep;
            /// `cuStreamGetCaptureInfo`, `cuStreamIsCapturing`.
            65 StreamCaptureInfo(graph::stream_capture_info) [quiet]: StreamCaptureInfo => CaptureInfoRep;
            /// `cuThreadExchangeStreamCaptureMode`.
            66 CaptureModeExchange(graph::capture_mode_exchange) [quiet]: CaptureModeExchange => I32Rep;
            /// `cuGraphCreate`.
            67 GraphCreate(graph::graph_create) [quiet]: GraphCreate => HandleRep;
            /// `cuGraphDestroy`.
            68 GraphDestroy(graph::graph_destroy) [posted]: GraphDestroy => ();
            /// `cuGraphClone`.
            69 GraphClone(graph::graph_clone) [quiet]: GraphClone => HandleRep;
            /// `cuGraphGetNodes`, `cuGraphGetRootNodes`.
            70 GraphNodes(graph::graph_nodes) [quiet]: GraphNodes => IdsRep;
            /// `cuGraphGetEdges`: (from, to) pairs.
            71 GraphEdges(graph::graph_edges) [quiet]: GraphEdges => IdsRep;
            /// `cuGraphNodeGetType`, `cuGraphChildGraphNodeGetGraph`.
            72 GraphNodeInfo(graph::graph_node_info) [quiet]: GraphNodeInfo => NodeInfoRep;
            /// `cuGraphNodeGetDependencies`, `cuGraphNodeGetDependentNodes`.
            73 GraphNodeEdges(graph::graph_node_edges) [quiet]: GraphNodeEdges => IdsRep;
            /// `cuGraphAddDependencies`, `cuGraphRemoveDependencies`.
            74 GraphEdgesChange(graph::graph_edges_change) [quiet]: GraphEdgesChange<'a> => ();
            /// `cuGraphDestroyNode`.
            75 GraphNodeDestroy(graph::graph_node_destroy) [quiet]: GraphNodeDestroy => ();
            /// `cuGraphDebugDotPrint`: the DOT text.
            76 GraphDot(graph::graph_dot) [quiet]: GraphDot => BytesRep;
            /// `cuGraphAddKernelNode`.
            77 GraphAddKernelNode(graph::graph_add_kernel_node) [quiet]: GraphAddKernelNode<'a> => HandleRep;
            /// `cuGraphKernelNodeSetParams`.
            78 GraphKernelNodeSet(graph::graph_kernel_node_set) [quiet]: GraphKernelNodeSet<'a> => ();
            /// `cuGraphAddMemcpyNode` of device memory.
            79 GraphAddMemcpyNode(graph::graph_add_memcpy_node) [quiet]: GraphAddMemcpyNode<'a> => HandleRep;
            /// `cuGraphAddMemsetNode`.
            80 GraphAddMemsetNode(graph::graph_add_memset_node) [quiet]: GraphAddMemsetNode<'a> => HandleRep;
            /// Empty, child-graph, event-record and event-wait nodes.
            81 GraphAddNode(graph::graph_add_node) [quiet]: GraphAddNode<'a> => HandleRep;
            /// `cuGraphInstantiate`.
            82 GraphInstantiate(graph::graph_instantiate) []: GraphInstantiate => InstantiateRep;
            /// `cuGraphLaunch`, `cuGraphUpload`.
            83 GraphLaunch(graph::graph_launch) [posted]: GraphLaunch => ();
            /// `cuGraphExecDestroy`.
            84 GraphExecDestroy(graph::graph_exec_destroy) [posted]: GraphExecDestroy => ();
            /// `cuGraphExecKernelNodeSetParams`.
            85 GraphExecKernelNodeSet(graph::graph_exec_kernel_node_set) [quiet]: GraphExecKernelNodeSet<'a> => ();
            /// `cuGraphExecUpdate`.
            86 GraphExecUpdate(graph::graph_exec_update) [quiet]: GraphExecUpdate => ExecUpdateRep;
            /// `cuGraphExecMemsetNodeSetParams`.
            87 GraphExecMemsetSet(graph::graph_exec_memset_set) [quiet]: GraphExecMemsetSet => ();
            /// `cuGraphExecMemcpyNodeSetParams` of device memory.
            88 GraphExecMemcpySet(graph::graph_exec_memcpy_set) [quiet]: GraphExecMemcpySet => ();
            /// `cuGraphExecChildGraphNodeSetParams`.
            89 GraphExecChildSet(graph::graph_exec_child_set) [quiet]: GraphExecChildSet => ();
            /// `cuGraphNodeSetEnabled`.
            90 GraphNodeEnable(graph::graph_node_enable) [quiet]: GraphNodeEnable => ();
            /// `cuStreamBeginCaptureToGraph`.
            91 StreamBeginCaptureToGraph(graph::stream_begin_capture_to_graph) [quiet]: StreamBeginCaptureToGraph<'a> => ();
            /// Maps a range of the program's page-locked memory in the
            /// backend, for the device, at the same address (mirrored host
            /// memory, for a transport that shares none).
            92 HostMirrorMap(mirror::host_mirror_map) [quiet]: HostMirrorMap => U64Rep;
            /// Unmaps a mirror.
            93 HostMirrorUnmap(mirror::host_mirror_unmap) [quiet]: HostMirrorUnmap => ();
            /// Bytes the program changed in a mirror.
            94 HostMirrorWrite(mirror::host_mirror_write) [posted, quiet]: HostMirrorWrite<'a> => ();
            /// What the device changed in the mirrors since the program last
            /// saw them.
            95 HostMirrorPull(mirror::host_mirror_pull) [quiet, local]: HostMirrorPull => MirrorPullRep;
            /// `cuLinkComplete` of the inputs the program added (`cuLinkCreate`,
            /// `cuLinkAddData`, `cuLinkAddFile` stay in the program).
            96 LinkModule(link::link_module) [quiet]: LinkModule<'a> => LinkRep;
            /// Bytes of a linked image and its logs.
            97 LinkRead(link::link_read) [quiet]: LinkRead => Bulk;
            /// `cuLinkDestroy`.
            98 LinkDestroy(link::link_destroy) [posted, quiet]: LinkDestroy => ();
            /// The library's query or destroy of a host function's event, from
            /// its own thread, in relaxed capture mode.
            99 HostFnEvent(stream::host_fn_event) []: HostFnEvent => ();
            /// `cuStreamUpdateCaptureDependencies`.
            100 StreamUpdateCaptureDeps(graph::stream_update_capture_deps) [quiet]: StreamUpdateCaptureDeps<'a> => ();
            /// `cuGraphAddHostNode`.
            101 GraphAddHostNode(graph::graph_add_host_node) [quiet]: GraphAddHostNode<'a> => HandleRep;
            /// A host node's function and data: get, set, set in an
            /// executable graph.
            102 HostNodeParams(graph::host_node_params) [quiet]: HostNodeParams => HostNodeRep;
            /// `cuLaunchHostFunc` on a capturing stream.
            103 LaunchHostFunc(graph::launch_host_func) [quiet]: LaunchHostFunc => ();
            /// Runs the host functions of launched graphs in the program
            /// until those launches have finished.
            104 HostCallWait(graph::host_call_wait) [local]: HostCallWait => ();
            /// The program ran a host call (sent only while `HostCallWait`
            /// waits).
            105 HostCallDone(graph::host_call_done) [posted, quiet, local]: HostCallDone => ();
            /// `cuGraphAddMemAllocNode`, `cuGraphAddMemFreeNode`.
            106 GraphAddMemNode(graph::graph_add_mem_node) [quiet]: GraphAddMemNode<'a> => GraphMemNodeRep;
            /// A memory node's address and size.
            107 MemNodeParams(graph::mem_node_params) [quiet]: MemNodeParams => MemNodeRep;
            /// Graph memory of a context's device: attributes, trim.
            108 GraphMemAttr(graph::graph_mem_attr) []: GraphMemAttr => U64Rep;
            /// `cuGraphConditionalHandleCreate`: the handle's value.
            109 GraphCondHandle(graph::graph_cond_handle) [quiet]: GraphCondHandle => U64Rep;
            /// A conditional node: its id, then its body graphs' ids.
            110 GraphAddCondNode(graph::graph_add_cond_node) [quiet]: GraphAddCondNode<'a> => IdsRep;
            /// `cuStreamBatchMemOp`, `cuStreamWaitValue32/64`,
            /// `cuStreamWriteValue32/64`.
            111 StreamMemOps(stream::stream_mem_ops) [posted, quiet]: StreamMemOps<'a> => ();
            /// `cuGraphAddBatchMemOpNode`.
            112 GraphAddMemOpNode(graph::graph_add_mem_op_node) [quiet]: GraphAddMemOpNode<'a> => HandleRep;
            /// A node's parameters (kernel, memset, copy, event nodes).
            113 GraphNodeParams(graph::graph_node_params) [quiet]: GraphNodeParams => NodeParamsRep;
            /// The event of an event-record or event-wait node, in its graph
            /// or in an executable graph.
            114 GraphEventNodeSet(graph::graph_event_node_set) [quiet]: GraphEventNodeSet => ();
            /// `cuGraphNodeGetEnabled`.
            115 GraphNodeEnabled(graph::graph_node_enabled) [quiet]: GraphNodeEnabled => I32Rep;
            /// `cuGraphNodeFindInClone`.
            116 GraphNodeFindInClone(graph::graph_node_find_in_clone) [quiet]: GraphNodeFindInClone => HandleRep;
            /// A kernel node's attributes: get, set, copy from another.
            117 KernelNodeAttr(graph::kernel_node_attr) [quiet]: KernelNodeAttr => AttrValueRep;
            /// A batch memory-operation node's operations, set in its graph
            /// or in an executable graph.
            118 GraphMemOpNodeSet(graph::graph_mem_op_node_set) [quiet]: GraphMemOpNodeSet<'a> => ();
            /// `cuGraphAddMemcpyNode` of pitched (2D, 3D) memory.
            119 GraphAddCopyNode(graph::graph_add_copy_node) [quiet]: GraphAddCopyNode<'a> => HandleRep;
            /// A copy node's parameters of any shape, set in its graph or in
            /// an executable graph.
            120 GraphCopyNodeSet(graph::graph_copy_node_set) [quiet]: GraphCopyNodeSet => ();
            /// The handle device code launches an executable graph by.
            121 GraphDeviceHandle(graph::graph_device_handle) [quiet]: GraphDeviceHandle => U64Rep;
            /// `cuArray3DCreate`, `cuArrayCreate`, `cuMipmappedArrayCreate`.
            122 ArrayCreate(array::array_create) [quiet]: ArrayCreate => HandleRep;
            /// `cuArrayDestroy`, `cuMipmappedArrayDestroy`.
            123 ArrayDestroy(array::array_destroy) []: ArrayDestroy => ();
            /// `cuMipmappedArrayGetLevel`.
            124 MipmapLevel(array::mipmap_level) [quiet]: MipmapLevel => HandleRep;
            /// A copy with a CUDA array on one side or both (`cuMemcpy2D`,
            /// `cuMemcpy3D`, `cuMemcpyHtoA`, ... and their `Async` forms).
            125 ArrayCopy(array::array_copy) [posted]: ArrayCopy<'a> => Bulk;
            /// `cuTexObjectCreate`, `cuSurfObjectCreate`: the object's value,
            /// which kernels receive.
            126 TexObjectCreate(array::tex_object_create) [quiet]: TexObjectCreate => U64Rep;
            /// `cuTexObjectDestroy`, `cuSurfObjectDestroy`.
            127 TexObjectDestroy(array::tex_object_destroy) [quiet]: TexObjectDestroy => ();
            /// A stream's attributes: get, set, copy from another stream.
            128 StreamAttr(stream::stream_attr) [quiet]: StreamAttr => AttrValueRep;
            /// `cuCtxResetPersistingL2Cache`.
            129 CtxResetL2(device::ctx_reset_l2) [quiet]: CtxResetL2 => ();
            /// `cuIpcGetMemHandle`.
            130 IpcGetMemHandle(ipc::ipc_get_mem_handle) [quiet]: IpcGetMemHandle => IpcHandleRep;
            /// `cuIpcOpenMemHandle`.
            131 IpcOpenMemHandle(ipc::ipc_open_mem_handle) [quiet]: IpcOpenMemHandle => IpcOpenRep;
            /// `cuIpcCloseMemHandle`.
            132 IpcCloseMemHandle(ipc::ipc_close_mem_handle) []: IpcCloseMemHandle => ();
            /// `cuIpcGetEventHandle`.
            133 IpcGetEventHandle(ipc::ipc_get_event_handle) [quiet]: IpcGetEventHandle => IpcHandleRep;
            /// `cuIpcOpenEventHandle`.
            134 IpcOpenEventHandle(ipc::ipc_open_event_handle) [quiet]: IpcOpenEventHandle => HandleRep;
            /// `cuMemCreate` of compressible or shareable memory.
            135 MemCreateWith(vmm::mem_create_with) []: MemCreateWith => MemCreateRep;
            /// `cuMemExportToShareableHandle`.
            136 MemExport(ipc::mem_export) [quiet]: MemExport => IpcHandleRep;
            /// `cuMemImportFromShareableHandle`.
            137 MemImport(ipc::mem_import) [quiet]: MemImport => MemCreateRep;
            /// Peer access between devices: asked, enabled, disabled, its
            /// attributes.
            138 PeerAccess(device::peer_access) [quiet]: PeerAccess => I32Rep;
            /// First message of a connection that takes back a checkpointed
            /// session (instead of `Hello`); answered as `Hello` is, or with
            /// `CUDA_ERROR_NOT_FOUND` while the session is not back yet.
            139 Resume(device::resume) [quiet, local]: Resume => HelloRep;
            /// The data area's layout, and that its parts are page-locked on
            /// demand (`CUDA_ERROR_NOT_SUPPORTED` from a backend that
            /// page-locks the whole area with the first context).
            140 AreaPinOnDemand(area_pin::area_pin_on_demand) [quiet, local]: AreaPinOnDemand => ();
            /// `cuMemPoolSetAccess` / `cuMemPoolGetAccess` of the default
            /// pool, for another device.
            141 MemPoolAccess(memory::mem_pool_access) [quiet]: MemPoolAccess => I32Rep;
            /// `cuMemPoolCreate`: a pool of the program's own.
            142 MemPoolCreate(pool::mem_pool_create) [quiet]: MemPoolCreate => HandleRep;
            /// `cuMemPoolDestroy`.
            143 MemPoolDestroy(pool::mem_pool_destroy) [quiet]: MemPoolDestroy => ();
            /// `cuMemAllocFromPoolAsync` from a pool of the program's own.
            144 MemAllocFromPool(pool::mem_alloc_from_pool) []: MemAllocFromPool => DptrRep;
            /// `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` of a pool of
            /// the program's own.
            145 MemPoolAttributeOf(pool::mem_pool_attribute_of) [quiet]: MemPoolAttributeOf => U64Rep;
            /// `cuMemPoolSetAccess` / `cuMemPoolGetAccess` of a pool of the
            /// program's own, for a device.
            146 MemPoolAccessOf(pool::mem_pool_access_of) [quiet]: MemPoolAccessOf => I32Rep;
            /// `cuMemPoolTrimTo`.
            147 MemPoolTrim(pool::mem_pool_trim) [quiet]: MemPoolTrim => ();
            /// `cuMemPoolCreate` of a shareable pool.
            148 MemPoolCreateWith(pool_ipc::mem_pool_create_with) [quiet]: MemPoolCreateWith => HandleRep;
            /// `cuMemPoolExportToShareableHandle`.
            149 MemPoolExport(pool_ipc::mem_pool_export) [quiet]: MemPoolExport => IpcHandleRep;
            /// `cuMemPoolImportFromShareableHandle`.
            150 MemPoolImport(pool_ipc::mem_pool_import) [quiet]: MemPoolImport => HandleRep;
            /// `cuMemPoolExportPointer`.
            151 MemPoolExportPointer(pool_ipc::mem_pool_export_pointer) [quiet]: MemPoolExportPointer => IpcHandleRep;
            /// `cuMemPoolImportPointer`.
            152 MemPoolImportPointer(pool_ipc::mem_pool_import_pointer) [quiet]: MemPoolImportPointer => IpcOpenRep;
            /// A copy from another backend of the program into this
            /// session's memory: its ticket.
            153 PeerCopyOpen(peer_copy::peer_copy_open) [quiet]: PeerCopyOpen => PeerTicketRep;
            /// A copy from this session's memory to another backend: the
            /// connection, made by this backend.
            154 PeerCopyConnect(peer_copy::peer_copy_connect) [quiet]: PeerCopyConnect => ();
            /// The bytes of a copy to another backend, sent.
            155 PeerCopySend(peer_copy::peer_copy_send) [quiet]: PeerCopySend => ();
            /// The bytes of a copy from another backend, received.
            156 PeerCopyReceive(peer_copy::peer_copy_receive) [quiet]: PeerCopyReceive => ();
        }
    };
}

crate::command_table!(define_commands);
