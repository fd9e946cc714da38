//! The session snapshot file: what `pvgpu-ctl checkpoint` writes and
//! `pvgpu-ctl restore` reads, in one place for the backend and the tool.
//!
//! ```text
//! magic    8 bytes   "PVGPUSNP"
//! version  u32 LE    [`VERSION`]
//! meta     u64 LE length, then that many bytes of JSON ([`Meta`])
//! blobs    u32 LE count, then per blob: u64 LE length and its bytes
//! digest   32 bytes  BLAKE3 of everything before it (SHA-256 in version 1)
//! ```
//!
//! The JSON says what the session held and names its bytes (device
//! memory, module images, globals) by blob index; it is self-describing
//! and readable with `pvgpu-ctl inspect`. Blobs follow in the order they
//! are named. A reader checks the digest over the whole file before it
//! trusts any of it ([`verify`]), and every length against what is left of
//! the file, so a corrupt or hostile file is an error, never a crash or a
//! huge allocation.

use sha2::{Digest as _, Sha256};
use std::io::{self, Read, Write};

mod graph;
mod placed;
pub mod skeleton;
mod state;

pub use graph::{Body, CondBody, CondHandleRec, ExecGraphRec, GraphRec, NodeKind, NodeRec, from_hex, hex};
pub use placed::{FileWriter, make_room};
pub use state::{
    Allocation, AreaRec, ArrayRec, Context, Device, Function, Global, Handed, LimitRec, Mapped, Meta, MirrorRec, Module, Physical, PoolRec,
    Queue, Reservation, State, TexObjectRec,
};

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"PVGPUSNP";
/// The format this crate writes. It reads this one and the ones before:
/// version 1, whose digest is SHA-256, version 2, which held no graphs
/// and no virtual memory, and version 3, which held no arrays, texture
/// objects or pools of the program's own (what backends before it wrote),
/// so a backend upgraded in place restores its predecessor's snapshots. A
/// backend that reads at most 3 refuses a file of 4 by its version, rather
/// than lose its arrays, objects and pools.
pub const VERSION: u32 = 4;
/// The longest description accepted.
pub const MAX_META: u64 = 64 << 20;
/// The most blobs accepted.
pub const MAX_BLOBS: u32 = 1 << 22;
const DIGEST: usize = 32;

/// Why a snapshot could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading or writing failed.
    #[error("snapshot file I/O failed: {0}")]
    Io(#[from] io::Error),
    /// Not a pvgpu snapshot.
    #[error("not a pvgpu session snapshot (bad magic)")]
    Magic,
    /// A format this build does not read.
    #[error("snapshot format version {0}; this pvgpu reads versions 1 to {VERSION}")]
    Version(u32),
    /// The digest does not match: the file was cut or changed.
    #[error("the snapshot's checksum does not match: the file is truncated or corrupt, and nothing of it was used")]
    Digest,
    /// A length or count inside the file is impossible.
    #[error("the snapshot is malformed: {0}")]
    Malformed(String),
    /// The description is not the JSON expected.
    #[error("the snapshot's description does not parse: {0}")]
    Meta(#[from] serde_json::Error),
}

/// Parts at least this large are hashed on several threads.
const PARALLEL_HASH: usize = 1 << 20;

/// The digest of a snapshot's bytes: BLAKE3, which hashes a state of
/// gigabytes several times faster than SHA-256 on the same core (a
/// migration's pause hashes it at the source, at the target's check and
/// as the target rebuilds it), or SHA-256 in files of version 1.
#[derive(Clone)]
enum Checksum {
    Sha256(Sha256),
    Blake3(Box<blake3::Hasher>),
}

impl Checksum {
    /// The digest of format `version`: SHA-256 for version 1, BLAKE3
    /// otherwise (an unknown version then fails on its digest or, once the
    /// digest is checked, as [`SnapshotError::Version`]).
    fn of_version(version: u32) -> Checksum {
        if version == 1 { Checksum::Sha256(Sha256::new()) } else { Checksum::Blake3(Box::new(blake3::Hasher::new())) }
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            Checksum::Sha256(h) => h.update(b),
            Checksum::Blake3(h) => {
                h.update(b);
            }
        }
    }

    /// [`Checksum::update`] on every core for a large part: BLAKE3 is a
    /// tree, and gives the digest one thread would. Only for a process
    /// whose mappings nothing depends on (the supervisor's check): a
    /// session's worker must not start threads that a restore in another
    /// worker would not have, since where its mappings lie decides where
    /// the driver places module globals (the H200 showed cuBLAS's moving
    /// when workers hashed on a pool of threads).
    fn update_parallel(&mut self, b: &[u8]) {
        match self {
            Checksum::Blake3(h) if b.len() >= PARALLEL_HASH => {
                h.update_rayon(b);
            }
            _ => self.update(b),
        }
    }

    fn finalize(self) -> [u8; DIGEST] {
        match self {
            Checksum::Sha256(h) => h.finalize().into(),
            Checksum::Blake3(h) => *h.finalize().as_bytes(),
        }
    }
}

/// Writes a snapshot: [`Writer::new`] with the description, one
/// [`Writer::blob`] per blob in order, then [`Writer::finish`].
pub struct Writer<W: Write> {
    out: W,
    hash: Checksum,
    left: u32,
}

impl<W: Write> Writer<W> {
    /// Starts a snapshot of `meta` with `blobs` blobs to follow.
    pub fn new(out: W, meta: &Meta, blobs: u32) -> Result<Self, SnapshotError> {
        let mut w = Writer { out, hash: Checksum::of_version(VERSION), left: blobs };
        w.head(meta, blobs)?;
        Ok(w)
    }

    fn head(&mut self, meta: &Meta, blobs: u32) -> Result<(), SnapshotError> {
        let json = serde_json::to_vec(meta)?;
        self.put(MAGIC)?;
        self.put(&VERSION.to_le_bytes())?;
        self.put(&(json.len() as u64).to_le_bytes())?;
        self.put(&json)?;
        self.put(&blobs.to_le_bytes())
    }

    /// Appends the next blob.
    pub fn blob(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.left = self.left.checked_sub(1).ok_or_else(|| SnapshotError::Malformed("more blobs than announced".into()))?;
        self.put(&(bytes.len() as u64).to_le_bytes())?;
        self.put(bytes)
    }

    /// Appends the digest; returns the output.
    pub fn finish(mut self) -> Result<W, SnapshotError> {
        if self.left != 0 {
            return Err(SnapshotError::Malformed(format!("{} blobs announced but not written", self.left)));
        }
        let digest = self.hash.finalize();
        self.out.write_all(&digest)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn put(&mut self, b: &[u8]) -> Result<(), SnapshotError> {
        self.hash.update(b);
        self.out.write_all(b)?;
        Ok(())
    }
}

/// Checks the digest of a whole snapshot of `len` bytes read from `r`,
/// hashing on every core (threads of this process's own: not for a
/// session's worker, see [`Checksum::update_parallel`]).
pub fn verify(mut r: impl Read, len: u64) -> Result<(), SnapshotError> {
    let body = len.checked_sub(DIGEST as u64).ok_or(SnapshotError::Digest)?;
    // Large reads, so that each is hashed on several threads (no larger
    // than the file).
    let mut buf = vec![0u8; usize::try_from(body).unwrap_or(usize::MAX).clamp(12, 16 << 20)];
    // The version (after the magic) says which digest the file carries.
    let head = body.min(12) as usize;
    r.read_exact(&mut buf[..head]).map_err(|_| SnapshotError::Digest)?;
    let version = buf.get(8..12).map_or(VERSION, |v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]));
    let mut hash = Checksum::of_version(version);
    hash.update(&buf[..head]);
    let mut left = body - head as u64;
    while left > 0 {
        let n = (left.min(buf.len() as u64)) as usize;
        r.read_exact(&mut buf[..n]).map_err(|_| SnapshotError::Digest)?;
        hash.update_parallel(&buf[..n]);
        left -= n as u64;
    }
    let mut digest = [0u8; DIGEST];
    r.read_exact(&mut digest).map_err(|_| SnapshotError::Digest)?;
    if hash.finalize() != digest {
        return Err(SnapshotError::Digest);
    }
    Ok(())
}

/// [`verify`] for a file: its parts read on several threads at once (one
/// thread reading copies about a third as fast as every core hashes), and
/// hashed in order on every core while the next parts are read. The file
/// is read with `pread`, never mapped, so a file cut meanwhile is an error,
/// not a fault. Threads of this process's own, as for [`verify`].
pub fn verify_file(file: &std::fs::File, len: u64) -> Result<(), SnapshotError> {
    use std::os::unix::fs::FileExt;
    /// Bytes each thread reads at a time, and threads at once.
    const PART: u64 = 16 << 20;
    const READERS: usize = 4;
    let body = len.checked_sub(DIGEST as u64).ok_or(SnapshotError::Digest)?;
    // The version (after the magic) says which digest the file carries.
    let mut head = [0u8; 12];
    let known = body.min(12) as usize;
    file.read_exact_at(&mut head[..known], 0).map_err(|_| SnapshotError::Digest)?;
    let version = if known == 12 { u32::from_le_bytes([head[8], head[9], head[10], head[11]]) } else { VERSION };
    let mut hash = Checksum::of_version(version);
    let parts: Vec<(u64, usize)> = (0..body).step_by(PART as usize).map(|at| (at, (body - at).min(PART) as usize)).collect();
    let mut batches = parts.chunks(READERS);
    let mut current = read_parts(file, batches.next().unwrap_or(&[]), Vec::new())?;
    let mut spare = Vec::new();
    loop {
        // The next parts are read while these are hashed; the buffers go
        // round.
        let next = batches.next();
        let bufs = std::mem::take(&mut spare);
        let read = std::thread::scope(|s| {
            let reading = next.map(|batch| s.spawn(move || read_parts(file, batch, bufs)));
            for b in &current {
                hash.update_parallel(b);
            }
            reading.map(|r| r.join().unwrap_or(Err(SnapshotError::Digest)))
        });
        match read {
            Some(r) => spare = std::mem::replace(&mut current, r?),
            None => break,
        }
    }
    let mut digest = [0u8; DIGEST];
    file.read_exact_at(&mut digest, body).map_err(|_| SnapshotError::Digest)?;
    if hash.finalize() != digest {
        return Err(SnapshotError::Digest);
    }
    Ok(())
}

/// Reads each of `parts` (offset, length) of `file` on a thread of its
/// own, into the buffers given where there are some.
fn read_parts(file: &std::fs::File, parts: &[(u64, usize)], mut bufs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, SnapshotError> {
    use std::os::unix::fs::FileExt;
    bufs.resize_with(parts.len(), Vec::new);
    std::thread::scope(|s| {
        let readers: Vec<_> = bufs
            .into_iter()
            .zip(parts)
            .map(|(mut b, &(at, n))| {
                s.spawn(move || {
                    b.resize(n, 0);
                    file.read_exact_at(&mut b, at).map(|()| b)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap_or_else(|_| Err(io::Error::other("a reader failed"))).map_err(|_| SnapshotError::Digest))
            .collect()
    })
}

/// Reads a snapshot: the description, then its blobs in order, hashing
/// what it reads; [`Reader::finish`] checks the digest. What was read is
/// trusted only once `finish` says so (a caller that acts on the blobs as
/// they come throws its work away when it does not), so one pass both
/// reads and checks a file, where [`verify`] first would read it twice.
pub struct Reader<R: Read> {
    input: R,
    /// The file's format version.
    version: u32,
    /// Bytes before the digest.
    body: u64,
    /// Bytes left before the digest.
    left: u64,
    blobs: u32,
    /// `None` for a file checked before ([`Reader::open_checked`]).
    hash: Option<Checksum>,
    /// Bytes of the blob being read in parts not read yet.
    owed: u64,
}

/// Reads exactly `buf.len()` bytes from `input` into `buf` and hashes them.
fn read_hashed(input: &mut impl Read, hash: &mut Option<Checksum>, buf: &mut [u8]) -> Result<(), SnapshotError> {
    input.read_exact(buf)?;
    if let Some(h) = hash {
        h.update(&*buf);
    }
    Ok(())
}

impl<R: Read> Reader<R> {
    /// Reads the head of a snapshot of `len` bytes.
    pub fn open(mut input: R, len: u64) -> Result<(Reader<R>, Meta), SnapshotError> {
        let mut left = len.checked_sub(DIGEST as u64).ok_or_else(|| SnapshotError::Malformed("shorter than its digest".into()))?;
        let mut head = [0u8; 20];
        take(&mut left, head.len() as u64)?;
        input.read_exact(&mut head)?;
        if &head[..8] != MAGIC {
            return Err(SnapshotError::Magic);
        }
        let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if !(1..=VERSION).contains(&version) {
            return Err(SnapshotError::Version(version));
        }
        let mut first = Checksum::of_version(version);
        first.update(&head);
        let mut hash = Some(first);
        let meta_len = u64::from_le_bytes(head[12..20].try_into().unwrap_or_default());
        if meta_len > MAX_META {
            return Err(SnapshotError::Malformed(format!("a description of {meta_len} bytes")));
        }
        take(&mut left, meta_len)?;
        let mut json = vec![0u8; meta_len as usize];
        read_hashed(&mut input, &mut hash, &mut json)?;
        let meta: Meta = serde_json::from_slice(&json)?;
        take(&mut left, 4)?;
        let mut count = [0u8; 4];
        read_hashed(&mut input, &mut hash, &mut count)?;
        let blobs = u32::from_le_bytes(count);
        if blobs > MAX_BLOBS {
            return Err(SnapshotError::Malformed(format!("{blobs} blobs")));
        }
        let body = len - DIGEST as u64;
        Ok((Reader { input, version, body, left, blobs, hash, owed: 0 }, meta))
    }

    /// [`Reader::open`] for a file whose digest was checked and that
    /// nothing can have changed since (a sealed memory file, or one under
    /// a read lease no writer broke): read without hashing, and
    /// [`Reader::finish`] then checks its shape only. Every length is
    /// still checked against the file, so even a file changed after all
    /// is an error, never a crash.
    pub fn open_checked(input: R, len: u64) -> Result<(Reader<R>, Meta), SnapshotError> {
        let (mut r, meta) = Reader::open(input, len)?;
        r.hash = None;
        Ok((r, meta))
    }

    /// The file's format version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Blobs not yet read.
    pub fn blobs_left(&self) -> u32 {
        self.blobs
    }

    /// The next blob.
    pub fn blob(&mut self) -> Result<Vec<u8>, SnapshotError> {
        let n = self.blob_start()?;
        let n = usize::try_from(n).map_err(|_| SnapshotError::Malformed("a blob larger than memory".into()))?;
        let mut b = Vec::new();
        b.try_reserve_exact(n).map_err(|_| SnapshotError::Malformed(format!("a blob of {n} bytes does not fit in memory")))?;
        b.resize(n, 0);
        self.blob_part(&mut b)?;
        Ok(b)
    }

    /// Starts the next blob without reading it: returns its length (within
    /// what is left of the file), to be read with [`Reader::blob_part`].
    pub fn blob_start(&mut self) -> Result<u64, SnapshotError> {
        if self.owed != 0 {
            return Err(SnapshotError::Malformed(format!("a blob left with {} bytes unread", self.owed)));
        }
        self.blobs = self.blobs.checked_sub(1).ok_or_else(|| SnapshotError::Malformed("a blob past the last".into()))?;
        take(&mut self.left, 8)?;
        let mut n = [0u8; 8];
        read_hashed(&mut self.input, &mut self.hash, &mut n)?;
        let n = u64::from_le_bytes(n);
        take(&mut self.left, n)?;
        self.owed = n;
        Ok(n)
    }

    /// Reads the next `buf.len()` bytes of the blob started.
    pub fn blob_part(&mut self, buf: &mut [u8]) -> Result<(), SnapshotError> {
        self.owed =
            self.owed.checked_sub(buf.len() as u64).ok_or_else(|| SnapshotError::Malformed("a read past the end of a blob".into()))?;
        read_hashed(&mut self.input, &mut self.hash, buf)
    }

    /// Skips the next `n` bytes of the blob started, without reading them,
    /// in a file read without hashing ([`Reader::open_checked`]): where they
    /// lie in the file, for the caller to take them from there (mapped).
    pub fn skip_part(&mut self, n: u64) -> Result<u64, SnapshotError>
    where
        R: io::Seek,
    {
        if self.hash.is_some() {
            return Err(SnapshotError::Malformed("bytes skipped in a file whose digest is being checked".into()));
        }
        let at = self.body - self.left - self.owed;
        self.owed = self.owed.checked_sub(n).ok_or_else(|| SnapshotError::Malformed("a skip past the end of a blob".into()))?;
        let by = i64::try_from(n).map_err(|_| SnapshotError::Malformed("a skip too long".into()))?;
        self.input.seek_relative(by)?;
        Ok(at)
    }

    /// Whether the file is read without hashing ([`Reader::open_checked`]).
    pub fn checked_before(&self) -> bool {
        self.hash.is_none()
    }

    /// Checks that every blob was read, nothing follows them, and the
    /// digest is that of everything read.
    pub fn finish(mut self) -> Result<(), SnapshotError> {
        if self.blobs != 0 || self.left != 0 || self.owed != 0 {
            return Err(SnapshotError::Malformed(format!("{} blobs and {} bytes left unread", self.blobs, self.left)));
        }
        let mut digest = [0u8; DIGEST];
        self.input.read_exact(&mut digest).map_err(|_| SnapshotError::Digest)?;
        if self.hash.is_some_and(|h| h.finalize() != digest) {
            return Err(SnapshotError::Digest);
        }
        Ok(())
    }
}

/// A token as the snapshot spells it (lowercase hex).
pub fn token_hex(t: &[u8; 16]) -> String {
    t.iter().map(|b| format!("{b:02x}")).collect()
}

/// A token from its spelling in a snapshot.
pub fn token_from_hex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut t = [0u8; 16];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(t)
}

fn take(left: &mut u64, n: u64) -> Result<(), SnapshotError> {
    *left = left.checked_sub(n).ok_or_else(|| SnapshotError::Malformed("a length past the end of the file".into()))?;
    Ok(())
}

/// Checks and reads a whole snapshot held in memory: its description and
/// blobs (for tests, fuzzing and small files).
pub fn decode(bytes: &[u8]) -> Result<(Meta, Vec<Vec<u8>>), SnapshotError> {
    verify(bytes, bytes.len() as u64)?;
    let (mut r, meta) = Reader::open(bytes, bytes.len() as u64)?;
    let mut blobs = Vec::new();
    while r.blobs_left() > 0 {
        blobs.push(r.blob()?);
    }
    r.finish()?;
    Ok((meta, blobs))
}

#[cfg(test)]
mod tests;
