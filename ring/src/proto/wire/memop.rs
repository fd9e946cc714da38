//! Stream memory operations (`cuStreamWaitValue32` and kin,
//! `cuStreamBatchMemOp`) and batch memory-operation nodes of graphs: a
//! stream waits until a 32- or 64-bit value in device memory meets a
//! condition, writes one, or orders memory. A request is a head, then (a
//! node) the ids of the nodes it depends on, then `count` operations.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Most operations in one request (the driver's own batches are small).
pub const MAX_MEM_OPS: usize = 256;

wire_structs! {
    /// One operation (`CUstreamBatchMemOpParams`).
    pub struct MemOp {
        /// `CUstreamBatchMemOpType`: wait 32 (1), write 32 (2), flush
        /// remote writes (3), wait 64 (4), write 64 (5), barrier (6).
        pub kind: U32,
        /// Its flags: `CUstreamWaitValue_flags` (a wait),
        /// `CUstreamWriteValue_flags` (a write), the barrier's scope.
        pub flags: U32,
        /// Device address of the value (a wait or a write; else zero).
        pub addr: U64,
        /// The value (its low 32 bits for a 32-bit operation).
        pub value: U64,
    }
    /// Head of `StreamMemOps`: `count` operations follow.
    pub struct StreamMemOpsHead {
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// Operations that follow.
        pub count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Head of `GraphMemOpNodeSet` (`cuGraphBatchMemOpNodeSetParams`,
    /// `cuGraphExecBatchMemOpNodeSetParams`): then `count` operations.
    pub struct GraphMemOpSetHead {
        /// Executable graph id, or 0 for the node in its graph.
        pub exec: U64,
        /// Node id.
        pub node: U64,
        /// Context id the operations run in.
        pub ctx: U64,
        /// Operations that follow.
        pub count: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Head of `GraphAddMemOpNode` (`cuGraphAddBatchMemOpNode`): then
    /// `dep_count` node ids, then `count` operations.
    pub struct GraphMemOpHead {
        /// Graph id.
        pub graph: U64,
        /// Context id the operations run in.
        pub ctx: U64,
        /// Operations that follow the dependencies.
        pub count: U32,
        /// Node ids that follow.
        pub dep_count: U32,
    }
}
