//! Host functions in graphs: host nodes and host functions captured on a
//! stream run the program's function at every launch, in the program.
//!
//! The backend's driver runs a host node on a thread of its own; there the
//! backend holds the node until the program has run the function. The
//! program learns of it while it waits in `HostCallWait`, which its client
//! sends before anything else after launching a graph with host nodes: the
//! backend sends a [`HostCallMsg`] for each function due, the client runs
//! it and answers `HostCallDone`, and the backend replies once the launches
//! with host nodes have finished. Function and data are the program's own
//! values, which the backend keeps and hands back, never calls.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

wire_structs! {
    /// Head of `GraphAddHostNode` (`cuGraphAddHostNode`): `dep_count` node
    /// ids follow.
    pub struct GraphHostHead {
        /// Graph id.
        pub graph: U64,
        /// The program's `CUhostFn`.
        pub func: U64,
        /// Its `userData`.
        pub data: U64,
        /// Node ids that follow.
        pub dep_count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuGraphHostNodeGetParams` (`op` 0), `cuGraphHostNodeSetParams` (1),
    /// `cuGraphExecHostNodeSetParams` (2, of node `node` in `exec`).
    pub struct HostNodeParams {
        /// Node id.
        pub node: U64,
        /// Executable graph id (op 2), else zero.
        pub exec: U64,
        /// The function to set (ops 1 and 2).
        pub func: U64,
        /// Its data.
        pub data: U64,
        /// 0: get, 1: set, 2: set in the executable graph.
        pub op: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuLaunchHostFunc` on a capturing stream: a host node of the
    /// captured graph. With `callback` 1, `cuStreamAddCallback`, which
    /// capture refuses (and is invalidated by), as the driver does.
    pub struct LaunchHostFunc {
        /// Stream id.
        pub stream: U64,
        /// The program's `CUhostFn` (or `CUstreamCallback`).
        pub func: U64,
        /// Its `userData`.
        pub data: U64,
        /// 0: a host function; 1: a stream callback.
        pub callback: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Runs the host functions of launched graphs as they come due, until
    /// those launches have finished (no payload).
    pub struct HostCallWait {}
    /// The program ran host call `id`.
    pub struct HostCallDone {
        /// The id its [`HostCallMsg`] carried.
        pub id: U64,
    }
    /// A host function due (backend to program, flagged
    /// [`crate::proto::FLAG_HOST_CALL`], only while `HostCallWait` waits).
    pub struct HostCallMsg {
        /// Answered in `HostCallDone`.
        pub id: U64,
        /// The program's `CUhostFn`.
        pub func: U64,
        /// Its `userData`.
        pub data: U64,
    }
    /// Reply to `HostNodeParams`: the node's function and data (get).
    pub struct HostNodeRep {
        /// The program's `CUhostFn`.
        pub func: U64,
        /// Its `userData`.
        pub data: U64,
    }
    /// Reply to `GraphInstantiate`.
    pub struct InstantiateRep {
        /// Executable graph id.
        pub handle: U64,
        /// Host nodes the executable graph runs (child graphs included);
        /// after launching one that has any, the client sends
        /// `HostCallWait` before anything else.
        pub host_nodes: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}
