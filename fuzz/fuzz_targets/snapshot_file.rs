//! Session snapshot files as `pvgpu-ctl restore` and a resuming worker read
//! them (`pvgpu_ctl::snapshot`).
//!
//! A file may be corrupt or written by someone hostile who computed a good
//! digest, so the input goes through both readers: `decode` (digest first,
//! then everything), and `Reader` on the bytes as they are, past the digest
//! check, so that the description and every length are fuzzed too.
//!
//! The `Reader` pass runs three times: whole blobs; blobs read in parts as a
//! restore reads device memory; and, as a worker reads a file kept as the
//! backend checked it (no digest), blobs skipped where a restore maps
//! device memory from the file.
//!
//! Checked besides "no panic": nothing read is longer than the input; a
//! file that decodes encodes again to the same bytes; every skipped part
//! lies within the input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pvgpu_ctl::snapshot::{self, Reader, Writer};

/// Reads the `len` bytes of the blob started in parts of a chunk, as a
/// restore reads device memory; whether all came.
fn read_in_parts<R: std::io::Read>(r: &mut Reader<R>, len: u64, chunk: &mut [u8]) -> bool {
    let mut off = 0;
    while off < len {
        let n = (len - off).min(chunk.len() as u64) as usize;
        if r.blob_part(&mut chunk[..n]).is_err() {
            return false;
        }
        off += n as u64;
    }
    true
}

fuzz_target!(|data: &[u8]| {
    if let Ok((meta, blobs)) = snapshot::decode(data) {
        assert!(blobs.iter().map(Vec::len).sum::<usize>() <= data.len());
        let mut w = Writer::new(Vec::new(), &meta, blobs.len() as u32).expect("a decoded description encodes");
        for b in &blobs {
            w.blob(b).expect("a blob writes");
        }
        let again = w.finish().expect("a snapshot finishes");
        // The description is JSON: equal content, possibly other spelling.
        assert_eq!(snapshot::decode(&again).expect("its own output decodes").1, blobs);
    }
    if let Ok((mut r, _meta)) = Reader::open(data, data.len() as u64) {
        let mut read = 0usize;
        while r.blobs_left() > 0 {
            match r.blob() {
                Ok(b) => read += b.len(),
                Err(_) => break,
            }
        }
        assert!(read <= data.len());
        let _ = r.finish();
    }
    // As a restore reads device memory: each blob in parts of a chunk.
    if let Ok((mut r, _meta)) = Reader::open(data, data.len() as u64) {
        let mut chunk = [0u8; 1000];
        let mut read = 0u64;
        while r.blobs_left() > 0 {
            let Ok(len) = r.blob_start() else { break };
            if !read_in_parts(&mut r, len, &mut chunk) {
                break;
            }
            read += len;
        }
        assert!(read <= data.len() as u64);
        let _ = r.finish();
    }
    // As a worker reads a file kept as checked: device memory skipped
    // (taken from the file where the reader says), the rest read.
    if let Ok((mut r, _meta)) = Reader::open_checked(std::io::Cursor::new(data), data.len() as u64) {
        let mut chunk = [0u8; 1000];
        while r.blobs_left() > 0 {
            let Ok(len) = r.blob_start() else { break };
            if len % 2 == 0 {
                match r.skip_part(len) {
                    Ok(at) => assert!(at.checked_add(len).is_some_and(|end| end <= data.len() as u64), "a part past the input"),
                    Err(_) => break,
                }
            } else if !read_in_parts(&mut r, len, &mut chunk) {
                break;
            }
        }
        let _ = r.finish();
    }
});
