//! Graphs in a snapshot: each graph the guest holds and each executable
//! graph, as the nodes and edges that rebuild it. A node's handles are the
//! session's (functions, events, the guest's node and graph ids), its
//! addresses the session's own, which a restore keeps; the restoring
//! backend checks each as it checks the command that would add the node.
//!
//! An executable graph is kept as a copy of the graph it runs (taken at
//! instantiation and kept up to date with the updates the guest makes to
//! it), with the nodes it has disabled and the guest's names for its
//! nodes: the graph it was made from may be gone (PyTorch destroys it
//! once instantiated) or changed since. An executable graph with
//! conditional nodes, which the driver does not copy, is kept as this
//! description of the graph it was made from, taken at instantiation.

use serde::{Deserialize, Serialize};

/// A graph's nodes, and the edges between them as (from, to) indices into
/// `nodes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    /// The nodes.
    pub nodes: Vec<NodeRec>,
    /// Dependencies: node `[0]` runs before node `[1]`.
    pub edges: Vec<[u32; 2]>,
}

/// A node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRec {
    /// The handle the guest holds, if it was handed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// What it does.
    #[serde(flatten)]
    pub kind: NodeKind,
}

/// What a node does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NodeKind {
    /// A kernel launch.
    Kernel {
        /// The function's handle.
        function: u64,
        /// Grid dimensions.
        grid: [u32; 3],
        /// Block dimensions.
        block: [u32; 3],
        /// Dynamic shared memory in bytes.
        shared_mem: u32,
        /// Its packed parameters, in hex.
        params: String,
        /// Its launch attributes that are set (cluster dimensions, for
        /// one): `CUlaunchAttributeID` and the 64-byte value in hex.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attrs: Vec<(u32, String)>,
    },
    /// A memset of `height` rows of `width` elements.
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
        /// Element size: 1, 2 or 4.
        elem_size: u32,
    },
    /// A copy of `depth` slices of `height` rows of `width` bytes.
    Copy {
        /// Destination: address, row pitch, rows per slice.
        dst: [u64; 3],
        /// Source: address, row pitch, rows per slice.
        src: [u64; 3],
        /// Bytes per row.
        width: u64,
        /// Rows per slice.
        height: u64,
        /// Slices.
        depth: u64,
    },
    /// A node that does nothing.
    Empty,
    /// A graph run as one node.
    Child {
        /// The handle the guest holds for the node's graph, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        graph: Option<u64>,
        /// The graph.
        body: Body,
    },
    /// Records an event (its handle).
    EventRecord {
        /// The event.
        event: u64,
    },
    /// Waits for an event (its handle).
    EventWait {
        /// The event.
        event: u64,
    },
    /// Stream memory operations: kind, flags, address, value each.
    MemOps {
        /// The operations.
        ops: Vec<[u64; 4]>,
    },
    /// Runs the program's host function.
    Host {
        /// The program's `CUhostFn`.
        func: u64,
        /// Its `userData`.
        data: u64,
    },
    /// An if, while or switch node: the handle its condition is read
    /// from, `CUgraphConditionalNodeType`, and its body graphs in order.
    Cond {
        /// The handle's value (one of its root graph's `handles`).
        handle: u64,
        /// `CUgraphConditionalNodeType`.
        kind: u32,
        /// Its bodies.
        bodies: Vec<CondBody>,
    },
}

/// A conditional node's body graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CondBody {
    /// The handle the guest holds for the body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<u64>,
    /// The graph.
    pub body: Body,
}

/// A conditional handle, made for a graph (the root graph or one of its
/// conditional bodies). The driver numbers a root graph's handles, its
/// bodies' included, 1, 2, 3... in the order they are made, in every
/// process: a restore makes them again in that order, for the root, and
/// gets the values kernels and the program hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CondHandleRec {
    /// The guest's handle for the graph it was made for.
    pub graph: u64,
    /// Its value.
    pub value: u64,
    /// The value each launch starts with, if `flags` assigns it.
    pub default: u32,
    /// `cuGraphConditionalHandleCreate` flags.
    pub flags: u32,
}

/// A graph the guest holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphRec {
    /// The handle the guest holds.
    pub id: u64,
    /// Its context.
    pub ctx: u64,
    /// Its nodes and edges.
    pub body: Body,
    /// The conditional handles made for it and its bodies, in the order
    /// they were made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handles: Vec<CondHandleRec>,
}

/// An executable graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecGraphRec {
    /// The handle the guest holds.
    pub id: u64,
    /// Its context.
    pub ctx: u64,
    /// Its instantiation flags.
    pub flags: u64,
    /// What it runs.
    pub body: Body,
    /// Indices of the nodes it runs disabled (`cuGraphNodeSetEnabled`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<u32>,
    /// The guest's node handles that name its nodes in updates: (handle,
    /// index into `body.nodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub named: Vec<(u64, u32)>,
    /// The conditional handles of the graph it was made from, in the
    /// order they were made (its conditional nodes use them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handles: Vec<CondHandleRec>,
}

/// `bytes` in hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of hex string `s`, if it is one.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&b), "0001abff");
        assert_eq!(from_hex("0001abff").unwrap(), b);
        assert_eq!(from_hex("").unwrap(), Vec::<u8>::new());
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
        assert!(from_hex("é0").is_none());
    }

    #[test]
    fn a_body_reads_back_as_written() {
        let body = Body {
            nodes: vec![
                NodeRec {
                    id: Some(0x2000_0001),
                    kind: NodeKind::Kernel {
                        function: 7,
                        grid: [2, 1, 1],
                        block: [64, 1, 1],
                        shared_mem: 0,
                        params: hex(&[1, 2, 3]),
                        attrs: vec![(4, hex(&[2; 64]))],
                    },
                },
                NodeRec {
                    id: None,
                    kind: NodeKind::Child {
                        graph: Some(9),
                        body: Body { nodes: vec![NodeRec { id: None, kind: NodeKind::Empty }], edges: vec![] },
                    },
                },
                NodeRec { id: None, kind: NodeKind::MemOps { ops: vec![[2, 0, 0x7000, 5]] } },
                NodeRec {
                    id: Some(0x2000_0002),
                    kind: NodeKind::Cond {
                        handle: 1,
                        kind: 0,
                        bodies: vec![
                            CondBody { graph: Some(10), body: Body::default() },
                            CondBody {
                                graph: None,
                                body: Body { nodes: vec![NodeRec { id: None, kind: NodeKind::Empty }], edges: vec![] },
                            },
                        ],
                    },
                },
            ],
            edges: vec![[0, 1], [1, 2], [2, 3]],
        };
        let json = serde_json::to_string(&body).unwrap();
        assert!(json.contains(r#""type":"kernel""#) && json.contains(r#""type":"cond""#), "{json}");
        assert_eq!(serde_json::from_str::<Body>(&json).unwrap(), body);
    }
}
