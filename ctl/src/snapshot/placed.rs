//! A snapshot written into its file in place ([`FileWriter`]): the same
//! bytes as [`super::Writer`] writes, but each blob at the offset it will
//! have, so that the parts of a large blob are hashed in order while
//! several threads copy them into the file's pages at once, and those
//! pages may be had before the session pauses ([`make_room`]).

use super::{Checksum, DIGEST, MAGIC, Meta, SnapshotError, VERSION};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Writes a snapshot into a new, empty file whose blobs' lengths are known
/// before their bytes: [`FileWriter::new`], then each blob in order
/// ([`FileWriter::blob`] or [`FileWriter::blob_through`]), then
/// [`FileWriter::finish`].
pub struct FileWriter<'f> {
    file: &'f File,
    hash: Checksum,
    /// Where the next blob starts.
    pos: u64,
    /// The lengths of the blobs still to come, in order.
    lens: std::vec::IntoIter<u64>,
    /// The file's length once finished.
    total: u64,
    /// Threads that hash each chunk together, where the writer has some.
    pool: Option<rayon::ThreadPool>,
    /// Whether the file's blocks (a tmpfs file's pages) are had for the
    /// whole snapshot: only then is it written through a mapping, where a
    /// file system out of space would fault the writer (`SIGBUS`) rather
    /// than fail a write.
    reserved: bool,
}

impl<'f> FileWriter<'f> {
    /// Starts a snapshot of `meta` whose blobs have the lengths `lens`, in
    /// order: the head is written and the file sized for the whole
    /// snapshot, its blocks had (room made before, [`make_room`], is kept
    /// up to that length; the rest is allocated here). A file system out of
    /// space fails here, by name; one that cannot allocate ahead is then
    /// written with `pwrite`, never through a mapping.
    pub fn new(file: &'f File, meta: &Meta, lens: Vec<u64>) -> Result<FileWriter<'f>, SnapshotError> {
        let json = serde_json::to_vec(meta)?;
        let count = u32::try_from(lens.len()).map_err(|_| SnapshotError::Malformed(format!("{} blobs", lens.len())))?;
        let mut head = Vec::with_capacity(24 + json.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(json.len() as u64).to_le_bytes());
        head.extend_from_slice(&json);
        head.extend_from_slice(&count.to_le_bytes());
        let body = lens.iter().try_fold(head.len() as u64, |at, &len| at.checked_add(8)?.checked_add(len));
        let total = body
            .and_then(|b| b.checked_add(DIGEST as u64))
            .ok_or_else(|| SnapshotError::Malformed("blobs longer than a file can be".into()))?;
        // Room made before (`make_room`) is as long as the file is: blocks
        // for every byte beyond it, or no mapping.
        let room = file.metadata()?.len().min(total);
        file.set_len(total)?;
        let rest = (total - room) as i64;
        let reserved = rest == 0
            || match nix::fcntl::fallocate(file, nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE, room as i64, rest) {
                Ok(()) => true,
                Err(nix::errno::Errno::ENOSPC) => {
                    return Err(SnapshotError::Io(std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        format!("no room for a snapshot of {total} bytes where it is written"),
                    )));
                }
                Err(_) => false,
            };
        file.write_all_at(&head, 0)?;
        let mut hash = Checksum::of_version(VERSION);
        hash.update(&head);
        Ok(FileWriter { file, hash, pos: head.len() as u64, lens: lens.into_iter(), total, pool: None, reserved })
    }

    /// Hashes each chunk on `threads` threads of the writer's own, which
    /// end with it (BLAKE3 is a tree: the digest is the one a thread
    /// gives). Only for a process whose later mappings nothing depends
    /// on (a session's worker whose session leaves); without, one thread
    /// hashes.
    pub fn hash_on(mut self, threads: usize) -> FileWriter<'f> {
        self.pool = rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|_| "pvgpu-hash".into()).build().ok();
        self
    }

    /// Writes the next blob, whose bytes are at hand.
    pub fn blob(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        let at = self.start(bytes.len() as u64)?;
        self.file.write_all_at(bytes, at)?;
        self.hash.update(bytes);
        Ok(())
    }

    /// Writes the next blob, of `len` bytes, through `chunks` (buffers of
    /// the caller's, page-locked for its copies, all of one length):
    /// `fill(buf, off)` fills a chunk with the blob's bytes from `off`.
    /// Each chunk filled is copied where it goes in the file (mapped) and
    /// hashed, in order, on a thread of its own (which ends with the
    /// chunk) while the next is filled; the chunks come back to `chunks`.
    pub fn blob_through<E: From<SnapshotError>>(
        &mut self,
        len: u64,
        chunks: &mut Vec<memmap2::MmapMut>,
        mut fill: impl FnMut(&mut [u8], u64) -> Result<(), E>,
    ) -> Result<(), E> {
        use std::sync::mpsc::{Receiver, channel};
        let at = self.start(len)?;
        if chunks.is_empty() || chunks.iter().any(|c| c.is_empty()) {
            return Err(SnapshotError::Malformed("no chunk to write a blob through".into()).into());
        }
        if len == 0 {
            return Ok(());
        }
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().map_or(4096, |p| p as u64);
        let lead = (at % page) as usize;
        let span = usize::try_from(len).map_err(|_| SnapshotError::Malformed(format!("a blob of {len} bytes")))? + lead;
        // The file is the writer's (new, owner-only); `new` sized it for the blob
        // and had every block of it.
        // SAFETY: nothing else writes, cuts or maps the file meanwhile.
        let mapped = || unsafe { memmap2::MmapOptions::new().offset(at - lead as u64).len(span).populate().map_mut(self.file) };
        // A file without its blocks had, or on a file system that maps no
        // files, is written with `pwrite`.
        let mut map = if self.reserved { mapped().ok() } else { None };
        let file = self.file;
        let (hash, pool) = (&mut self.hash, self.pool.as_ref());
        let broke = || SnapshotError::Malformed("writing a snapshot's blob failed".into());
        std::thread::scope(|scope| {
            let mut free: std::collections::VecDeque<memmap2::MmapMut> = chunks.drain(..).collect();
            let mut busy = std::collections::VecDeque::new();
            // The digest so far goes from each chunk's thread to the next.
            let (first, mut after): (_, Receiver<Checksum>) = channel();
            let _ = first.send(hash.clone());
            let mut rest = map.as_mut().map(|m| &mut m[lead..]);
            let mut off = 0;
            let filled = loop {
                if off >= len {
                    break Ok(());
                }
                let mut buf = match free.pop_front() {
                    Some(b) => b,
                    None => match busy.pop_front().map(|t: std::thread::ScopedJoinHandle<'_, _>| t.join()) {
                        Some(Ok(Ok(b))) => b,
                        Some(Ok(Err(e))) => break Err(E::from(e)),
                        _ => break Err(E::from(broke())),
                    },
                };
                let n = (len - off).min(buf.len() as u64) as usize;
                if let Err(e) = fill(&mut buf[..n], off) {
                    free.push_back(buf);
                    break Err(e);
                }
                let place = rest.take().map(|r| {
                    let (place, tail) = r.split_at_mut(n);
                    rest = Some(tail);
                    place
                });
                let at = at + off;
                let (next, next_after) = channel();
                let before = std::mem::replace(&mut after, next_after);
                // Copied into the file's pages on several threads at once
                // (a `write` into a tmpfs file holds the file's lock: one
                // at a time), then hashed in order.
                busy.push_back(scope.spawn(move || {
                    match place {
                        Some(p) => p.copy_from_slice(&buf[..n]),
                        None => file.write_all_at(&buf[..n], at)?,
                    }
                    let mut h = before.recv().map_err(|_| broke())?;
                    match pool {
                        Some(p) => p.install(|| h.update_parallel(&buf[..n])),
                        None => h.update(&buf[..n]),
                    }
                    let _ = next.send(h);
                    Ok::<_, SnapshotError>(buf)
                }));
                off += n as u64;
            };
            let mut copied = Ok(());
            for t in busy {
                match t.join() {
                    Ok(Ok(b)) => free.push_back(b),
                    Ok(Err(e)) => copied = Err(e),
                    Err(_) => copied = Err(broke()),
                }
            }
            chunks.extend(free);
            filled?;
            copied?;
            *hash = after.recv().map_err(|_| broke())?;
            Ok(())
        })
    }

    /// Ends the file with its digest; returns its length.
    pub fn finish(self) -> Result<u64, SnapshotError> {
        if self.lens.len() != 0 {
            return Err(SnapshotError::Malformed(format!("{} blobs announced but not written", self.lens.len())));
        }
        self.file.write_all_at(&self.hash.finalize(), self.pos)?;
        debug_assert_eq!(self.pos + DIGEST as u64, self.total);
        Ok(self.total)
    }

    /// Writes and hashes the length of the next blob, which must be `len`;
    /// returns where its bytes go.
    fn start(&mut self, len: u64) -> Result<u64, SnapshotError> {
        match self.lens.next() {
            Some(l) if l == len => {}
            Some(l) => return Err(SnapshotError::Malformed(format!("a blob of {len} bytes announced as {l}"))),
            None => return Err(SnapshotError::Malformed("more blobs than announced".into())),
        }
        let prefix = len.to_le_bytes();
        self.file.write_all_at(&prefix, self.pos)?;
        self.hash.update(&prefix);
        let at = self.pos + 8;
        self.pos = at + len;
        Ok(at)
    }
}

/// Makes room for a snapshot of about `len` bytes in `file`, new and empty,
/// before it is written: the pages a checkpoint then fills are there, so
/// the session pauses for its copies and not for the file's memory. In
/// tmpfs (`/dev/shm`), where a file's pages are memory that one thread
/// takes at about 2-2.5 GB/s (measured on an H200 host), they are taken on
/// `threads` threads at once, each faulting its part in; elsewhere the
/// blocks are allocated (`fallocate`), where the file system can. Returns
/// whether the pages are there; the file is then `len` bytes long (and
/// empty again where they are not).
pub fn make_room(file: &File, len: u64, threads: usize) -> std::io::Result<bool> {
    use nix::sys::statfs::{TMPFS_MAGIC, fstatfs};
    if len == 0 {
        return Ok(false);
    }
    if fstatfs(file).map_err(std::io::Error::from)?.filesystem_type() != TMPFS_MAGIC {
        return Ok(nix::fcntl::fallocate(file, nix::fcntl::FallocateFlags::empty(), 0, len as i64).is_ok());
    }
    file.set_len(len)?;
    // The room is as long as the file only once every page of it is had
    // (`FileWriter::new` counts on it).
    let cut = |e: std::io::Error| {
        let _ = file.set_len(0);
        e
    };
    let page = 2 << 20;
    let part = len.div_ceil(threads.max(1) as u64).next_multiple_of(page);
    let parts: Vec<(u64, u64)> = (0..len).step_by(part as usize).map(|at| (at, part.min(len - at))).collect();
    std::thread::scope(|s| {
        let faulting: Vec<_> = parts
            .iter()
            .map(|&(at, n)| {
                s.spawn(move || {
                    // The new snapshot file, sized above; only the kernel touches the mapping.
                    // SAFETY: nothing else maps or cuts the file meanwhile.
                    let map = unsafe { memmap2::MmapOptions::new().offset(at).len(n as usize).map_mut(file) }?;
                    map.advise(memmap2::Advice::PopulateWrite)
                })
            })
            .collect();
        faulting.into_iter().try_for_each(|f| f.join().unwrap_or_else(|_| Err(std::io::Error::other("a thread failed"))))
    })
    .map_err(cut)?;
    Ok(true)
}
