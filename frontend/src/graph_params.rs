//! Node parameters read back and set in a graph (not only in an
//! executable graph): kernel, memset, copy and event nodes; whether an
//! executable graph runs a node; a node's counterpart in a clone.

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
    /// An event-record (`wait` false) or event-wait node.
    Event {
        /// Whether it waits.
        wait: bool,
        /// The event.
        event: Event,
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
            CU_GRAPH_NODE_TYPE_MEMCPY => NodeParams::Memcpy { dst: w[0], src: w[1], len: w[2] },
            CU_GRAPH_NODE_TYPE_WAIT_EVENT => NodeParams::Event { wait: true, event: Event(w[0]) },
            CU_GRAPH_NODE_TYPE_EVENT_RECORD => NodeParams::Event { wait: false, event: Event(w[0]) },
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

    /// `cuGraphNodeGetEnabled`.
    pub fn graph_node_enabled(&self, e: GraphExec, n: GraphNode) -> Result<bool> {
        Ok(self.call(&GraphNodeEnabled { exec: e.0.into(), node: n.0.into() })?.value.get() != 0)
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
