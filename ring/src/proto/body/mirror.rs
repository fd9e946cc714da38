//! Requests and replies of mirrored host memory with bytes: what the
//! program changed, and what the device changed.

use super::{Body, Reply, with_tail};
use crate::proto::wire::*;
use crate::proto::{DecodeError, MAX_PAYLOAD, Opcode};
use zerocopy::{FromBytes, IntoBytes};

/// `HostMirrorWrite`: bytes the program changed in a mirrored range.
#[derive(Debug, Clone, PartialEq)]
pub struct HostMirrorWrite<'a> {
    /// Where, and how many bytes.
    pub head: MirrorWriteHead,
    /// The bytes.
    pub data: &'a [u8],
}

impl<'a> Body<'a> for HostMirrorWrite<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.data
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, data) = with_tail::<MirrorWriteHead, _>(op, p, |h| match usize::try_from(h.len.get()) {
            Ok(n) if n <= MAX_PAYLOAD => Ok(n),
            _ => Err(DecodeError::TooLarge(MAX_PAYLOAD.saturating_add(1))),
        })?;
        Ok(HostMirrorWrite { head, data })
    }
}

/// Reply to `HostMirrorPull`: the ranges the device changed since the
/// program last saw them, with their bytes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MirrorPullRep {
    /// More changes wait than fitted: pull again.
    pub more: bool,
    /// (address, bytes) of each changed range.
    pub ranges: Vec<(u64, Vec<u8>)>,
}

impl Reply for MirrorPullRep {
    fn encode(&self, out: &mut Vec<u8>) {
        let head = MirrorPullHead { count: (self.ranges.len() as u64).into(), more: u64::from(self.more).into() };
        out.extend_from_slice(head.as_bytes());
        for (ptr, bytes) in &self.ranges {
            out.extend_from_slice(MirrorRange { ptr: (*ptr).into(), len: (bytes.len() as u64).into() }.as_bytes());
            out.extend_from_slice(bytes);
        }
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, mut rest) =
            MirrorPullHead::read_from_prefix(p).map_err(|_| DecodeError::Length { opcode: op, got: p.len(), expected: 16 })?;
        if head.more.get() > 1 {
            return Err(DecodeError::BadField("more"));
        }
        let count = usize::try_from(head.count.get()).map_err(|_| DecodeError::Truncated)?;
        // Each range takes at least its 16-byte head.
        if count > rest.len() / 16 {
            return Err(DecodeError::Truncated);
        }
        let mut ranges = Vec::with_capacity(count);
        for _ in 0..count {
            let (r, tail) = MirrorRange::read_from_prefix(rest).map_err(|_| DecodeError::Truncated)?;
            let n = usize::try_from(r.len.get()).map_err(|_| DecodeError::Truncated)?;
            let (bytes, tail) = tail.split_at_checked(n).ok_or(DecodeError::Truncated)?;
            ranges.push((r.ptr.get(), bytes.to_vec()));
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(DecodeError::Length { opcode: op, got: p.len(), expected: p.len() - rest.len() });
        }
        Ok(MirrorPullRep { more: head.more.get() == 1, ranges })
    }
}
