//! Page-locked chunks through which a checkpoint reads device memory and
//! a restore writes it back: a few buffers of [`CHUNK`] bytes, registered
//! with each context that copies through them, so the copies run at
//! page-locked speed whatever the size of the session's memory; and a
//! restore's bytes taken straight from a snapshot file nothing can change
//! ([`write_mapped`]).

use super::{RestoreError, Session};
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

/// Writes `len` bytes of `file`, from offset `at`, to the device at `addr`
/// (context `ctx`), a chunk at a time, each mapped from the file and
/// page-locked read-only where the executor can: the device reads the
/// file's pages where they lie, where reading them into a chunk first
/// copied them on one core (on the H200, 8.6-10 GB/s against 3.8-4.7 GB/s
/// from `/dev/shm`, 2026-11-29). Only for a file nothing can change while
/// it is read ([`crate::file_guard::unchanged`]): a mapping of a file cut
/// meanwhile would fault.
pub(super) fn write_mapped<E: Executor>(
    s: &mut Session<E>,
    file: &std::fs::File,
    at: u64,
    (ctx, addr, len): (u64, u64, u64),
) -> Result<(), RestoreError> {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().map_or(4096, |p| p as u64);
    let failed = |error| RestoreError::Rebuild { what: format!("device memory at {addr:#x}"), error };
    let mut off = 0;
    while off < len {
        let n = (len - off).min(CHUNK as u64) as usize;
        let start = at + off;
        let lead = (start % page) as usize;
        // A file sealed, or under a read lease no writer broke (the caller checked).
        // SAFETY: read-only, of a file nothing changes or cuts while it is mapped here.
        let map = unsafe { memmap2::MmapOptions::new().offset(start - lead as u64).len(lead + n).populate().map(file) }
            .map_err(|e| RestoreError::File(e.into()))?;
        let c = s.enter(ctx).map_err(failed)?;
        // SAFETY: the mapping lives until after the unpin below.
        let pinned = unsafe { c.pin_read_only(map.as_ptr(), map.len()) }.unwrap_or(false);
        // SAFETY: `lead + n` bytes are mapped and readable from the mapping's
        // start; the copy waits; the device range was made for these bytes.
        let copied = unsafe { c.htod(addr + off, map.as_ptr().add(lead), n, None, true) };
        if pinned {
            let _ = c.unpin_host(map.as_ptr().cast_mut());
        }
        copied.map_err(failed)?;
        off += n as u64;
    }
    Ok(())
}
