//! What an executor does for stream capture and graphs ([`ExecGraph`]):
//! the CUDA executor forwards to the driver, which records work on a
//! capturing stream and runs executable graphs; the host test double
//! records and replays them itself.

use super::host_call::HostCalls;
use super::{CuRes, ExecContext, LaunchDims, Param};
use std::sync::Arc;

/// A node to add to a graph, its handles already the executor's and its
/// device ranges checked by the session.
pub enum NodeSpec<'a, C: ExecGraph + ?Sized> {
    /// A kernel: `params` packed as `layout` says.
    Kernel {
        /// The kernel.
        f: C::Function,
        /// Geometry.
        dims: LaunchDims,
        /// Packed parameters.
        params: &'a [u8],
        /// Where each parameter lies in them.
        layout: &'a [Param],
    },
    /// A copy, one- to three-dimensional, of device memory or of host
    /// memory of this process.
    Copy(Copy3D),
    /// A memset of `height` rows of `width` elements, `pitch` bytes apart.
    Memset {
        /// Destination.
        dst: u64,
        /// Row pitch.
        pitch: u64,
        /// Elements per row.
        width: u64,
        /// Rows.
        height: u64,
        /// The value.
        value: u32,
        /// 1, 2 or 4.
        elem_size: u32,
    },
    /// A node that does nothing.
    Empty,
    /// A graph run as one node (the node takes a copy of it).
    Child(C::Graph),
    /// Records an event.
    EventRecord(C::Event),
    /// Waits for an event.
    EventWait(C::Event),
    /// Frees graph memory at `dptr`.
    MemFree {
        /// The address an allocation node (or a captured allocation)
        /// handed out.
        dptr: u64,
    },
    /// Stream memory operations (a batch memory-operation node).
    MemOps(&'a [super::MemOp]),
    /// Runs the program's function `func(data)` in the program
    /// ([`super::host_call`]).
    Host {
        /// The program's `CUhostFn`.
        func: u64,
        /// Its `userData`.
        data: u64,
    },
}

// Every variant holds handles (`Copy`) and borrowed slices, so a spec is
// copied freely (the session makes the same change to an executable graph
// and to its copy of what it runs); a derive would ask `C: Copy`.
impl<C: ExecGraph + ?Sized> Clone for NodeSpec<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: ExecGraph + ?Sized> Copy for NodeSpec<'_, C> {}

/// One side of a copy node: its first byte, the distance between its rows
/// and the rows of one of its slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopySide {
    /// Address of the first byte copied.
    pub addr: u64,
    /// Bytes from one row to the next.
    pub pitch: u64,
    /// Rows from one slice to the next.
    pub rows: u64,
    /// Host memory of this process (a mirror of the program's ordinary
    /// memory, mapped while the session lives), else device memory
    /// (page-locked memory the device reaches included).
    pub host: bool,
}

/// A copy of `depth` slices of `height` rows of `width` bytes; the session
/// checked that every byte of each side lies in its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy3D {
    /// Where it writes.
    pub dst: CopySide,
    /// What it reads.
    pub src: CopySide,
    /// Bytes of a row.
    pub width: u64,
    /// Rows of a slice.
    pub height: u64,
    /// Slices.
    pub depth: u64,
}

impl CopySide {
    /// A side of one contiguous run.
    pub fn linear(addr: u64, host: bool) -> CopySide {
        CopySide { addr, pitch: 0, rows: 0, host }
    }

    /// Where row `y` of slice `z` starts.
    pub fn row(&self, y: u64, z: u64) -> u64 {
        self.addr + (z * self.rows + y) * self.pitch
    }
}

impl Copy3D {
    /// `len` contiguous bytes.
    pub fn linear(dst: CopySide, src: CopySide, len: u64) -> Copy3D {
        Copy3D { dst, src, width: len, height: 1, depth: 1 }
    }
}

/// What a node does, as the executor reads it back.
pub enum NodeParams<C: ExecGraph + ?Sized> {
    /// A kernel.
    Kernel {
        /// The kernel.
        f: C::Function,
        /// Geometry.
        dims: LaunchDims,
        /// Its arguments.
        args: KernelArgs,
    },
    /// A memset.
    Memset {
        /// Destination.
        dst: u64,
        /// Row pitch.
        pitch: u64,
        /// Elements per row.
        width: u64,
        /// Rows.
        height: u64,
        /// The value.
        value: u32,
        /// 1, 2 or 4.
        elem_size: u32,
    },
    /// A copy.
    Copy(Copy3D),
    /// An event-record (`wait` false) or event-wait node.
    Event {
        /// Whether it waits.
        wait: bool,
        /// The event.
        event: C::Event,
    },
    /// A batch memory-operation node's operations.
    MemOps(Vec<super::MemOp>),
}

/// A kernel node's arguments as its executor holds them.
pub enum KernelArgs {
    /// Packed as the function's layout says.
    Packed(Vec<u8>),
    /// One address per parameter, where its value lies (valid until the
    /// node changes).
    Pointers(Vec<usize>),
}

/// A stream's capture status.
pub struct CaptureInfo<C: ExecGraph + ?Sized> {
    /// `CUstreamCaptureStatus`.
    pub status: u32,
    /// The capture's id (0 when none).
    pub id: u64,
    /// The graph being captured.
    pub graph: Option<C::Graph>,
    /// The nodes new work would depend on.
    pub deps: Vec<C::Node>,
}

/// Capture and graphs in one context.
pub trait ExecGraph: ExecContext {
    /// A graph.
    type Graph: Send + Copy + Eq + std::hash::Hash + 'static;
    /// A node of a graph.
    type Node: Send + Copy + Eq + std::hash::Hash + 'static;
    /// An executable graph.
    type GraphExec: Send + Copy + 'static;

    /// `cuStreamBeginCapture`.
    fn begin_capture(&mut self, s: Self::Stream, mode: u32) -> CuRes<()>;
    /// `cuStreamBeginCaptureToGraph`: capture into `g`, after `deps`.
    fn begin_capture_to_graph(&mut self, s: Self::Stream, g: Self::Graph, deps: &[Self::Node], mode: u32) -> CuRes<()>;
    /// `cuStreamEndCapture`.
    fn end_capture(&mut self, s: Self::Stream) -> CuRes<Self::Graph>;
    /// `cuStreamUpdateCaptureDependencies`: `flags` 0 adds `deps` to what
    /// the next captured work on `s` follows, 1 replaces it (the caller
    /// checked the flags and that the nodes are of the capture's graph).
    fn update_capture_deps(&mut self, s: Self::Stream, deps: &[Self::Node], flags: u32) -> CuRes<()>;
    /// Invalidates the capture stream `s` takes part in: the session
    /// refused a call on it, as the driver refuses (and invalidates on) an
    /// illegal call during capture.
    fn invalidate_capture(&mut self, s: Self::Stream);
    /// `cuStreamGetCaptureInfo` of `s` (the default stream if `None`).
    fn capture_info(&mut self, s: Option<Self::Stream>) -> CuRes<CaptureInfo<Self>>;
    /// `cuThreadExchangeStreamCaptureMode`: returns the previous mode.
    fn exchange_capture_mode(&mut self, mode: u32) -> CuRes<u32>;
    /// `cuGraphCreate`.
    fn graph_create(&mut self) -> CuRes<Self::Graph>;
    /// `cuGraphDestroy`.
    fn graph_destroy(&mut self, g: Self::Graph) -> CuRes<()>;
    /// `cuGraphClone`.
    fn graph_clone(&mut self, g: Self::Graph) -> CuRes<Self::Graph>;
    /// Every node of `g`, or its roots.
    fn graph_nodes(&mut self, g: Self::Graph, roots: bool) -> CuRes<Vec<Self::Node>>;
    /// Every edge of `g`.
    fn graph_edges(&mut self, g: Self::Graph) -> CuRes<Vec<(Self::Node, Self::Node)>>;
    /// A node's `CUgraphNodeType` and, for a child-graph node, its graph.
    fn node_info(&mut self, n: Self::Node) -> CuRes<(u32, Option<Self::Graph>)>;
    /// What a node depends on, or what depends on it.
    fn node_edges(&mut self, n: Self::Node, dependents: bool) -> CuRes<Vec<Self::Node>>;
    /// Adds (or removes) the edges `from[i] -> to[i]` of `g`.
    fn graph_edges_change(&mut self, g: Self::Graph, from: &[Self::Node], to: &[Self::Node], remove: bool) -> CuRes<()>;
    /// `cuGraphDestroyNode`.
    fn node_destroy(&mut self, n: Self::Node) -> CuRes<()>;
    /// `cuGraphDebugDotPrint`, as text.
    fn graph_dot(&mut self, g: Self::Graph, flags: u32) -> CuRes<Vec<u8>>;
    /// Adds a node after `deps`.
    fn graph_add_node(&mut self, g: Self::Graph, deps: &[Self::Node], spec: NodeSpec<'_, Self>) -> CuRes<Self::Node>;
    /// `cuGraph{Kernel,Memset,Memcpy,BatchMemOp}NodeSetParams`,
    /// `cuGraphEvent{Record,Wait}NodeSetEvent` (`spec` of the node's type).
    fn node_set(&mut self, n: Self::Node, spec: NodeSpec<'_, Self>) -> CuRes<()>;
    /// A kernel, memset, copy, event or batch memory-operation node's
    /// parameters.
    fn node_params(&mut self, n: Self::Node) -> CuRes<NodeParams<Self>>;
    /// A kernel node's attribute `attr` (a launch attribute the session
    /// checked): set to `value` when given; the value it holds now.
    fn kernel_node_attr(&mut self, n: Self::Node, attr: u32, value: Option<&[u8; 64]>) -> CuRes<[u8; 64]>;
    /// `cuGraphKernelNodeCopyAttributes`: every attribute of kernel node
    /// `src` to kernel node `dst`.
    fn kernel_node_copy_attrs(&mut self, dst: Self::Node, src: Self::Node) -> CuRes<()>;
    /// `cuGraphNodeGetEnabled` of node `n` in `e`.
    fn node_enabled(&mut self, e: Self::GraphExec, n: Self::Node) -> CuRes<bool>;
    /// `cuGraphNodeFindInClone`: the node of graph `clone` made from `n`.
    fn node_in_clone(&mut self, clone: Self::Graph, n: Self::Node) -> CuRes<Self::Node>;
    /// `cuGraphInstantiate`.
    fn graph_instantiate(&mut self, g: Self::Graph, flags: u64) -> CuRes<Self::GraphExec>;
    /// `cuGraphLaunch` (or `cuGraphUpload`) on `s`.
    fn graph_launch(&mut self, e: Self::GraphExec, s: Option<Self::Stream>, upload: bool) -> CuRes<()>;
    /// The handle device code launches `e` by (instantiated with
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`).
    fn graph_device_handle(&mut self, e: Self::GraphExec) -> CuRes<u64>;
    /// `cuGraphExecDestroy`.
    fn graph_exec_destroy(&mut self, e: Self::GraphExec) -> CuRes<()>;
    /// `cuGraphExec{Kernel,Memset,Memcpy,ChildGraph,BatchMemOp}NodeSetParams` of node
    /// `n` (of the graph `e` was made from; `spec` of the node's type).
    fn exec_node_set(&mut self, e: Self::GraphExec, n: Self::Node, spec: NodeSpec<'_, Self>) -> CuRes<()>;
    /// `cuGraphNodeSetEnabled` of node `n` in `e`.
    fn node_enable(&mut self, e: Self::GraphExec, n: Self::Node, enabled: bool) -> CuRes<()>;
    /// `cuGraphExecUpdate`: the result and the node that stopped it.
    fn exec_update(&mut self, e: Self::GraphExec, g: Self::Graph) -> CuRes<(u32, Option<Self::Node>)>;
    /// Gives the context its session's host-call queue, which its host
    /// nodes call (before any graph is made).
    fn attach_host_calls(&mut self, calls: Arc<HostCalls>);
    /// `cuLaunchHostFunc` on `s`, which is capturing: a host node of the
    /// capture.
    fn launch_host_func(&mut self, s: Self::Stream, func: u64, data: u64) -> CuRes<()>;
    /// A host node's function and data.
    fn host_node_get(&mut self, n: Self::Node) -> CuRes<(u64, u64)>;
    /// `cuGraphHostNodeSetParams`.
    fn host_node_set(&mut self, n: Self::Node, func: u64, data: u64) -> CuRes<()>;
    /// Marks, on `s`, the end of a launch that runs host nodes.
    fn host_fence(&mut self, s: Option<Self::Stream>) -> CuRes<()>;
    /// Whether launches that run host nodes are still under way (the host
    /// double runs work it held back here).
    fn host_work_pending(&mut self) -> CuRes<bool>;
    /// Adds an allocation node of `size` bytes of graph memory on the
    /// context's device after `deps`: the node and the address it
    /// allocates at.
    fn graph_add_mem_alloc(&mut self, g: Self::Graph, deps: &[Self::Node], size: u64) -> CuRes<(Self::Node, u64)>;
    /// A memory node's address and size (zero for a free node).
    fn mem_node_get(&mut self, n: Self::Node) -> CuRes<(u64, u64)>;
    /// Graph memory of the context's device: attribute `attr` (`op` 0),
    /// a high-water mark reset (1), unused memory trimmed (2).
    fn graph_mem(&mut self, attr: u32, op: u32) -> CuRes<u64>;
    /// `cuGraphConditionalHandleCreate` for `g`: the handle's value, which
    /// kernels set the condition through (`flags` checked: 0 or
    /// `CU_GRAPH_COND_ASSIGN_DEFAULT`).
    fn cond_handle_create(&mut self, g: Self::Graph, default: u32, flags: u32) -> CuRes<u64>;
    /// Adds a conditional node of `handle` (made for `g`) after `deps`:
    /// `CUgraphConditionalNodeType` `kind` with `size` body graphs. The
    /// node and its body graphs, which it owns.
    fn graph_add_conditional(
        &mut self,
        g: Self::Graph,
        deps: &[Self::Node],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> CuRes<(Self::Node, Vec<Self::Graph>)>;
}
