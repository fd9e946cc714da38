//! Fatbins built by hand, as nvcc lays them out, for the tests.

use crate::MAGIC;

/// An entry of `kind` for `arch` with `payload`, as nvcc 13 lays it out:
/// the stored size is written only for a compressed payload.
pub fn entry(kind: u16, arch: u32, flags: u64, size: u64, payload: &[u8]) -> Vec<u8> {
    let padded = payload.len().next_multiple_of(8);
    let mut h = vec![0u8; 64];
    h[0..2].copy_from_slice(&kind.to_le_bytes());
    h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
    h[4..8].copy_from_slice(&64u32.to_le_bytes());
    h[8..12].copy_from_slice(&(padded as u32).to_le_bytes());
    if flags & (crate::FLAG_LZ4 | crate::FLAG_ZSTD) != 0 {
        h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    }
    h[28..32].copy_from_slice(&arch.to_le_bytes());
    h[40..48].copy_from_slice(&flags.to_le_bytes());
    h[56..64].copy_from_slice(&size.to_le_bytes());
    h.extend_from_slice(payload);
    h.resize(64 + padded, 0);
    h
}

/// A container of `entries`.
pub fn container(entries: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = entries.concat();
    let mut c = Vec::new();
    c.extend_from_slice(&MAGIC.to_le_bytes());
    c.extend_from_slice(&1u16.to_le_bytes());
    c.extend_from_slice(&16u16.to_le_bytes());
    c.extend_from_slice(&(body.len() as u64).to_le_bytes());
    c.extend_from_slice(&body);
    c
}
