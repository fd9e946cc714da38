//! Node parameters read back and set in a graph (not only in an
//! executable graph): kernel, memset, copy, event and batch
//! memory-operation nodes; whether an
//! executable graph runs a node; a node's counterpart in a clone; a kernel
//! node's attributes.

use crate::error::{ProtocolError, Result, TransportError};
use crate::{Client, Context, Event, Function, Graph, GraphExec, GraphNode};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::*;

/// A node's parameters as the backend reads them back.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeParams {
    /// A kernel node: the function's id, geometry and packed parameters
    /// (the function's layout).
    Kernel {
        /// Function id (as `module_get_function` answered it).
        function: u64,
        /// Grid dimensions.
        grid: [u32; 3],
        /// Block dimensions.
        block: [u32; 3],
        /// Dynamic shared memory.
        shared_mem: u32,
        /// Packed parameters.
        params: Vec<u8>,
    },
    /// A memset node.
    Memset {
        /// Destination.
        dst: u64,
        /// Row pitch.
        pitch: u64,
        /// The value.
        value: u32,
        /// 1, 2 or 4.
        elem_size: u32,
        /// Elements per row.
        width: u64,
        /// Rows.
        height: u64,
    },
    /// A one-dimensional copy node.
    Memcpy {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes.
        len: u64,
    },
    /// A copy node of pitched memory (more than one row).
    Pitched(CopyShape),
    /// An event-record (`wait` false) or event-wait node.
    Event {
        /// Whether it waits.
        wait: bool,
        /// The event.
        event: Event,
    },
    /// A batch memory-operation node.
    MemOps {
        /// The (backend's) context they run in.
        ctx: Context,
        /// The operations.
        ops: Vec<MemOp>,
    },
}

impl Client {
    /// The parameters of node `n` (kernel, memset, copy or event node;
    /// others answer `CUDA_ERROR_NOT_SUPPORTED`).
    pub fn graph_node_params(&self, n: GraphNode) -> Result<NodeParams> {
        let r = self.call(&GraphNodeParams { node: n.0.into() })?;
        let w = r.head.words.map(|v| v.get());
        let low = |v: u64| v as u32;
        Ok(match CUgraphNodeType(r.head.kind.get()) {
            CU_GRAPH_NODE_TYPE_KERNEL => NodeParams::Kernel {
                function: w[0],
                grid: [low(w[1]), low(w[2]), low(w[3])],
                block: [low(w[4]), low(w[5]), low(w[6])],
                shared_mem: low(w[7]),
                params: r.params,
            },
            CU_GRAPH_NODE_TYPE_MEMSET => {
                NodeParams::Memset { dst: w[0], pitch: w[1], value: low(w[2]), elem_size: low(w[3]), width: w[4], height: w[5] }
            }
            CU_GRAPH_NODE_TYPE_MEMCPY if w[3] == 0 => NodeParams::Memcpy { dst: w[0], src: w[1], len: w[2] },
            CU_GRAPH_NODE_TYPE_MEMCPY => NodeParams::Pitched(CopyShape {
                dst: w[0].into(),
                src: w[1].into(),
                width: w[2].into(),
                height: (w[3] & 0xffff_ffff).into(),
                depth: (w[3] >> 32).into(),
                dst_pitch: w[4].into(),
                src_pitch: w[5].into(),
                dst_rows: w[6].into(),
                src_rows: w[7].into(),
            }),
            CU_GRAPH_NODE_TYPE_WAIT_EVENT => NodeParams::Event { wait: true, event: Event(w[0]) },
            CU_GRAPH_NODE_TYPE_EVENT_RECORD => NodeParams::Event { wait: false, event: Event(w[0]) },
            CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => {
                let ops = mem_ops_of(&r.params, w[1] as usize).map_err(TransportError::Decode)?;
                NodeParams::MemOps { ctx: Context(w[0]), ops: ops.to_vec() }
            }
            other => return Err(TransportError::Protocol(ProtocolError::NodeKind(other.0)).into()),
        })
    }

    /// `cuGraphMemsetNodeSetParams` (`m.graph` and `m.dep_count` are set
    /// here).
    pub fn graph_memset_node_set(&self, n: GraphNode, m: GraphMemsetHead) -> Result<()> {
        self.graph_exec_memset_set(GraphExec(0), n, m)
    }

    /// `cuGraphMemcpyNodeSetParams`: `len` device bytes from `src` to
    /// `dst`.
    pub fn graph_memcpy_node_set(&self, n: GraphNode, ctx: Context, dst: u64, src: u64, len: u64) -> Result<()> {
        self.graph_exec_memcpy_set(GraphExec(0), n, ctx, dst, src, len)
    }

    /// The event of event-record or event-wait node `n`, in its graph
    /// (`exec` `None`) or in an executable graph.
    pub fn graph_event_node_set(&self, exec: Option<GraphExec>, n: GraphNode, e: Event) -> Result<()> {
        self.call(&GraphEventNodeSet { exec: exec.map_or(0, |x| x.0).into(), node: n.0.into(), event: e.0.into() })
    }

    /// The operations of batch memory-operation node `n`, in its graph
    /// (`exec` `None`) or in an executable graph, in context `ctx`.
    pub fn graph_mem_op_node_set(&self, exec: Option<GraphExec>, n: GraphNode, ctx: Context, ops: &[MemOp]) -> Result<()> {
        let head = GraphMemOpSetHead {
            exec: exec.map_or(0, |x| x.0).into(),
            node: n.0.into(),
            ctx: ctx.0.into(),
            count: (ops.len() as u32).into(),
            reserved: 0.into(),
        };
        self.call(&GraphMemOpNodeSet { head, ops })
    }

    /// `cuGraphNodeGetEnabled`.
    pub fn graph_node_enabled(&self, e: GraphExec, n: GraphNode) -> Result<bool> {
        Ok(self.call(&GraphNodeEnabled { exec: e.0.into(), node: n.0.into() })?.value.get() != 0)
    }

    /// Kernel node `n`'s attribute `attr` (a `CUkernelNodeAttrID`), as
    /// `CUkernelNodeAttrValue` lays it out; set to `value` first when
    /// given.
    pub fn graph_kernel_node_attr(&self, n: GraphNode, attr: u32, value: Option<[u8; 64]>) -> Result<[u8; 64]> {
        let op = if value.is_some() { NODE_ATTR_SET } else { NODE_ATTR_GET };
        let r = KernelNodeAttr { node: n.0.into(), src: 0.into(), attr: attr.into(), op: op.into(), value: value.unwrap_or([0; 64]) };
        Ok(self.call(&r)?.value)
    }

    /// `cuGraphKernelNodeCopyAttributes`: every attribute of kernel node
    /// `src` to kernel node `dst`.
    pub fn graph_kernel_node_copy_attrs(&self, dst: GraphNode, src: GraphNode) -> Result<()> {
        let r = KernelNodeAttr { node: dst.0.into(), src: src.0.into(), attr: 0.into(), op: NODE_ATTR_COPY.into(), value: [0; 64] };
        self.call(&r).map(|_| ())
    }

    /// `cuGraphNodeFindInClone`: the node of `clone` made from `n`.
    pub fn graph_node_find_in_clone(&self, clone: Graph, n: GraphNode) -> Result<GraphNode> {
        Ok(GraphNode(self.call(&GraphNodeFindInClone { clone: clone.0.into(), node: n.0.into() })?.handle.get()))
    }
}

impl NodeParams {
    /// Whether this is a kernel node of function `f`.
    pub fn is_kernel_of(&self, f: &Function) -> bool {
        matches!(self, NodeParams::Kernel { function, .. } if *function == f.id)
    }
}
