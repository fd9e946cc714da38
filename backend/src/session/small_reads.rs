//! Small blobs of device memory a checkpoint reads (module globals, which
//! PyTorch's sessions hold by the hundred, and small allocations), read
//! in batches: every copy of a batch queued on a stream of its context
//! into one page-locked buffer, then one wait per context. Read one at a
//! time, each copy waited for, 785 globals of a PyTorch training took
//! 20 ms of its migration's pause on the H200 (2026-11-29).

use super::Session;
use super::chunks::Chunks;
use crate::exec::{CuRes, ExecContext, Executor};
use std::collections::HashMap;

/// Bytes a batch holds at most.
const BATCH: usize = 8 << 20;
/// Where each blob starts in its batch: copies at aligned addresses.
const ALIGN: usize = 256;

/// One blob of a batch.
struct Piece {
    offset: usize,
    ctx: u64,
    addr: u64,
    len: usize,
}

/// The small blobs of a checkpoint, by their index among its sources.
#[derive(Default)]
pub(super) struct SmallReads {
    /// Source index to (batch, piece).
    at: HashMap<usize, (usize, usize)>,
    batches: Vec<Vec<Piece>>,
    buf: Option<memmap2::MmapMut>,
    /// The batch the buffer holds.
    loaded: Option<usize>,
}

impl SmallReads {
    /// Plans the reads of `blobs`: (source index, context, address,
    /// length), in the order they are written, each at most [`BATCH`].
    pub(super) fn plan(blobs: impl Iterator<Item = (usize, u64, u64, u64)>) -> SmallReads {
        let mut out = SmallReads::default();
        let mut used = BATCH;
        for (index, ctx, addr, len) in blobs {
            let len = usize::try_from(len).unwrap_or(BATCH).min(BATCH);
            if used + len > BATCH {
                out.batches.push(Vec::new());
                used = 0;
            }
            let batch = out.batches.len() - 1;
            let pieces = &mut out.batches[batch];
            out.at.insert(index, (batch, pieces.len()));
            pieces.push(Piece { offset: used, ctx, addr, len });
            used = (used + len).next_multiple_of(ALIGN);
        }
        out
    }

    /// The bytes of source `index`: its batch read first if the buffer
    /// does not hold it. `None` for a source not planned here.
    pub(super) fn bytes<E: Executor>(&mut self, s: &mut Session<E>, staging: &mut Chunks, index: usize) -> Option<CuRes<&[u8]>> {
        let &(batch, piece) = self.at.get(&index)?;
        if self.loaded != Some(batch)
            && let Err(e) = self.load(s, staging, batch)
        {
            return Some(Err(e));
        }
        let p = &self.batches[batch][piece];
        self.buf.as_ref().map(|b| Ok(&b[p.offset..p.offset + p.len]))
    }

    /// Reads batch `batch` into the buffer: its copies queued on a stream
    /// of each context, then each stream waited for.
    fn load<E: Executor>(&mut self, s: &mut Session<E>, staging: &mut Chunks, batch: usize) -> CuRes<()> {
        self.loaded = None;
        if self.buf.is_none() {
            let most = self.batches.iter().filter_map(|b| b.last()).map(|p| p.offset + p.len).max().unwrap_or(0);
            self.buf = Some(staging.make_sized(most.max(1)).map_err(|_| pvgpu_ring::CuError::OUT_OF_MEMORY)?);
        }
        let Some(buf) = self.buf.as_mut() else { return Err(pvgpu_ring::CuError::OUT_OF_MEMORY) };
        let mut streams: Vec<(u64, <E::Context as ExecContext>::Stream)> = Vec::new();
        let queued = (|| {
            for p in &self.batches[batch] {
                staging.pin(s, p.ctx, buf)?;
                let stream = match streams.iter().find(|(c, _)| *c == p.ctx) {
                    Some(&(_, st)) => st,
                    None => {
                        let st = s.enter(p.ctx)?.stream_create(0, 0)?;
                        streams.push((p.ctx, st));
                        st
                    }
                };
                let c = s.enter(p.ctx)?;
                // The plan kept every piece inside the largest batch, which
                // the buffer holds; the stream is waited for below before the
                // buffer is read or dropped.
                // SAFETY: writable at [offset, offset+len) until the wait; the range is the session's.
                unsafe { c.dtoh(buf.as_mut_ptr().add(p.offset), p.addr, p.len, Some(stream), false) }?;
            }
            Ok(())
        })();
        // Every stream made is waited for and destroyed, even after a
        // failed copy: the buffer must not be written once this returns.
        let mut waited = queued;
        for (ctx, st) in streams {
            let c = s.enter(ctx);
            let r = c.and_then(|c| {
                let w = c.stream_synchronize(st);
                let _ = c.stream_destroy(st);
                w
            });
            waited = waited.and(r);
        }
        waited?;
        self.loaded = Some(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_what_fits_aligned_and_in_order() {
        let blobs = [(3, 1, 0x1000, 10u64), (5, 1, 0x2000, 300), (6, 2, 0x3000, (BATCH - 1024) as u64), (9, 1, 0x4000, 300)];
        let r = SmallReads::plan(blobs.into_iter());
        assert_eq!(r.batches.len(), 2, "the last does not fit after the third");
        assert_eq!(r.at[&6], (0, 2));
        assert_eq!(r.at[&3], (0, 0));
        assert_eq!(r.batches[0][1].offset, ALIGN, "the second starts aligned");
        assert_eq!(r.batches[0][2].offset, 2 * ALIGN + 256, "300 bytes take two alignments");
        assert_eq!(r.at[&9], (1, 0));
        assert_eq!(r.batches[1][0].offset, 0);
        assert!(r.batches.iter().flatten().all(|p| p.offset + p.len <= BATCH));
    }
}
