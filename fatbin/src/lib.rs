//! # pvgpu-fatbin
//!
//! NVIDIA's fatbin container, as nvcc 11 to 13 write it: what the guest
//! sends the backend, and what the backend's test double reads.
//!
//! A fatbin is one or more **containers** back to back (a library's
//! `.nv_fatbin` section holds one per translation unit; nvcc's wrapper
//! points at the first). A container is a 16-byte header (magic
//! `0xBA55ED50`, version, header size, size of what follows) and
//! **entries**, each a header of its own (64 bytes or more; its size is in
//! it) and a payload padded to 8 bytes: a cubin (ELF) or PTX text for one
//! architecture, possibly compressed with LZ4 (nvcc 11 and 12) or
//! Zstandard (nvcc 12.8 and later).
//!
//! - [`parse`] reads every container and entry, each extent checked
//!   against the buffer: a malformed fatbin is an error, never a panic or
//!   a read out of bounds.
//! - [`select`] keeps only what a GPU of a given compute capability runs
//!   (its best cubin, else its best PTX), as a new single container whose
//!   entries are copied byte for byte (compressed ones stay compressed:
//!   the driver decompresses them). A library built for ten architectures
//!   reaches the backend as one.
//! - [`Entry::decompressed`] inflates a payload, bounded by the size the
//!   entry declares.
//!
//! Layouts were read from fatbins nvcc 13.0 builds (the tests build
//! multi-architecture, compressed and multi-container ones) and agree with
//! public descriptions of the format.

mod build;
mod parse;
#[cfg(test)]
mod testing;

pub use build::select;
pub use parse::{Entry, Fatbin, parse};

/// Magic number of a container.
pub const MAGIC: u32 = 0xBA55_ED50;
/// Magic number of nvcc's wrapper structure (`__fatBinC_Wrapper_t`), whose
/// third word points at the fatbin.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// Length of a container header.
pub const HEADER_LEN: usize = 16;
/// Shortest entry header.
pub const ENTRY_HEADER_LEN: usize = 64;
/// Largest fatbin or decompressed payload accepted (1 GiB).
pub const MAX_LEN: usize = 1 << 30;

/// Entry kind: PTX text.
pub const KIND_PTX: u16 = 1;
/// Entry kind: a cubin (ELF).
pub const KIND_ELF: u16 = 2;

/// Entry flag: the payload is compressed with LZ4.
pub const FLAG_LZ4: u64 = 0x2000;
/// Entry flag: the payload is compressed with Zstandard.
pub const FLAG_ZSTD: u64 = 0x8000;

/// Why a fatbin was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FatbinError {
    /// Not a fatbin.
    #[error("Not a fatbin (no container magic)")]
    NotFatbin,
    /// A size or offset leaves the buffer.
    #[error("Fatbin {0} runs past the end of the image")]
    Truncated(&'static str),
    /// A field holds a value no fatbin has.
    #[error("Fatbin {0} is malformed")]
    Malformed(&'static str),
    /// A payload does not inflate to the size its entry declares.
    #[error("Compressed fatbin entry does not decompress: {0}")]
    Compression(String),
}

/// Whether `image` starts like a fatbin container.
pub fn is_fatbin(image: &[u8]) -> bool {
    image.get(..4) == Some(&MAGIC.to_le_bytes()[..])
}
