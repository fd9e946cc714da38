//! Requests and replies of mirrored host memory with bytes: what the
//! program changed, and what the device changed.

use super::{Body, Reply, with_tail};
use crate::proto::wire::*;
use crate::proto::{DecodeError, MAX_PAYLOAD, Opcode};
use zerocopy::{FromBytes, IntoBytes};

/// Where `now` differs from `known` (of one length), as (offset, length)
/// runs: runs fewer than `join` unchanged bytes apart are one, and none is
/// longer than `max` bytes. What the client sends of a mirror and what the
/// backend returns of it.
pub fn changed_runs(now: &[u8], known: &[u8], join: usize, max: usize) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    let end = now.len().min(known.len());
    while i < end {
        // Equal stretches a block at a time (a vectorised compare).
        while i + 64 <= end && now[i..i + 64] == known[i..i + 64] {
            i += 64;
        }
        if i >= end {
            break;
        }
        if now[i] == known[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < now.len().min(known.len()) && now[i] != known[i] {
            i += 1;
        }
        match runs.last_mut() {
            Some((s, l)) if start - (*s + *l) < join && i - *s <= max => *l = i - *s,
            _ => {
                let mut at = start;
                while at < i {
                    let n = (i - at).min(max.max(1));
                    runs.push((at, n));
                    at += n;
                }
            }
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::changed_runs;

    #[test]
    fn runs_join_across_small_gaps_and_split_at_the_limit() {
        let known = vec![0u8; 300];
        let mut now = known.clone();
        now[3] = 1;
        now[10] = 1;
        now[200] = 2;
        now[201] = 2;
        assert_eq!(changed_runs(&now, &known, 64, usize::MAX), vec![(3, 8), (200, 2)]);
        assert_eq!(changed_runs(&now, &known, 0, usize::MAX), vec![(3, 1), (10, 1), (200, 2)]);
        assert_eq!(changed_runs(&now, &known, 64, 4), vec![(3, 1), (10, 1), (200, 2)]);
        let all = vec![9u8; 10];
        assert_eq!(changed_runs(&all, &known[..10], 64, 4), vec![(0, 4), (4, 4), (8, 2)]);
        assert!(changed_runs(&known, &known, 64, usize::MAX).is_empty());
    }

    /// Every changed byte is found, wherever it falls against the blocks
    /// equal stretches are skipped by, as a byte-by-byte scan finds it.
    #[test]
    fn block_skipping_misses_no_change() {
        let known = vec![5u8; 1000];
        for at in [0, 1, 62, 63, 64, 65, 127, 128, 640, 935, 936, 999] {
            let mut now = known.clone();
            now[at] = 6;
            assert_eq!(changed_runs(&now, &known, 0, usize::MAX), vec![(at, 1)], "change at {at}");
        }
        let mut now = known.clone();
        now[63..=64].fill(1);
        now[999] = 1;
        assert_eq!(changed_runs(&now, &known, 0, usize::MAX), vec![(63, 2), (999, 1)]);
    }
}

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
