//! Requests of stream capture and graphs: capture begin, end and status,
//! graphs and their nodes, executable graphs and their launches. Graphs,
//! nodes and executable graphs are session handles like streams and events.
//! A node-adding request is a head, then `dep_count` node ids it depends
//! on, then (a kernel node) its packed parameters.

use super::*;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

// Requests: stream capture.
wire_structs! {
    /// `cuStreamBeginCapture`.
    pub struct StreamBeginCapture {
        /// Stream id (not the default stream).
        pub stream: U64,
        /// `CUstreamCaptureMode`.
        pub mode: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Head of `StreamBeginCaptureToGraph` (`cuStreamBeginCaptureToGraph`):
    /// capture into an existing graph, after `dep_count` of its nodes,
    /// whose ids follow.
    pub struct CaptureToGraphHead {
        /// Stream id (not the default stream).
        pub stream: U64,
        /// Graph id.
        pub graph: U64,
        /// `CUstreamCaptureMode`.
        pub mode: U32,
        /// Node ids that follow.
        pub dep_count: U32,
    }
    /// `cuStreamUpdateCaptureDependencies`: the nodes the next work
    /// captured on `stream` will depend on.
    pub struct UpdateCaptureDepsHead {
        /// Stream id.
        pub stream: U64,
        /// `CU_STREAM_ADD_CAPTURE_DEPENDENCIES` (0) or
        /// `CU_STREAM_SET_CAPTURE_DEPENDENCIES` (1).
        pub flags: U32,
        /// Node ids that follow.
        pub dep_count: U32,
    }
    /// `cuStreamEndCapture`: the captured graph's id comes back.
    pub struct StreamEndCapture {
        /// Stream id.
        pub stream: U64,
    }
    /// `cuStreamGetCaptureInfo` and `cuStreamIsCapturing`.
    pub struct StreamCaptureInfo {
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuThreadExchangeStreamCaptureMode`: the previous mode comes back.
    pub struct CaptureModeExchange {
        /// `CUstreamCaptureMode`.
        pub mode: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

// Requests: graphs.
wire_structs! {
    /// `cuGraphCreate`, in a context of the session (where its nodes'
    /// work will run).
    pub struct GraphCreate {
        /// Context id.
        pub ctx: U64,
        /// Flags (zero).
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuGraphDestroy`.
    pub struct GraphDestroy {
        /// Graph id.
        pub graph: U64,
    }
    /// `cuGraphClone`.
    pub struct GraphClone {
        /// Graph id.
        pub graph: U64,
    }
    /// The nodes of a graph (`cuGraphGetNodes`, `cuGraphGetRootNodes`).
    pub struct GraphNodes {
        /// Graph id.
        pub graph: U64,
        /// 0: every node; 1: the root nodes.
        pub roots: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// The edges of a graph (`cuGraphGetEdges`): pairs (from, to).
    pub struct GraphEdges {
        /// Graph id.
        pub graph: U64,
    }
    /// A node's type and, for a child-graph node, its graph
    /// (`cuGraphNodeGetType`, `cuGraphChildGraphNodeGetGraph`).
    pub struct GraphNodeInfo {
        /// Node id.
        pub node: U64,
    }
    /// The dependencies of a node, or its dependents
    /// (`cuGraphNodeGetDependencies`, `cuGraphNodeGetDependentNodes`).
    pub struct GraphNodeEdges {
        /// Node id.
        pub node: U64,
        /// 0: the nodes it depends on; 1: the nodes that depend on it.
        pub dependents: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Head of `GraphEdgesChange`: `count` node ids it goes from, then
    /// `count` it goes to, follow.
    pub struct GraphEdgesHead {
        /// Graph id.
        pub graph: U64,
        /// Number of edges.
        pub count: U32,
        /// 0: add (`cuGraphAddDependencies`); 1: remove
        /// (`cuGraphRemoveDependencies`).
        pub remove: U32,
    }
    /// `cuGraphDestroyNode`.
    pub struct GraphNodeDestroy {
        /// Node id.
        pub node: U64,
    }
    /// `cuGraphDebugDotPrint`: the DOT text comes back.
    pub struct GraphDot {
        /// Graph id.
        pub graph: U64,
        /// `CUgraphDebugDot_flags`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

// Requests: nodes. Each head is followed by `dep_count` node ids.
wire_structs! {
    /// Head of `GraphAddKernelNode` and of the kernel-parameter setters:
    /// then the dependencies, then `param_len` bytes of packed
    /// parameters.
    pub struct GraphKernelHead {
        /// Graph id (adding), node id (`GraphKernelNodeSet`), or
        /// executable graph id (`GraphExecKernelNodeSet`).
        pub target: U64,
        /// Node id (`GraphExecKernelNodeSet`), else zero.
        pub node: U64,
        /// Function id.
        pub function: U64,
        /// Grid dimensions.
        pub grid: [U32; 3],
        /// Block dimensions.
        pub block: [U32; 3],
        /// Dynamic shared memory in bytes.
        pub shared_mem: U32,
        /// Bytes of packed parameters that follow the dependencies.
        pub param_len: U32,
        /// Node ids that follow.
        pub dep_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Head of `GraphAddMemcpyNode`: a device-to-device copy of `len`
    /// bytes; then the dependencies.
    pub struct GraphMemcpyHead {
        /// Graph id.
        pub graph: U64,
        /// Context id the copy runs in.
        pub ctx: U64,
        /// Destination.
        pub dst: U64,
        /// Source.
        pub src: U64,
        /// Bytes.
        pub len: U64,
        /// Node ids that follow.
        pub dep_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// The shape of a copy node: each side's first byte, the bytes from
    /// one of its rows to the next and the rows from one of its slices to
    /// the next; the bytes of a row, the rows of a slice and the slices.
    /// A side's rows are read only where more than one row (or slice) is
    /// copied.
    pub struct CopyShape {
        /// Destination: first byte.
        pub dst: U64,
        /// Destination: row pitch.
        pub dst_pitch: U64,
        /// Destination: rows per slice.
        pub dst_rows: U64,
        /// Source: first byte.
        pub src: U64,
        /// Source: row pitch.
        pub src_pitch: U64,
        /// Source: rows per slice.
        pub src_rows: U64,
        /// Bytes of a row.
        pub width: U64,
        /// Rows of a slice (at least 1).
        pub height: U64,
        /// Slices (at least 1).
        pub depth: U64,
    }
    /// Head of `GraphAddCopyNode`: a copy of any shape (`cuGraphAddMemcpyNode`
    /// of pitched memory); then the dependencies.
    pub struct GraphCopyHead {
        /// Graph id.
        pub graph: U64,
        /// Context id the copy runs in.
        pub ctx: U64,
        /// What it copies.
        pub shape: CopyShape,
        /// Node ids that follow.
        pub dep_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuGraphMemcpyNodeSetParams` (`exec` 0) and
    /// `cuGraphExecMemcpyNodeSetParams` of a copy of any shape.
    pub struct GraphCopyNodeSet {
        /// Executable graph id, or 0 for the node in its graph.
        pub exec: U64,
        /// Node id.
        pub node: U64,
        /// Context id the copy runs in.
        pub ctx: U64,
        /// What it copies.
        pub shape: CopyShape,
    }
    /// Head of `GraphAddMemsetNode`: `height` rows of `width` elements
    /// of `elem_size` bytes, `pitch` bytes apart; then the dependencies.
    pub struct GraphMemsetHead {
        /// Graph id.
        pub graph: U64,
        /// Context id the memset runs in.
        pub ctx: U64,
        /// Destination.
        pub dst: U64,
        /// Row pitch in bytes.
        pub pitch: U64,
        /// Elements per row.
        pub width: U64,
        /// Rows.
        pub height: U64,
        /// The value (its low `elem_size` bytes).
        pub value: U32,
        /// 1, 2 or 4.
        pub elem_size: U32,
        /// Node ids that follow.
        pub dep_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Head of `GraphAddNode` of the kinds without parameters of their
    /// own beyond an object: empty, child graph, event record, event
    /// wait; then the dependencies.
    pub struct GraphSimpleHead {
        /// Graph id.
        pub graph: U64,
        /// `CUgraphNodeType`: `EMPTY`, `GRAPH`, `EVENT_RECORD` or
        /// `WAIT_EVENT`.
        pub kind: U32,
        /// Node ids that follow.
        pub dep_count: U32,
        /// The child graph id or event id (zero for an empty node).
        pub object: U64,
    }
}

// Requests: executable graphs.
wire_structs! {
    /// `cuGraphInstantiate`.
    pub struct GraphInstantiate {
        /// Graph id.
        pub graph: U64,
        /// `CUgraphInstantiate_flags`.
        pub flags: U64,
    }
    /// `cuGraphLaunch` and `cuGraphUpload`.
    pub struct GraphLaunch {
        /// Executable graph id.
        pub exec: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// 0: launch; 1: upload.
        pub upload: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuGraphExecDestroy`.
    pub struct GraphExecDestroy {
        /// Executable graph id.
        pub exec: U64,
    }
    /// `cuGraphExecUpdate`: the executable graph takes `graph`'s
    /// parameters where their topologies match.
    pub struct GraphExecUpdate {
        /// Executable graph id.
        pub exec: U64,
        /// Graph id.
        pub graph: U64,
    }
    /// `cuGraphExecMemsetNodeSetParams`: node `node` (of the graph the
    /// executable graph was made from) sets `memset` instead (its `graph`
    /// and `dep_count` are zero). With `exec` 0,
    /// `cuGraphMemsetNodeSetParams`: the node in its graph.
    pub struct GraphExecMemsetSet {
        /// Executable graph id, or 0.
        pub exec: U64,
        /// Node id.
        pub node: U64,
        /// The memset.
        pub memset: GraphMemsetHead,
    }
    /// `cuGraphExecMemcpyNodeSetParams` of device memory (`memcpy`'s
    /// `graph` and `dep_count` are zero). With `exec` 0,
    /// `cuGraphMemcpyNodeSetParams`: the node in its graph.
    pub struct GraphExecMemcpySet {
        /// Executable graph id, or 0.
        pub exec: U64,
        /// Node id.
        pub node: U64,
        /// The copy.
        pub memcpy: GraphMemcpyHead,
    }
    /// `cuGraphExecChildGraphNodeSetParams`: the child-graph node runs a
    /// copy of `graph` (of the same shape) instead.
    pub struct GraphExecChildSet {
        /// Executable graph id.
        pub exec: U64,
        /// Node id.
        pub node: U64,
        /// Graph id.
        pub graph: U64,
    }
    /// `cuGraphNodeSetEnabled`: whether the executable graph runs a node.
    pub struct GraphNodeEnable {
        /// Executable graph id.
        pub exec: U64,
        /// Node id.
        pub node: U64,
        /// 1: runs; 0: skipped.
        pub enabled: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

// Replies.
wire_structs! {
    /// Head of the reply to `StreamCaptureInfo`: `dep_count` node ids
    /// follow.
    pub struct CaptureInfoHead {
        /// `CUstreamCaptureStatus`.
        pub status: U32,
        /// Node ids that follow: the capture's current dependencies.
        pub dep_count: U32,
        /// The capture's id (unique in the session), 0 when none.
        pub id: U64,
        /// The graph being captured, 0 when none.
        pub graph: U64,
    }
    /// Head of a list of ids: `count` follow.
    pub struct IdsHead {
        /// Number of ids.
        pub count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Reply to `GraphNodeInfo`.
    pub struct NodeInfoRep {
        /// `CUgraphNodeType`.
        pub kind: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// The graph a child-graph node runs (owned by the node), else 0.
        pub child: U64,
        /// The graph the node belongs to.
        pub graph: U64,
    }
    /// Reply to `GraphExecUpdate`.
    pub struct ExecUpdateRep {
        /// `CUgraphExecUpdateResult`.
        pub result: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// The node of `graph` that prevented the update, else 0.
        pub error_node: U64,
    }
    /// Head of a byte string (the DOT text of a graph): `len` bytes
    /// follow.
    pub struct BytesHead {
        /// Bytes that follow.
        pub len: U64,
    }
}

/// The capture mode a request names, checked.
pub fn capture_mode(v: u32) -> Result<u32, DecodeError> {
    if v <= 2 { Ok(v) } else { Err(DecodeError::BadField("mode")) }
}

// Requests and replies: graph memory (allocation and free nodes).
wire_structs! {
    /// Head of `GraphAddMemNode`: an allocation node of `size` bytes on the
    /// graph's device (`kind` 0), or a free node of `dptr` (`kind` 1);
    /// `dep_count` node ids follow.
    pub struct GraphMemHead {
        /// Graph id.
        pub graph: U64,
        /// Bytes to allocate (kind 0), else zero.
        pub size: U64,
        /// Address to free (kind 1), else zero.
        pub dptr: U64,
        /// 0: allocation; 1: free.
        pub kind: U32,
        /// Node ids that follow.
        pub dep_count: U32,
    }
    /// Reply to `GraphAddMemNode`.
    pub struct GraphMemNodeRep {
        /// Node id.
        pub node: U64,
        /// The address the node allocates at, or frees.
        pub dptr: U64,
    }
    /// `cuGraphMemAllocNodeGetParams`, `cuGraphMemFreeNodeGetParams`.
    pub struct MemNodeParams {
        /// Node id.
        pub node: U64,
    }
    /// Reply to `MemNodeParams`.
    pub struct MemNodeRep {
        /// The address allocated or freed.
        pub dptr: U64,
        /// Bytes allocated (zero for a free node).
        pub size: U64,
    }
    /// `cuDeviceGetGraphMemAttribute` (`op` 0), a high-water mark reset by
    /// `cuDeviceSetGraphMemAttribute` (1), `cuDeviceGraphMemTrim` (2), on
    /// the device of context `ctx`.
    pub struct GraphMemAttr {
        /// Context id.
        pub ctx: U64,
        /// `CUgraphMem_attribute` (0 to 3).
        pub attr: U32,
        /// 0: get; 1: reset; 2: trim.
        pub op: U32,
    }
}

// Requests: conditional nodes.
wire_structs! {
    /// `cuGraphConditionalHandleCreate`: a handle for conditional nodes of
    /// `graph`. The driver's value comes back: kernels receive it as an
    /// argument and set the condition through it.
    pub struct GraphCondHandle {
        /// Graph id.
        pub graph: U64,
        /// The value the condition takes at the start of each launch
        /// (with `flags` 1).
        pub default_value: U32,
        /// 0, or `CU_GRAPH_COND_ASSIGN_DEFAULT` (1).
        pub flags: U32,
    }
    /// Head of `GraphAddCondNode`: a conditional node of `handle`, whose
    /// `size` body graphs the driver makes; `dep_count` node ids follow.
    pub struct GraphCondHead {
        /// Graph id.
        pub graph: U64,
        /// A handle made for `graph`.
        pub handle: U64,
        /// `CUgraphConditionalNodeType`: if (0), while (1), switch (2).
        pub kind: U32,
        /// Body graphs: 1 or 2 (if, the second run when the condition is
        /// 0), 1 (while), up to [`MAX_COND_BODIES`] (switch).
        pub size: U32,
        /// Node ids that follow.
        pub dep_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

/// Most body graphs of one conditional node (a switch's cases).
pub const MAX_COND_BODIES: u32 = 1024;

// Requests and replies: node parameters.
wire_structs! {
    /// A node's parameters: `cuGraphKernelNodeGetParams`,
    /// `cuGraphMemsetNodeGetParams`, `cuGraphMemcpyNodeGetParams`,
    /// `cuGraphEventRecordNodeGetEvent`, `cuGraphEventWaitNodeGetEvent`.
    pub struct GraphNodeParams {
        /// Node id.
        pub node: U64,
    }
    /// Head of the reply to `GraphNodeParams`: `param_len` bytes of a
    /// kernel's packed parameters (or a batch memory-operation node's
    /// operations) follow.
    pub struct NodeParamsHead {
        /// `CUgraphNodeType`.
        pub kind: U32,
        /// Bytes of packed parameters that follow (a kernel node).
        pub param_len: U32,
        /// By kind: a kernel's function id, grid x, y, z, block x, y, z and
        /// dynamic shared memory; a memset's destination, pitch, value,
        /// element size, width and height; a copy's destination, source,
        /// bytes of a row, rows (low 32 bits) and slices (high 32 bits;
        /// both zero for a one-dimensional copy), destination pitch, source
        /// pitch, destination rows per slice and source rows per slice; an
        /// event node's event id; a batch memory-operation node's
        /// context id and operation count (its `MemOp`s follow in place of
        /// parameters). Zero past them.
        pub words: [U64; 8],
    }
    /// `cuGraphEventRecordNodeSetEvent`, `cuGraphEventWaitNodeSetEvent`
    /// (`exec` 0), and their `cuGraphExec*` forms.
    pub struct GraphEventNodeSet {
        /// Executable graph id, or 0 for the node in its graph.
        pub exec: U64,
        /// Node id.
        pub node: U64,
        /// Event id.
        pub event: U64,
    }
    /// `cuGraphNodeGetEnabled`: whether executable graph `exec` runs node
    /// `node` (1) or skips it (0).
    pub struct GraphNodeEnabled {
        /// Executable graph id.
        pub exec: U64,
        /// Node id.
        pub node: U64,
    }
    /// `cuGraphNodeFindInClone`: the node of `clone` made from `node`.
    pub struct GraphNodeFindInClone {
        /// Graph id of a clone.
        pub clone: U64,
        /// Node id of the graph it was cloned from.
        pub node: U64,
    }
}

// Requests: device graph launch.
wire_structs! {
    /// The handle kernels launch executable graph `exec` by
    /// (`cudaGraphLaunch` in device code): the driver's own, for a graph
    /// instantiated with `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`.
    pub struct GraphDeviceHandle {
        /// Executable graph id.
        pub exec: U64,
    }
}

/// `KernelNodeAttr` reads an attribute.
pub const NODE_ATTR_GET: u32 = 0;
/// `KernelNodeAttr` sets an attribute.
pub const NODE_ATTR_SET: u32 = 1;
/// `KernelNodeAttr` copies every attribute of `src` to `node`.
pub const NODE_ATTR_COPY: u32 = 2;

// Requests and replies: kernel node attributes.
wire_structs! {
    /// `cuGraphKernelNodeGetAttribute` ([`NODE_ATTR_GET`]),
    /// `cuGraphKernelNodeSetAttribute` ([`NODE_ATTR_SET`]) and
    /// `cuGraphKernelNodeCopyAttributes` ([`NODE_ATTR_COPY`]).
    pub struct KernelNodeAttr {
        /// Node id: the kernel node read or changed.
        pub node: U64,
        /// Node id of the kernel node copied from (`NODE_ATTR_COPY`), else 0.
        pub src: U64,
        /// `CUkernelNodeAttrID` (a `CUlaunchAttributeID`); 0 when copying.
        pub attr: U32,
        /// [`NODE_ATTR_GET`], [`NODE_ATTR_SET`] or [`NODE_ATTR_COPY`].
        pub op: U32,
        /// The value set, laid out as the attribute's member of
        /// `CUkernelNodeAttrValue`; zero otherwise.
        pub value: [u8; 64],
    }
    /// Reply to `KernelNodeAttr`: the attribute's value (after a set, the
    /// value the node now holds), zero after a copy.
    pub struct AttrValueRep {
        /// As `CUkernelNodeAttrValue` lays it out.
        pub value: [u8; 64],
    }
}
