//! Page-locked chunks through which a checkpoint reads device memory and
//! a restore writes it back: a few buffers of [`CHUNK`] bytes, registered
//! with each context that copies through them, so the copies run at
//! page-locked speed whatever the size of the session's memory.

use super::Session;
use crate::exec::{CuRes, ExecContext, Executor};

/// Bytes copied to or from the device at a time.
pub(super) const CHUNK: usize = 32 << 20;

/// The chunks made, and the contexts each is registered with.
#[derive(Default)]
pub(super) struct Chunks {
    /// How many were made.
    pub made: usize,
    pinned: Vec<(u64, *mut u8)>,
}

impl Chunks {
    /// A new chunk of [`CHUNK`] bytes (pin it with [`Chunks::pin`]).
    pub fn make(&mut self) -> std::io::Result<memmap2::MmapMut> {
        self.made += 1;
        memmap2::MmapMut::map_anon(CHUNK)
    }

    /// Page-locks `buf` through context `ctx` once (copies run at
    /// page-locked speed; where the executor cannot, they run anyway).
    /// [`Chunks::unpin`] must run before `buf` is dropped.
    pub fn pin<E: Executor>(&mut self, s: &mut Session<E>, ctx: u64, buf: &mut memmap2::MmapMut) -> CuRes<()> {
        let p = buf.as_mut_ptr();
        if self.pinned.contains(&(ctx, p)) {
            return Ok(());
        }
        let c = s.enter(ctx)?;
        // SAFETY: the mapping outlives the registration: the caller runs
        // `unpin` before the chunk is dropped.
        if unsafe { c.register_host(p, CHUNK) }.is_ok() {
            self.pinned.push((ctx, p));
        }
        Ok(())
    }

    /// Undoes every registration.
    pub fn unpin<E: Executor>(&mut self, s: &mut Session<E>) {
        for (ctx, p) in self.pinned.drain(..) {
            if let Ok(c) = s.enter(ctx) {
                let _ = c.unregister_host(p);
            }
        }
    }
}
