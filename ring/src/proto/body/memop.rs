//! Requests of stream memory operations and batch memory-operation nodes:
//! a head, (a node's) dependencies, then the operations, each of a known
//! kind; a node's new operations. An operation converts to and from the
//! driver's union here, for the library and the backend alike.

use super::{Body, with_tail};
use crate::cuda::api::*;
use crate::proto::wire::*;
use crate::proto::{DecodeError, Opcode};
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, IntoBytes};

impl MemOp {
    /// The bytes of the value it waits for or writes (none for a barrier or
    /// a flush).
    pub fn value_size(&self) -> Option<u64> {
        match CUstreamBatchMemOpType(self.kind.get()) {
            CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_32 => Some(4),
            CU_STREAM_MEM_OP_WAIT_VALUE_64 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => Some(8),
            _ => None,
        }
    }

    /// Whether it is one the driver takes: flags its kind knows, its value
    /// aligned. `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER` is refused, as the
    /// `_v2` API (every name since CUDA 12) refuses it (measured on the
    /// H100).
    pub fn well_formed(&self) -> bool {
        let flags = self.flags.get();
        let known = match CUstreamBatchMemOpType(self.kind.get()) {
            CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WAIT_VALUE_64 => flags & !(3 | CU_STREAM_WAIT_VALUE_FLUSH.0) == 0,
            CU_STREAM_MEM_OP_WRITE_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => flags == 0,
            CU_STREAM_MEM_OP_BARRIER => flags <= CU_STREAM_MEMORY_BARRIER_TYPE_GPU.0,
            CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES => flags == 0,
            _ => false,
        };
        known && self.value_size().is_none_or(|n| self.addr.get() % n == 0)
    }
}

impl MemOp {
    /// An operation of `kind` on the value at `addr`.
    pub fn new(kind: CUstreamBatchMemOpType, addr: u64, value: u64, flags: u32) -> MemOp {
        MemOp { kind: kind.0.into(), flags: flags.into(), addr: addr.into(), value: value.into() }
    }

    /// The operation as the driver's union holds it (a 32-bit operation's
    /// value in its low bits).
    pub fn to_driver(&self) -> CUstreamBatchMemOpParams {
        // SAFETY: plain integers: zero is "none" for each.
        let mut p: CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
        let operation = CUstreamBatchMemOpType(self.kind.get());
        let (addr, value, flags) = (self.addr.get(), self.value.get(), self.flags.get());
        match operation {
            CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WAIT_VALUE_64 => {
                // SAFETY: plain integers, as above.
                let mut w: CUstreamMemOpWaitValueParams_st = unsafe { std::mem::zeroed() };
                (w.operation, w.address, w.flags) = (operation, addr, flags);
                w.anon2.value64 = value;
                p.waitValue = w;
            }
            CU_STREAM_MEM_OP_WRITE_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => {
                // SAFETY: plain integers, as above.
                let mut w: CUstreamMemOpWriteValueParams_st = unsafe { std::mem::zeroed() };
                (w.operation, w.address, w.flags) = (operation, addr, flags);
                w.anon2.value64 = value;
                p.writeValue = w;
            }
            CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES => {
                p.flushRemoteWrites = CUstreamMemOpFlushRemoteWritesParams_st { operation, flags };
            }
            _ => p.memoryBarrier = CUstreamMemOpMemoryBarrierParams_st { operation, flags },
        }
        p
    }

    /// The operation a driver's union holds, if of a known kind.
    pub fn from_driver(p: &CUstreamBatchMemOpParams) -> Option<MemOp> {
        // SAFETY: `operation` heads every member; each read below reads the
        // member it names, all plain integers.
        let operation = unsafe { p.operation };
        let (addr, value, flags) = match operation {
            // SAFETY: as above.
            CU_STREAM_MEM_OP_WAIT_VALUE_32 | CU_STREAM_MEM_OP_WAIT_VALUE_64 => unsafe {
                let w = p.waitValue;
                let v = if operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 { u64::from(w.anon2.value) } else { w.anon2.value64 };
                (w.address, v, w.flags)
            },
            // SAFETY: as above.
            CU_STREAM_MEM_OP_WRITE_VALUE_32 | CU_STREAM_MEM_OP_WRITE_VALUE_64 => unsafe {
                let w = p.writeValue;
                let v = if operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 { u64::from(w.anon2.value) } else { w.anon2.value64 };
                (w.address, v, w.flags)
            },
            // SAFETY: as above.
            CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES => (0, 0, unsafe { p.flushRemoteWrites.flags }),
            // SAFETY: as above.
            CU_STREAM_MEM_OP_BARRIER => (0, 0, unsafe { p.memoryBarrier.flags }),
            _ => return None,
        };
        Some(MemOp::new(operation, addr, value, flags))
    }
}

/// The operations at the front of `tail`, `n` of them, each of a known
/// kind; and the rest.
fn ops(tail: &[u8], n: usize) -> Result<&[MemOp], DecodeError> {
    if n > MAX_MEM_OPS {
        return Err(DecodeError::TooLarge(n));
    }
    let ops = <[MemOp]>::ref_from_bytes(tail).map_err(|_| DecodeError::Truncated)?;
    if ops.len() != n {
        return Err(DecodeError::Truncated);
    }
    if ops.iter().any(|o| !matches!(o.kind.get(), 1..=6)) {
        return Err(DecodeError::BadField("kind"));
    }
    Ok(ops)
}

/// Bytes of `n` operations, bounded.
fn ops_len(n: usize) -> Result<usize, DecodeError> {
    if n > MAX_MEM_OPS {
        return Err(DecodeError::TooLarge(n));
    }
    Ok(n * size_of::<MemOp>())
}

/// Declares a request of a fixed head with a `count` field, then that many
/// operations.
macro_rules! ops_request {
    ($(#[$m:meta])* $name:ident($head:ty)) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name<'a> {
            /// What the operations act on, and their count.
            pub head: $head,
            /// The operations, in order.
            pub ops: &'a [MemOp],
        }

        impl<'a> Body<'a> for $name<'a> {
            fn head(&self) -> &[u8] {
                self.head.as_bytes()
            }
            fn tail(&self) -> &[u8] {
                self.ops.as_bytes()
            }
            fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
                let (head, tail) = with_tail::<$head, _>(op, p, |h| ops_len(h.count.get() as usize))?;
                Ok($name { head, ops: ops(tail, head.count.get() as usize)? })
            }
        }
    };
}

ops_request!(
    /// `cuStreamBatchMemOp` (and the single operations: `cuStreamWaitValue32`,
    /// `cuStreamWriteValue64`...).
    StreamMemOps(StreamMemOpsHead)
);
ops_request!(
    /// `cuGraphBatchMemOpNodeSetParams` and its executable-graph form.
    GraphMemOpNodeSet(GraphMemOpSetHead)
);

/// `cuGraphAddBatchMemOpNode`: the new node's id comes back.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphAddMemOpNode<'a> {
    /// Graph, context and counts.
    pub head: GraphMemOpHead,
    /// The node ids it depends on.
    pub deps: &'a [U64],
    /// The operations.
    pub ops: &'a [MemOp],
    tail: &'a [u8],
}

impl<'a> GraphAddMemOpNode<'a> {
    /// A request; `buf` receives the tail (dependencies, then operations).
    pub fn new(head: GraphMemOpHead, deps: &[u64], ops: &[MemOp], buf: &'a mut Vec<u8>) -> Self {
        buf.clear();
        deps.iter().for_each(|d| buf.extend_from_slice(&d.to_le_bytes()));
        buf.extend_from_slice(ops.as_bytes());
        let (d, o) = buf.split_at(deps.len() * 8);
        let deps = <[U64]>::ref_from_bytes(d).unwrap_or(&[]);
        let ops = <[MemOp]>::ref_from_bytes(o).unwrap_or(&[]);
        GraphAddMemOpNode { head, deps, ops, tail: &buf[..] }
    }
}

impl<'a> Body<'a> for GraphAddMemOpNode<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.tail
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, tail) = with_tail::<GraphMemOpHead, _>(op, p, |h| {
            let deps = (h.dep_count.get() as usize).checked_mul(8).ok_or(DecodeError::Truncated)?;
            deps.checked_add(ops_len(h.count.get() as usize)?).ok_or(DecodeError::Truncated)
        })?;
        let (d, o) = tail.split_at_checked(head.dep_count.get() as usize * 8).ok_or(DecodeError::Truncated)?;
        let deps = <[U64]>::ref_from_bytes(d).map_err(|_| DecodeError::Truncated)?;
        if deps.len() > super::MAX_IDS {
            return Err(DecodeError::TooLarge(deps.len()));
        }
        Ok(GraphAddMemOpNode { head, deps, ops: ops(o, head.count.get() as usize)?, tail })
    }
}

/// The operations of a batch memory-operation node, as the reply to
/// `GraphNodeParams` carries them after its head: `count` of them, each of
/// a known kind.
pub fn mem_ops_of(tail: &[u8], count: usize) -> Result<&[MemOp], DecodeError> {
    ops(tail, count)
}
