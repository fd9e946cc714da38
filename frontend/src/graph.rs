//! Stream capture and graphs: what the client sends for them. Graphs,
//! nodes and executable graphs are session ids, like streams and events.

use crate::error::Result;
use crate::{Client, Context, CuError, Event, Function, Stream};
use pvgpu_ring::proto::{self, *};

/// A graph id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Graph(pub u64);
/// A graph node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphNode(pub u64);
/// An executable graph id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphExec(pub u64);

/// A stream's capture status (`cuStreamGetCaptureInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CaptureInfo {
    /// `CUstreamCaptureStatus`.
    pub status: u32,
    /// The capture's id, 0 when none.
    pub id: u64,
    /// The graph being captured.
    pub graph: Option<Graph>,
    /// The nodes new work would depend on.
    pub deps: Vec<GraphNode>,
}

/// A node's type and, for a child-graph node, its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeInfo {
    /// `CUgraphNodeType`.
    pub kind: u32,
    /// The graph a child-graph node runs (owned by the node).
    pub child: Option<Graph>,
    /// The graph the node belongs to.
    pub graph: Graph,
}

/// A kernel node's parameters.
#[derive(Debug, Clone, Copy)]
pub struct KernelNode<'a> {
    /// The kernel.
    pub f: &'a Function,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Dynamic shared memory.
    pub shared_mem: u32,
    /// Packed parameters (the function's layout).
    pub params: &'a [u8],
}

/// The ids of `nodes`.
fn ids(nodes: &[GraphNode]) -> Vec<u64> {
    nodes.iter().map(|n| n.0).collect()
}

/// The ids of `nodes`, as the wire lists them after a head.
pub(crate) fn wire_ids(nodes: &[GraphNode]) -> Vec<zerocopy::little_endian::U64> {
    nodes.iter().map(|n| n.0.into()).collect()
}

fn kernel_head(target: u64, node: u64, k: &KernelNode<'_>, deps: usize) -> Result<GraphKernelHead> {
    if k.params.len() != k.f.param_bytes {
        return Err(CuError::INVALID_VALUE.into());
    }
    Ok(GraphKernelHead {
        target: target.into(),
        node: node.into(),
        function: k.f.id.into(),
        grid: k.grid.map(Into::into),
        block: k.block.map(Into::into),
        shared_mem: k.shared_mem.into(),
        param_len: (k.params.len() as u32).into(),
        dep_count: (deps as u32).into(),
        reserved: 0.into(),
    })
}

impl Client {
    /// `cuStreamBeginCapture` of stream `s` in `mode`.
    pub fn stream_begin_capture(&self, s: Stream, mode: u32) -> Result<()> {
        let mut c = self.conn();
        c.call(&StreamBeginCapture { stream: s.0.into(), mode: mode.into(), reserved: 0.into() })?;
        c.capture_modes.begun(s.0, mode);
        drop(c);
        self.count_capture(true);
        Ok(())
    }

    /// `cuStreamBeginCaptureToGraph`: capture on `s` into `g`, after
    /// `deps`.
    pub fn stream_begin_capture_to_graph(&self, s: Stream, g: Graph, deps: &[GraphNode], mode: u32) -> Result<()> {
        let head = CaptureToGraphHead { stream: s.0.into(), graph: g.0.into(), mode: mode.into(), dep_count: (deps.len() as u32).into() };
        let deps = wire_ids(deps);
        let mut c = self.conn();
        c.call(&StreamBeginCaptureToGraph { head, deps: &deps })?;
        c.capture_modes.begun(s.0, mode);
        drop(c);
        self.count_capture(true);
        Ok(())
    }

    /// `cuStreamUpdateCaptureDependencies`: what the next work captured on
    /// `s` follows: `deps` added (`set` false) or instead of what it
    /// followed.
    pub fn stream_update_capture_deps(&self, s: Stream, deps: &[GraphNode], set: bool) -> Result<()> {
        let head = UpdateCaptureDepsHead { stream: s.0.into(), flags: u32::from(set).into(), dep_count: (deps.len() as u32).into() };
        let deps = wire_ids(deps);
        self.call(&StreamUpdateCaptureDeps { head, deps: &deps })
    }

    /// `cuStreamEndCapture`: the captured graph.
    pub fn stream_end_capture(&self, s: Stream) -> Result<Graph> {
        let r = self.call(&StreamEndCapture { stream: s.0.into() });
        // A capture ends with the call, whatever it answers, unless the
        // stream was not one that began one.
        if !matches!(&r, Err(e) if matches!(e.code(), CuError::STREAM_CAPTURE_UNMATCHED | CuError::ILLEGAL_STATE | CuError::INVALID_HANDLE))
        {
            self.conn().capture_modes.ended(s.0);
            self.count_capture(false);
        }
        Ok(Graph(r?.handle.get()))
    }

    /// `cuStreamGetCaptureInfo` of stream `s`.
    pub fn stream_capture_info(&self, s: Stream) -> Result<CaptureInfo> {
        let r = self.call(&StreamCaptureInfo { stream: s.0.into() })?;
        let graph = r.head.graph.get();
        Ok(CaptureInfo {
            status: r.head.status.get(),
            id: r.head.id.get(),
            graph: (graph != 0).then_some(Graph(graph)),
            deps: r.deps.into_iter().map(GraphNode).collect(),
        })
    }

    /// `cuThreadExchangeStreamCaptureMode`: sets the calling thread's
    /// capture mode to `mode`, returns the previous one. Kept here, per
    /// thread; the backend learns it when it matters
    /// ([`crate::capture_mode`]).
    pub fn capture_mode_exchange(&self, mode: u32) -> Result<u32> {
        if mode > pvgpu_ring::cuda::api::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
            return Err(CuError::INVALID_VALUE.into());
        }
        Ok(crate::capture_mode::exchange_thread_mode(mode))
    }

    /// `cuGraphCreate` in context `ctx`.
    pub fn graph_create(&self, ctx: Context) -> Result<Graph> {
        Ok(Graph(self.call(&GraphCreate { ctx: ctx.0.into(), flags: 0.into(), reserved: 0.into() })?.handle.get()))
    }

    /// `cuGraphDestroy`. Sent without waiting.
    pub fn graph_destroy(&self, g: Graph) -> Result<()> {
        self.post(&GraphDestroy { graph: g.0.into() })
    }

    /// `cuGraphClone`.
    pub fn graph_clone(&self, g: Graph) -> Result<Graph> {
        Ok(Graph(self.call(&GraphClone { graph: g.0.into() })?.handle.get()))
    }

    /// The nodes of `g` (`roots`: only those without dependencies).
    pub fn graph_nodes(&self, g: Graph, roots: bool) -> Result<Vec<GraphNode>> {
        let r = self.call(&GraphNodes { graph: g.0.into(), roots: u32::from(roots).into(), reserved: 0.into() })?;
        Ok(r.ids.into_iter().map(GraphNode).collect())
    }

    /// The edges of `g`.
    pub fn graph_edges(&self, g: Graph) -> Result<Vec<(GraphNode, GraphNode)>> {
        let r = self.call(&GraphEdges { graph: g.0.into() })?;
        Ok(r.ids.chunks_exact(2).map(|p| (GraphNode(p[0]), GraphNode(p[1]))).collect())
    }

    /// A node's type, graph and child graph.
    pub fn graph_node_info(&self, n: GraphNode) -> Result<NodeInfo> {
        let r = self.call(&GraphNodeInfo { node: n.0.into() })?;
        let child = r.child.get();
        Ok(NodeInfo { kind: r.kind.get(), child: (child != 0).then_some(Graph(child)), graph: Graph(r.graph.get()) })
    }

    /// What node `n` depends on, or (`dependents`) what depends on it.
    pub fn graph_node_edges(&self, n: GraphNode, dependents: bool) -> Result<Vec<GraphNode>> {
        let r = self.call(&GraphNodeEdges { node: n.0.into(), dependents: u32::from(dependents).into(), reserved: 0.into() })?;
        Ok(r.ids.into_iter().map(GraphNode).collect())
    }

    /// `cuGraphAddDependencies` (or, with `remove`,
    /// `cuGraphRemoveDependencies`) of the edges `from[i] -> to[i]`.
    pub fn graph_edges_change(&self, g: Graph, from: &[GraphNode], to: &[GraphNode], remove: bool) -> Result<()> {
        if from.len() != to.len() {
            return Err(CuError::INVALID_VALUE.into());
        }
        let head = GraphEdgesHead { graph: g.0.into(), count: (from.len() as u32).into(), remove: u32::from(remove).into() };
        let mut buf = Vec::new();
        self.call(&GraphEdgesChange::new(head, &ids(from), &ids(to), &mut buf))
    }

    /// `cuGraphDestroyNode`.
    pub fn graph_node_destroy(&self, n: GraphNode) -> Result<()> {
        self.call(&GraphNodeDestroy { node: n.0.into() })
    }

    /// `cuGraphDebugDotPrint`: the DOT text.
    pub fn graph_dot(&self, g: Graph, flags: u32) -> Result<Vec<u8>> {
        Ok(self.call(&GraphDot { graph: g.0.into(), flags: flags.into(), reserved: 0.into() })?.bytes)
    }

    /// `cuGraphAddKernelNode`.
    pub fn graph_add_kernel_node(&self, g: Graph, deps: &[GraphNode], k: &KernelNode<'_>) -> Result<GraphNode> {
        let head = kernel_head(g.0, 0, k, deps.len())?;
        let mut buf = Vec::new();
        Ok(GraphNode(self.call(&GraphAddKernelNode::new(head, &ids(deps), k.params, &mut buf))?.handle.get()))
    }

    /// `cuGraphKernelNodeSetParams`.
    pub fn graph_kernel_node_set(&self, n: GraphNode, k: &KernelNode<'_>) -> Result<()> {
        let head = kernel_head(n.0, 0, k, 0)?;
        let mut buf = Vec::new();
        self.call(&GraphKernelNodeSet::new(head, &[], k.params, &mut buf))
    }

    /// `cuGraphAddMemcpyNode` of `len` device bytes from `src` to `dst`.
    pub fn graph_add_memcpy_node(&self, g: Graph, deps: &[GraphNode], ctx: Context, dst: u64, src: u64, len: u64) -> Result<GraphNode> {
        let head = GraphMemcpyHead {
            graph: g.0.into(),
            ctx: ctx.0.into(),
            dst: dst.into(),
            src: src.into(),
            len: len.into(),
            dep_count: (deps.len() as u32).into(),
            reserved: 0.into(),
        };
        let deps = wire_ids(deps);
        Ok(GraphNode(self.call(&GraphAddMemcpyNode { head, deps: &deps })?.handle.get()))
    }

    /// `cuGraphAddMemsetNode` (`m.graph` and `m.dep_count` are set here).
    pub fn graph_add_memset_node(&self, g: Graph, deps: &[GraphNode], mut m: GraphMemsetHead) -> Result<GraphNode> {
        m.graph = g.0.into();
        m.dep_count = (deps.len() as u32).into();
        let deps = wire_ids(deps);
        Ok(GraphNode(self.call(&GraphAddMemsetNode { head: m, deps: &deps })?.handle.get()))
    }

    /// An empty, child-graph, event-record or event-wait node (`kind`, a
    /// `CUgraphNodeType`; `object` the child graph or event id).
    pub fn graph_add_node(&self, g: Graph, deps: &[GraphNode], kind: u32, object: u64) -> Result<GraphNode> {
        let head = GraphSimpleHead { graph: g.0.into(), kind: kind.into(), dep_count: (deps.len() as u32).into(), object: object.into() };
        let deps = wire_ids(deps);
        Ok(GraphNode(self.call(&GraphAddNode { head, deps: &deps })?.handle.get()))
    }

    /// `cuGraphInstantiate` with `flags`.
    pub fn graph_instantiate(&self, g: Graph, flags: u64) -> Result<GraphExec> {
        let r = self.call(&GraphInstantiate { graph: g.0.into(), flags: flags.into() })?;
        let e = r.handle.get();
        if r.host_nodes.get() > 0 {
            self.conn().host.execs.insert(e);
        }
        Ok(GraphExec(e))
    }

    /// The handle device code launches `e` by (`cudaGraphLaunch` in a
    /// kernel): `e` was instantiated with
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`. Backends whose sessions
    /// share a process answer `CUDA_ERROR_NOT_SUPPORTED`.
    pub fn graph_device_handle(&self, e: GraphExec) -> Result<u64> {
        Ok(self.call(&GraphDeviceHandle { exec: e.0.into() })?.value.get())
    }

    /// `cuGraphLaunch` (or, with `upload`, `cuGraphUpload`) on `s`. Sent
    /// without waiting.
    /// A launch of a graph with host nodes is followed by a wait for them
    /// ([`crate::host_call`]).
    pub fn graph_launch(&self, e: GraphExec, s: Stream, upload: bool) -> Result<()> {
        let req = GraphLaunch { exec: e.0.into(), stream: s.0.into(), upload: u32::from(upload).into(), reserved: 0.into() };
        let waits = self.waits();
        let mut c = self.conn();
        if waits {
            c.call(&req)?;
        } else {
            c.send(&req, 0)?;
        }
        if !upload && c.host.execs.contains(&e.0) {
            c.host.pending = true;
        }
        Ok(())
    }

    /// `cuGraphExecDestroy`. Sent without waiting.
    pub fn graph_exec_destroy(&self, e: GraphExec) -> Result<()> {
        self.conn().host.execs.remove(&e.0);
        self.post(&GraphExecDestroy { exec: e.0.into() })
    }

    /// `cuGraphExecKernelNodeSetParams` of node `n`.
    pub fn graph_exec_kernel_node_set(&self, e: GraphExec, n: GraphNode, k: &KernelNode<'_>) -> Result<()> {
        let head = kernel_head(e.0, n.0, k, 0)?;
        let mut buf = Vec::new();
        self.call(&GraphExecKernelNodeSet::new(head, &[], k.params, &mut buf))
    }

    /// `cuGraphExecUpdate`: the result and the node that stopped it.
    pub fn graph_exec_update(&self, e: GraphExec, g: Graph) -> Result<(u32, Option<GraphNode>)> {
        let r: proto::ExecUpdateRep = self.call(&GraphExecUpdate { exec: e.0.into(), graph: g.0.into() })?;
        let n = r.error_node.get();
        Ok((r.result.get(), (n != 0).then_some(GraphNode(n))))
    }

    /// `cuGraphExecMemsetNodeSetParams` of node `n` (`m.graph` and
    /// `m.dep_count` are set here).
    pub fn graph_exec_memset_set(&self, e: GraphExec, n: GraphNode, mut m: GraphMemsetHead) -> Result<()> {
        m.graph = 0.into();
        m.dep_count = 0.into();
        self.call(&GraphExecMemsetSet { exec: e.0.into(), node: n.0.into(), memset: m })
    }

    /// `cuGraphExecMemcpyNodeSetParams` of node `n`: `len` device bytes
    /// from `src` to `dst`.
    pub fn graph_exec_memcpy_set(&self, e: GraphExec, n: GraphNode, ctx: Context, dst: u64, src: u64, len: u64) -> Result<()> {
        let memcpy = GraphMemcpyHead {
            graph: 0.into(),
            ctx: ctx.0.into(),
            dst: dst.into(),
            src: src.into(),
            len: len.into(),
            dep_count: 0.into(),
            reserved: 0.into(),
        };
        self.call(&GraphExecMemcpySet { exec: e.0.into(), node: n.0.into(), memcpy })
    }

    /// `cuGraphAddMemcpyNode` of pitched memory: a copy of any shape.
    pub fn graph_add_copy_node(&self, g: Graph, deps: &[GraphNode], ctx: Context, shape: CopyShape) -> Result<GraphNode> {
        let head = GraphCopyHead { graph: g.0.into(), ctx: ctx.0.into(), shape, dep_count: (deps.len() as u32).into(), reserved: 0.into() };
        let deps = wire_ids(deps);
        Ok(GraphNode(self.call(&GraphAddCopyNode { head, deps: &deps })?.handle.get()))
    }

    /// A copy node's parameters of any shape, in its graph (`exec` `None`:
    /// `cuGraphMemcpyNodeSetParams`) or in an executable graph.
    pub fn graph_copy_node_set(&self, exec: Option<GraphExec>, n: GraphNode, ctx: Context, shape: CopyShape) -> Result<()> {
        self.call(&GraphCopyNodeSet { exec: exec.map_or(0, |x| x.0).into(), node: n.0.into(), ctx: ctx.0.into(), shape })
    }

    /// `cuGraphExecChildGraphNodeSetParams`: child-graph node `n` runs a
    /// copy of `g`.
    pub fn graph_exec_child_set(&self, e: GraphExec, n: GraphNode, g: Graph) -> Result<()> {
        self.call(&GraphExecChildSet { exec: e.0.into(), node: n.0.into(), graph: g.0.into() })
    }

    /// `cuGraphNodeSetEnabled`.
    pub fn graph_node_enable(&self, e: GraphExec, n: GraphNode, enabled: bool) -> Result<()> {
        self.call(&GraphNodeEnable { exec: e.0.into(), node: n.0.into(), enabled: u32::from(enabled).into(), reserved: 0.into() })
    }

    /// An event-record node, by event.
    pub fn graph_add_event_node(&self, g: Graph, deps: &[GraphNode], e: Event, wait: bool) -> Result<GraphNode> {
        use pvgpu_ring::cuda::api::{CU_GRAPH_NODE_TYPE_EVENT_RECORD, CU_GRAPH_NODE_TYPE_WAIT_EVENT};
        let kind = if wait { CU_GRAPH_NODE_TYPE_WAIT_EVENT } else { CU_GRAPH_NODE_TYPE_EVENT_RECORD };
        self.graph_add_node(g, deps, kind.0, e.0)
    }
}

impl Client {
    /// `cuGraphAddMemAllocNode`: `size` bytes of graph memory on the
    /// graph's device; the node and the address it allocates at.
    pub fn graph_add_mem_alloc_node(&self, g: Graph, deps: &[GraphNode], size: u64) -> Result<(GraphNode, u64)> {
        self.graph_add_mem_node(g, deps, 0, size, 0)
    }

    /// `cuGraphAddMemFreeNode` of graph memory at `dptr`.
    pub fn graph_add_mem_free_node(&self, g: Graph, deps: &[GraphNode], dptr: u64) -> Result<GraphNode> {
        Ok(self.graph_add_mem_node(g, deps, 1, 0, dptr)?.0)
    }

    fn graph_add_mem_node(&self, g: Graph, deps: &[GraphNode], kind: u32, size: u64, dptr: u64) -> Result<(GraphNode, u64)> {
        let head = GraphMemHead {
            graph: g.0.into(),
            size: size.into(),
            dptr: dptr.into(),
            kind: kind.into(),
            dep_count: (deps.len() as u32).into(),
        };
        let deps = wire_ids(deps);
        let r = self.call(&GraphAddMemNode { head, deps: &deps })?;
        Ok((GraphNode(r.node.get()), r.dptr.get()))
    }

    /// A memory node's address and size (0 for a free node).
    pub fn mem_node_params(&self, n: GraphNode) -> Result<(u64, u64)> {
        let r = self.call(&MemNodeParams { node: n.0.into() })?;
        Ok((r.dptr.get(), r.size.get()))
    }

    /// Graph memory of `ctx`'s device: `cuDeviceGetGraphMemAttribute`
    /// (`op` 0), a high-water mark reset (1), `cuDeviceGraphMemTrim` (2).
    pub fn graph_mem_attr(&self, ctx: Context, attr: u32, op: u32) -> Result<u64> {
        Ok(self.call(&GraphMemAttr { ctx: ctx.0.into(), attr: attr.into(), op: op.into() })?.value.get())
    }
}

impl Client {
    /// `cuGraphAddBatchMemOpNode`: memory operations run in context `ctx`.
    pub fn graph_add_mem_op_node(&self, g: Graph, deps: &[GraphNode], ctx: Context, ops: &[MemOp]) -> Result<GraphNode> {
        if ops.len() > MAX_MEM_OPS {
            return Err(CuError::INVALID_VALUE.into());
        }
        let head = GraphMemOpHead {
            graph: g.0.into(),
            ctx: ctx.0.into(),
            count: (ops.len() as u32).into(),
            dep_count: (deps.len() as u32).into(),
        };
        let mut buf = Vec::new();
        Ok(GraphNode(self.call(&GraphAddMemOpNode::new(head, &ids(deps), ops, &mut buf))?.handle.get()))
    }

    /// `cuGraphConditionalHandleCreate` for `g`: the handle's value, which
    /// kernels receive as an argument and set the condition through
    /// (`cudaGraphSetConditional`). With `assign_default`, each launch
    /// starts with the condition `default`.
    pub fn graph_cond_handle(&self, g: Graph, default: u32, assign_default: bool) -> Result<u64> {
        let r =
            self.call(&GraphCondHandle { graph: g.0.into(), default_value: default.into(), flags: u32::from(assign_default).into() })?;
        Ok(r.value.get())
    }

    /// A conditional node of `handle` after `deps`: `kind` a
    /// `CUgraphConditionalNodeType` (if, while, switch) with `size` body
    /// graphs. The node and its bodies (owned by the node; add nodes to
    /// them, or capture into them).
    pub fn graph_add_cond_node(&self, g: Graph, deps: &[GraphNode], handle: u64, kind: u32, size: u32) -> Result<(GraphNode, Vec<Graph>)> {
        let head = GraphCondHead {
            graph: g.0.into(),
            handle: handle.into(),
            kind: kind.into(),
            size: size.into(),
            dep_count: (deps.len() as u32).into(),
            reserved: 0.into(),
        };
        let deps = wire_ids(deps);
        let r = self.call(&GraphAddCondNode { head, deps: &deps })?;
        match r.ids.split_first() {
            Some((&node, bodies)) if bodies.len() == size as usize => Ok((GraphNode(node), bodies.iter().map(|&b| Graph(b)).collect())),
            _ => {
                let got = r.ids.len().saturating_sub(1);
                Err(crate::error::TransportError::Protocol(crate::error::ProtocolError::CondBodies { got, want: size }).into())
            }
        }
    }
}
