//! The snapshot file's writer and reader: round trips, digests, and
//! hostile files.

use super::*;
use std::fs::File;

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
        devices: vec![Device { ordinal: 0, name: "pvgpu host double".into(), total_memory_bytes: 1 << 30, uuid: None }],
        gpus: Some(vec![0]),
        space: 0,
        state_bytes: 5,
        skeleton: false,
        held_bytes: 0,
        state: State {
            allocations: vec![Allocation { ctx: 1, address: 0x1000, length: 5, blob: 0, pool: None, handed: false }],
            ..State::default()
        },
    }
}

fn encode(meta: &Meta, blobs: &[&[u8]]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), meta, blobs.len() as u32).unwrap();
    for b in blobs {
        w.blob(b).unwrap();
    }
    w.finish().unwrap()
}

/// A snapshot written in place is the file the streaming writer writes,
/// byte for byte: blobs through chunks (more chunks than there are
/// buffers, and a short last one), blobs at hand, in any mix, hashed on a
/// pool or alone; into room made before, longer than the file or shorter;
/// and into a file that cannot be mapped.
#[test]
fn a_snapshot_written_in_place_is_the_same_file() {
    const CHUNK: usize = 1 << 20;
    let big: Vec<u8> = (0..(CHUNK as u32 * 7 + 12345) / 4).flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()).collect();
    let path = std::env::temp_dir().join(format!("pvgpu-placed-{}", std::process::id()));
    // Room for the whole snapshot and more, for part of it, none.
    for (threads, mapped, room) in [(None, true, 64 << 20), (Some(3), true, 1 << 20), (None, false, 0)] {
        let memfd = File::from(nix::sys::memfd::memfd_create("pvgpu-placed", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap());
        // A file open for writing only cannot be mapped: written with pwrite.
        let write_only = || std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&path).unwrap();
        let file = if mapped { memfd.try_clone().unwrap() } else { write_only() };
        if room > 0 {
            assert!(make_room(&file, room, 4).unwrap(), "a memory file is tmpfs");
            assert_eq!(file.metadata().unwrap().len(), room);
        }
        let mut w = FileWriter::new(&file, &sample(), vec![3, big.len() as u64, 0, 4]).unwrap();
        if let Some(n) = threads {
            w = w.hash_on(n);
        }
        w.blob(b"hel").unwrap();
        let mut chunks: Vec<memmap2::MmapMut> = (0..3).map(|_| memmap2::MmapMut::map_anon(CHUNK).unwrap()).collect();
        let mut parts = Vec::new();
        w.blob_through::<SnapshotError>(big.len() as u64, &mut chunks, |buf, off| {
            parts.push((off, buf.len()));
            buf.copy_from_slice(&big[off as usize..off as usize + buf.len()]);
            Ok(())
        })
        .unwrap();
        assert_eq!(parts.len(), 8);
        assert_eq!(parts[7], (7 * CHUNK as u64, big.len() - 7 * CHUNK));
        assert_eq!(chunks.len(), 3, "the chunks come back");
        w.blob_through::<SnapshotError>(0, &mut chunks, |_, _| panic!("an empty blob has no chunk")).unwrap();
        w.blob(b"tail").unwrap();
        let len = w.finish().unwrap();
        let file = if mapped { file } else { File::open(&path).unwrap() };
        let mut written = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut written).unwrap();
        assert_eq!(len, written.len() as u64, "the room beyond the snapshot given back");
        assert!(written == encode(&sample(), &[b"hel", &big, b"", b"tail"]), "the same bytes");
        verify_file(&file, len).unwrap();
    }
    let _ = std::fs::remove_file(&path);
    let file = File::from(nix::sys::memfd::memfd_create("pvgpu-placed", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap());
    let mut w = FileWriter::new(&file, &sample(), vec![3]).unwrap();
    assert!(w.blob(b"hello").is_err(), "a blob of another length than announced");
    let w = FileWriter::new(&file, &sample(), vec![3]).unwrap();
    assert!(w.finish().is_err(), "a blob missing");
    let mut w = FileWriter::new(&file, &sample(), vec![]).unwrap();
    assert!(w.blob(b"x").is_err(), "more blobs than announced");
    let mut chunks: Vec<memmap2::MmapMut> = Vec::new();
    let mut w = FileWriter::new(&file, &sample(), vec![8]).unwrap();
    assert!(w.blob_through::<SnapshotError>(8, &mut chunks, |_, _| Ok(())).is_err(), "no chunk");
    chunks.push(memmap2::MmapMut::map_anon(4).unwrap());
    let mut w = FileWriter::new(&file, &sample(), vec![12]).unwrap();
    let mut calls = 0;
    let failed = w.blob_through(12, &mut chunks, |_, _| {
        calls += 1;
        if calls == 2 { Err(SnapshotError::Malformed("the device failed".into())) } else { Ok(()) }
    });
    assert!(matches!(failed, Err(SnapshotError::Malformed(m)) if m == "the device failed"), "a fill's error is the blob's");
    assert_eq!(chunks.len(), 1, "the chunk comes back after a failure too");
}

/// A file checked on several threads gives what one reader gives: its
/// parts hashed in order, whatever their number.
#[test]
fn a_file_checked_in_parts_is_checked_whole() {
    let big: Vec<u8> = (0..(70u32 << 20) / 4).flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()).collect();
    let mut file = encode(&sample(), &[&big, b"tail"]);
    let path = std::env::temp_dir().join(format!("pvgpu-verify-{}", std::process::id()));
    let check = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        verify_file(&f, bytes.len() as u64)
    };
    check(&file).unwrap();
    for at in [5, file.len() / 3, (48 << 20) + 7, file.len() - 1] {
        file[at] ^= 4;
        assert!(matches!(check(&file), Err(SnapshotError::Digest)), "a change at {at}");
        file[at] ^= 4;
    }
    assert!(check(&file[..file.len() - 1]).is_err(), "cut");
    assert!(check(&file[..10]).is_err(), "shorter than a head");
    let _ = std::fs::remove_file(&path);
}

/// In a file read as checked, a blob's bytes may be skipped and taken from
/// the file where the reader says they lie; never in one being hashed.
#[test]
fn skipped_bytes_are_where_the_reader_says() {
    let file = encode(&sample(), &[b"hello", b"world!"]);
    let (mut r, _) = Reader::open_checked(std::io::Cursor::new(&file[..]), file.len() as u64).unwrap();
    assert!(r.checked_before());
    assert_eq!(r.blob_start().unwrap(), 5);
    let mut he = [0u8; 2];
    r.blob_part(&mut he).unwrap();
    let at = r.skip_part(3).unwrap() as usize;
    assert_eq!(&file[at..at + 3], b"llo");
    assert_eq!(r.blob_start().unwrap(), 6);
    let at = r.skip_part(6).unwrap() as usize;
    assert_eq!(&file[at..at + 6], b"world!");
    assert!(r.skip_part(1).is_err(), "past the blob");
    r.finish().unwrap();
    let (mut r, _) = Reader::open(std::io::Cursor::new(&file[..]), file.len() as u64).unwrap();
    r.blob_start().unwrap();
    assert!(r.skip_part(5).is_err(), "a file being hashed is read whole");
}

/// A file read as checked skips the digest, and nothing else.
#[test]
fn a_checked_file_is_read_without_its_digest_and_still_bounded() {
    let mut file = encode(&sample(), &[b"hello"]);
    let last = file.len() - 1;
    file[last] ^= 1;
    let (mut r, _) = Reader::open_checked(&file[..], file.len() as u64).unwrap();
    assert_eq!(r.blob().unwrap(), b"hello");
    r.finish().unwrap();
    let (mut r, _) = Reader::open(&file[..], file.len() as u64).unwrap();
    r.blob().unwrap();
    assert!(matches!(r.finish(), Err(SnapshotError::Digest)), "read as usual, the digest is checked");
    let cut = &file[..file.len() - 3];
    let (mut r, _) = Reader::open_checked(cut, cut.len() as u64).unwrap();
    assert!(r.blob().is_err() || r.finish().is_err(), "a cut file is still an error");
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
