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

use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};

mod graph;
mod state;

pub use graph::{Body, ExecGraphRec, GraphRec, NodeKind, NodeRec, from_hex, hex};
pub use state::{
    Allocation, ArrayRec, Context, Device, Function, Global, LimitRec, Mapped, Meta, MirrorRec, Module, Physical, PoolRec, Queue,
    Reservation, State, TexObjectRec,
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
    /// Bytes still owed to the blob being written in parts.
    owed: u64,
}

impl<W: Write> Writer<W> {
    /// Starts a snapshot of `meta` with `blobs` blobs to follow.
    pub fn new(out: W, meta: &Meta, blobs: u32) -> Result<Self, SnapshotError> {
        let json = serde_json::to_vec(meta)?;
        let mut w = Writer { out, hash: Checksum::of_version(VERSION), left: blobs, owed: 0 };
        w.put(MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        w.put(&(json.len() as u64).to_le_bytes())?;
        w.put(&json)?;
        w.put(&blobs.to_le_bytes())?;
        Ok(w)
    }

    /// Appends the next blob.
    pub fn blob(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.blob_start(bytes.len() as u64)?;
        self.blob_part(bytes)
    }

    /// Starts the next blob, of `len` bytes given by [`Writer::blob_part`].
    pub fn blob_start(&mut self, len: u64) -> Result<(), SnapshotError> {
        if self.owed != 0 {
            return Err(SnapshotError::Malformed(format!("a blob left {} bytes short", self.owed)));
        }
        self.left = self.left.checked_sub(1).ok_or_else(|| SnapshotError::Malformed("more blobs than announced".into()))?;
        self.owed = len;
        self.put(&len.to_le_bytes())
    }

    /// Appends bytes of the blob being written.
    pub fn blob_part(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.owed =
            self.owed.checked_sub(bytes.len() as u64).ok_or_else(|| SnapshotError::Malformed("a blob longer than it said".into()))?;
        self.put(bytes)
    }

    /// Appends the digest; returns the output.
    pub fn finish(mut self) -> Result<W, SnapshotError> {
        if self.left != 0 || self.owed != 0 {
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

/// Reads a snapshot: the description, then its blobs in order, hashing
/// what it reads; [`Reader::finish`] checks the digest. What was read is
/// trusted only once `finish` says so (a caller that acts on the blobs as
/// they come throws its work away when it does not), so one pass both
/// reads and checks a file, where [`verify`] first would read it twice.
pub struct Reader<R: Read> {
    input: R,
    /// The file's format version.
    version: u32,
    /// Bytes left before the digest.
    left: u64,
    blobs: u32,
    hash: Checksum,
    /// Bytes of the blob being read in parts not read yet.
    owed: u64,
}

/// Reads exactly `buf.len()` bytes from `input` into `buf` and hashes them.
fn read_hashed(input: &mut impl Read, hash: &mut Checksum, buf: &mut [u8]) -> Result<(), SnapshotError> {
    input.read_exact(buf)?;
    hash.update(&*buf);
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
        let mut hash = Checksum::of_version(version);
        hash.update(&head);
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
        Ok((Reader { input, version, left, blobs, hash, owed: 0 }, meta))
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

    /// Checks that every blob was read, nothing follows them, and the
    /// digest is that of everything read.
    pub fn finish(mut self) -> Result<(), SnapshotError> {
        if self.blobs != 0 || self.left != 0 || self.owed != 0 {
            return Err(SnapshotError::Malformed(format!("{} blobs and {} bytes left unread", self.blobs, self.left)));
        }
        let mut digest = [0u8; DIGEST];
        self.input.read_exact(&mut digest).map_err(|_| SnapshotError::Digest)?;
        if self.hash.finalize() != digest {
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
mod tests {
    use super::*;

    /// Large parts hashed on several threads give the digest of one
    /// thread, in any split: files stay readable across builds.
    #[test]
    fn parallel_hashing_gives_the_same_digest() {
        let bytes: Vec<u8> = (0..(5 << 20) + 12345u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut parts = Checksum::of_version(VERSION);
        for part in [&bytes[..100], &bytes[100..(3 << 20)], &bytes[(3 << 20)..]] {
            parts.update_parallel(part);
        }
        assert_eq!(parts.finalize(), *blake3::hash(&bytes).as_bytes());
    }

    fn sample() -> Meta {
        Meta {
            created_unix_seconds: 1,
            session: 3,
            peer: "uid:1000".into(),
            token: "00".repeat(16),
            executor: "host".into(),
            devices: vec![Device { ordinal: 0, name: "pvgpu host double".into(), total_memory_bytes: 1 << 30 }],
            gpus: Some(vec![0]),
            space: 0,
            state_bytes: 5,
            state: State { allocations: vec![Allocation { ctx: 1, address: 0x1000, length: 5, blob: 0, pool: None }], ..State::default() },
        }
    }

    fn encode(meta: &Meta, blobs: &[&[u8]]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), meta, blobs.len() as u32).unwrap();
        for b in blobs {
            w.blob(b).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let file = encode(&sample(), &[b"hello", b""]);
        let (meta, blobs) = decode(&file).unwrap();
        assert_eq!(meta, sample());
        assert_eq!(blobs, vec![b"hello".to_vec(), vec![]]);
    }

    #[test]
    fn any_change_or_cut_is_refused_before_use() {
        let file = encode(&sample(), &[b"hello"]);
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            assert!(matches!(decode(&bad), Err(SnapshotError::Digest)), "a flipped byte {i} passed");
        }
        for n in 0..file.len() {
            assert!(decode(&file[..n]).is_err(), "a file cut at {n} passed");
        }
    }

    /// What a resuming worker does: one pass, acting on the blobs as they
    /// come, trusting them only when `finish` agrees.
    fn read_once(file: &[u8]) -> Result<Vec<Vec<u8>>, SnapshotError> {
        let (mut r, _) = Reader::open(file, file.len() as u64)?;
        let mut blobs = Vec::new();
        while r.blobs_left() > 0 {
            blobs.push(r.blob()?);
        }
        r.finish()?;
        Ok(blobs)
    }

    #[test]
    fn the_reader_alone_refuses_any_change_or_cut() {
        let file = encode(&sample(), &[b"hello", b"world!"]);
        assert_eq!(read_once(&file).unwrap(), vec![b"hello".to_vec(), b"world!".to_vec()]);
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            assert!(read_once(&bad).is_err(), "a flipped byte {i} passed the reader");
        }
        for n in 0..file.len() {
            assert!(read_once(&file[..n]).is_err(), "a file cut at {n} passed the reader");
        }
    }

    #[test]
    fn lengths_past_the_end_are_errors_even_with_a_good_digest() {
        // A hostile writer computes a good digest over impossible lengths.
        let json = serde_json::to_vec(&sample()).unwrap();
        let mut body = Vec::new();
        body.extend_from_slice(MAGIC);
        body.extend_from_slice(&VERSION.to_le_bytes());
        body.extend_from_slice(&(json.len() as u64).to_le_bytes());
        body.extend_from_slice(&json);
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&u64::MAX.to_le_bytes());
        let digest = blake3::hash(&body);
        body.extend_from_slice(digest.as_bytes());
        assert!(matches!(decode(&body), Err(SnapshotError::Malformed(_))));
    }

    #[test]
    fn another_version_is_named() {
        let mut file = encode(&sample(), &[b"x"]);
        file[8] = 9;
        let body = file.len() - DIGEST;
        let digest = blake3::hash(&file[..body]);
        file[body..].copy_from_slice(digest.as_bytes());
        assert!(matches!(decode(&file), Err(SnapshotError::Version(9))));
    }

    #[test]
    fn a_blob_reads_in_parts() {
        let file = encode(&sample(), &[b"hello world", b"!"]);
        let (mut r, _) = Reader::open(&file[..], file.len() as u64).unwrap();
        assert_eq!(r.blob_start().unwrap(), 11);
        let (mut a, mut b) = ([0u8; 5], [0u8; 6]);
        r.blob_part(&mut a).unwrap();
        assert!(matches!(r.blob_start(), Err(SnapshotError::Malformed(_))), "the blob is not read whole");
        r.blob_part(&mut b).unwrap();
        assert_eq!((&a, &b), (b"hello", b" world"));
        assert_eq!(r.blob_start().unwrap(), 1);
        assert!(matches!(r.blob_part(&mut [0u8; 2]), Err(SnapshotError::Malformed(_))), "past the blob's end");
        let (mut r, _) = Reader::open(&file[..], file.len() as u64).unwrap();
        r.blob_start().unwrap();
        r.blob_part(&mut [0u8; 11]).unwrap();
        r.blob_start().unwrap();
        assert!(matches!(r.finish(), Err(SnapshotError::Malformed(_))), "a blob started and not read");
    }

    #[test]
    fn a_version_1_file_is_read_by_its_sha256_digest() {
        // What a backend before version 2 wrote: the same layout, SHA-256.
        let mut file = encode(&sample(), &[b"hello", b"world!"]);
        file[8..12].copy_from_slice(&1u32.to_le_bytes());
        let body = file.len() - DIGEST;
        let digest = Sha256::digest(&file[..body]);
        file[body..].copy_from_slice(&digest);
        assert_eq!(read_once(&file).unwrap(), vec![b"hello".to_vec(), b"world!".to_vec()]);
        assert_eq!(Reader::open(&file[..], file.len() as u64).unwrap().0.version(), 1, "the file's own version");
        verify(&file[..], file.len() as u64).unwrap();
        // A BLAKE3 digest under version 1 is a wrong digest.
        let digest = blake3::hash(&file[..body]);
        file[body..].copy_from_slice(digest.as_bytes());
        assert!(matches!(verify(&file[..], file.len() as u64), Err(SnapshotError::Digest)));
        assert!(matches!(read_once(&file), Err(SnapshotError::Digest)));
    }
}
