//! Requests and replies of capture and graphs with lists: node-adding
//! requests carry the ids of the nodes they depend on (a kernel node also
//! its packed parameters); replies carry capture dependencies, node and
//! edge lists, DOT text.

use super::{Body, Reply, with_tail};
use crate::proto::wire::*;
use crate::proto::{DecodeError, MAX_PARAM_BYTES, MAX_PAYLOAD, Opcode};
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, IntoBytes};

/// Most ids one request or reply carries (dependencies, nodes, edges).
pub const MAX_IDS: usize = MAX_PAYLOAD / 8;

/// `n` ids from the front of `tail`, and the rest.
fn ids(tail: &[u8], n: usize) -> Result<(&[U64], &[u8]), DecodeError> {
    if n > MAX_IDS {
        return Err(DecodeError::TooLarge(n));
    }
    let (a, rest) = tail.split_at_checked(n * 8).ok_or(DecodeError::Truncated)?;
    let ids = <[U64]>::ref_from_bytes(a).map_err(|_| DecodeError::Truncated)?;
    Ok((ids, rest))
}

/// The bytes of `ids`.
fn id_bytes(ids: &[U64]) -> &[u8] {
    ids.as_bytes()
}

/// Declares a kernel-node request: [`GraphKernelHead`], dependencies,
/// packed parameters.
macro_rules! kernel_node_request {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name<'a> {
            /// Target, function and geometry.
            pub head: GraphKernelHead,
            /// The node ids it depends on (adding only; empty otherwise).
            pub deps: &'a [U64],
            /// Packed parameters, `param_len` of the function long.
            pub params: &'a [u8],
            /// Dependencies then parameters, as sent.
            tail: &'a [u8],
        }

        impl<'a> $name<'a> {
            /// A request; `buf` receives the tail (dependencies, then
            /// parameters).
            pub fn new(head: GraphKernelHead, deps: &[u64], params: &[u8], buf: &'a mut Vec<u8>) -> Self {
                buf.clear();
                for d in deps {
                    buf.extend_from_slice(&d.to_le_bytes());
                }
                buf.extend_from_slice(params);
                let (deps, params) = buf.split_at(deps.len() * 8);
                let deps = <[U64]>::ref_from_bytes(deps).unwrap_or(&[]);
                $name { head, deps, params, tail: &buf[..] }
            }
        }

        impl<'a> Body<'a> for $name<'a> {
            fn head(&self) -> &[u8] {
                self.head.as_bytes()
            }
            fn tail(&self) -> &[u8] {
                self.tail
            }
            fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
                let (head, tail) = with_tail::<GraphKernelHead, _>(op, p, |h| {
                    let n = h.param_len.get() as usize;
                    if n > MAX_PARAM_BYTES {
                        return Err(DecodeError::TooLarge(n));
                    }
                    (h.dep_count.get() as usize).checked_mul(8).and_then(|d| d.checked_add(n)).ok_or(DecodeError::Truncated)
                })?;
                let (deps, params) = ids(tail, head.dep_count.get() as usize)?;
                Ok($name { head, deps, params, tail })
            }
        }
    };
}

kernel_node_request!(
    /// `cuGraphAddKernelNode`: the new node's id comes back.
    GraphAddKernelNode
);
kernel_node_request!(
    /// `cuGraphKernelNodeSetParams` (`head.target` is the node).
    GraphKernelNodeSet
);
kernel_node_request!(
    /// `cuGraphExecKernelNodeSetParams` (`head.target` is the executable
    /// graph, `head.node` the node of the graph it was made from).
    GraphExecKernelNodeSet
);

/// Declares a node-adding request of a fixed head and its dependencies.
macro_rules! node_request {
    ($(#[$m:meta])* $name:ident($head:ty)) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name<'a> {
            /// What the node does.
            pub head: $head,
            /// The node ids it depends on.
            pub deps: &'a [U64],
        }

        impl<'a> Body<'a> for $name<'a> {
            fn head(&self) -> &[u8] {
                self.head.as_bytes()
            }
            fn tail(&self) -> &[u8] {
                id_bytes(self.deps)
            }
            fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
                let (head, tail) = with_tail::<$head, _>(op, p, |h| (h.dep_count.get() as usize).checked_mul(8).ok_or(DecodeError::Truncated))?;
                let (deps, _) = ids(tail, head.dep_count.get() as usize)?;
                Ok($name { head, deps })
            }
        }
    };
}

node_request!(
    /// `cuStreamBeginCaptureToGraph`.
    StreamBeginCaptureToGraph(CaptureToGraphHead)
);
node_request!(
    /// `cuStreamUpdateCaptureDependencies`.
    StreamUpdateCaptureDeps(UpdateCaptureDepsHead)
);
node_request!(
    /// `cuGraphAddMemcpyNode` of device memory.
    GraphAddMemcpyNode(GraphMemcpyHead)
);
node_request!(
    /// `cuGraphAddMemcpyNode` of any shape.
    GraphAddCopyNode(GraphCopyHead)
);
node_request!(
    /// `cuGraphAddMemsetNode`.
    GraphAddMemsetNode(GraphMemsetHead)
);
node_request!(
    /// `cuGraphAddEmptyNode`, `cuGraphAddChildGraphNode`,
    /// `cuGraphAddEventRecordNode`, `cuGraphAddEventWaitNode`.
    GraphAddNode(GraphSimpleHead)
);

/// `cuGraphAddDependencies` / `cuGraphRemoveDependencies`.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphEdgesChange<'a> {
    /// Graph, count, add or remove.
    pub head: GraphEdgesHead,
    /// Where each edge starts.
    pub from: &'a [U64],
    /// Where each edge ends.
    pub to: &'a [U64],
    tail: &'a [u8],
}

impl<'a> GraphEdgesChange<'a> {
    /// A request of the edges `from[i] -> to[i]`; `buf` receives the tail.
    pub fn new(head: GraphEdgesHead, from: &[u64], to: &[u64], buf: &'a mut Vec<u8>) -> Self {
        buf.clear();
        for v in from.iter().chain(to) {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        let (a, b) = buf.split_at(from.len() * 8);
        let from = <[U64]>::ref_from_bytes(a).unwrap_or(&[]);
        let to = <[U64]>::ref_from_bytes(b).unwrap_or(&[]);
        GraphEdgesChange { head, from, to, tail: &buf[..] }
    }
}

impl<'a> Body<'a> for GraphEdgesChange<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.tail
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, tail) =
            with_tail::<GraphEdgesHead, _>(op, p, |h| (h.count.get() as usize).checked_mul(16).ok_or(DecodeError::Truncated))?;
        if head.remove.get() > 1 {
            return Err(DecodeError::BadField("remove"));
        }
        let n = head.count.get() as usize;
        let (from, rest) = ids(tail, n)?;
        let (to, _) = ids(rest, n)?;
        Ok(GraphEdgesChange { head, from, to, tail })
    }
}

/// Reply to `StreamCaptureInfo`: status, id, graph and the capture's
/// current dependencies.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CaptureInfoRep {
    /// Status, id and graph.
    pub head: CaptureInfoHead,
    /// The node ids new work would depend on.
    pub deps: Vec<u64>,
}

impl Reply for CaptureInfoRep {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut h = self.head;
        h.dep_count = (self.deps.len() as u32).into();
        out.extend_from_slice(h.as_bytes());
        self.deps.iter().for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, tail) =
            with_tail::<CaptureInfoHead, _>(op, p, |h| (h.dep_count.get() as usize).checked_mul(8).ok_or(DecodeError::Truncated))?;
        let (deps, _) = ids(tail, head.dep_count.get() as usize)?;
        Ok(CaptureInfoRep { head, deps: deps.iter().map(|d| d.get()).collect() })
    }
}

/// A reply that is a list of ids (nodes; edges as from, to pairs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IdsRep {
    /// The ids.
    pub ids: Vec<u64>,
}

impl Reply for IdsRep {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(IdsHead { count: (self.ids.len() as u32).into(), reserved: 0.into() }.as_bytes());
        self.ids.iter().for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, tail) = with_tail::<IdsHead, _>(op, p, |h| (h.count.get() as usize).checked_mul(8).ok_or(DecodeError::Truncated))?;
        if head.reserved.get() != 0 {
            return Err(DecodeError::BadField("reserved"));
        }
        let (ids, _) = ids(tail, head.count.get() as usize)?;
        Ok(IdsRep { ids: ids.iter().map(|d| d.get()).collect() })
    }
}

/// A reply that is a byte string (DOT text).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BytesRep {
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl Reply for BytesRep {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(BytesHead { len: (self.bytes.len() as u64).into() }.as_bytes());
        out.extend_from_slice(&self.bytes);
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (_, tail) = with_tail::<BytesHead, _>(op, p, |h| usize::try_from(h.len.get()).map_err(|_| DecodeError::Truncated))?;
        Ok(BytesRep { bytes: tail.to_vec() })
    }
}
node_request!(
    /// `cuGraphAddHostNode`.
    GraphAddHostNode(GraphHostHead)
);
node_request!(
    /// `cuGraphAddMemAllocNode`, `cuGraphAddMemFreeNode`.
    GraphAddMemNode(GraphMemHead)
);
node_request!(
    /// A conditional node (`cuGraphAddNode` of
    /// `CU_GRAPH_NODE_TYPE_CONDITIONAL`): the node's id, then its body
    /// graphs' ids, come back.
    GraphAddCondNode(GraphCondHead)
);

/// Reply to `GraphNodeParams`: the kind and its parameters, and a kernel
/// node's packed parameters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeParamsRep {
    /// Kind and words.
    pub head: NodeParamsHead,
    /// A kernel's packed parameters (its function's layout).
    pub params: Vec<u8>,
}

impl Reply for NodeParamsRep {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut h = self.head;
        h.param_len = (self.params.len() as u32).into();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&self.params);
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, tail) = with_tail::<NodeParamsHead, _>(op, p, |h| {
            let n = h.param_len.get() as usize;
            if n > MAX_PARAM_BYTES { Err(DecodeError::TooLarge(n)) } else { Ok(n) }
        })?;
        Ok(NodeParamsRep { head, params: tail.to_vec() })
    }
}
