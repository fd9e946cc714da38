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
        self.make_sized(CHUNK)
    }

    /// A new buffer of `len` bytes, pinned as a chunk is.
    pub fn make_sized(&mut self, len: usize) -> std::io::Result<memmap2::MmapMut> {
        self.made += 1;
        memmap2::MmapMut::map_anon(len)
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
        // The caller runs `unpin` before the chunk is dropped.
        // SAFETY: the mapping, `buf.len()` bytes, outlives the registration.
        if unsafe { c.register_host(p, buf.len()) }.is_ok() {
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
    let failed = |error| RestoreError::Rebuild { what: format!("device memory at {addr:#x}"), error };
    let mut off = 0;
    while off < len {
        let n = (len - off).min(CHUNK as u64) as usize;
        let (map, lead) = map_part(file, at + off, n, true)?;
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

/// Whether `file` holds `expected` at offset `at`, compared where it lies
/// (mapped read-only); only for a file nothing can change while it is
/// mapped, as for [`write_mapped`]. A prepared worker's modules are
/// compared so with the snapshot's images (30 MB for a PyTorch training):
/// read into memory first, that took 16-20 ms of its pause on the H200.
pub(super) fn file_holds(file: &std::fs::File, at: u64, expected: &[u8]) -> Result<bool, RestoreError> {
    if expected.is_empty() {
        return Ok(true);
    }
    let (map, lead) = map_part(file, at, expected.len(), false)?;
    Ok(map[lead..] == *expected)
}

/// `len` bytes of `file` from offset `at`, mapped read-only from the page
/// that holds `at` (with `populate`, its pages read in at once): the
/// mapping, and where the bytes start in it. Only for a file sealed, or
/// under a read lease no writer broke ([`crate::file_guard::unchanged`]),
/// which the callers checked: a mapping of a file cut meanwhile would
/// fault.
fn map_part(file: &std::fs::File, at: u64, len: usize, populate: bool) -> Result<(memmap2::Mmap, usize), RestoreError> {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().map_or(4096, |p| p as u64);
    let lead = (at % page) as usize;
    let mut options = memmap2::MmapOptions::new();
    options.offset(at - lead as u64).len(lead + len);
    if populate {
        options.populate();
    }
    // SAFETY: read-only, of a file nothing changes or cuts while it is mapped (the callers' check).
    let map = unsafe { options.map(file) }.map_err(|e| RestoreError::File(e.into()))?;
    Ok((map, lead))
}

#[cfg(test)]
mod tests {
    use super::super::restore::Blobs;
    use pvgpu_ctl::snapshot::{Reader, Writer};

    /// A snapshot holding `blobs`, in a memory file.
    fn file_of(blobs: &[&[u8]]) -> (std::fs::File, u64) {
        let (mut s, _) = super::super::snapshot_fixture::session();
        let taken = super::super::snapshot_fixture::checkpoint(&mut s).unwrap();
        let (_, meta) = Reader::open(&taken[..], taken.len() as u64).unwrap();
        let mut w = Writer::new(Vec::new(), &meta, blobs.len() as u32).unwrap();
        blobs.iter().for_each(|b| w.blob(b).unwrap());
        let bytes = w.finish().unwrap();
        let file = std::fs::File::from(nix::sys::memfd::memfd_create("pvgpu-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap());
        std::io::Write::write_all(&mut &file, &bytes).unwrap();
        (file, bytes.len() as u64)
    }

    #[test]
    fn a_blob_matches_only_its_own_bytes_read_or_mapped() {
        let image: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let mut other = image.clone();
        other[65_000] ^= 1;
        let (file, len) = file_of(&[b"odd", &image, &image, b"xyz"]);
        for checked in [false, true] {
            std::io::Seek::rewind(&mut &file).unwrap();
            let input = std::io::BufReader::new(&file);
            let (mut reader, _) = if checked { Reader::open_checked(input, len) } else { Reader::open(input, len) }.unwrap();
            let mut blobs = Blobs { reader: &mut reader, next: 0, file: checked.then_some(&file) };
            // The first blob's three bytes put the next ones at odd offsets.
            assert!(!blobs.matches(0, b"od").unwrap(), "another length");
            assert!(blobs.matches(1, &image).unwrap(), "checked {checked}");
            assert!(!blobs.matches(2, &other).unwrap(), "one byte differs, checked {checked}");
            assert!(blobs.matches(3, b"xyz").unwrap());
            reader.finish().unwrap();
        }
    }
}
