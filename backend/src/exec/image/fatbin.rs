//! NVIDIA's fatbin container: a 16-byte header (magic, version, header
//! size, size of what follows) and entries, each a header of its own and a
//! payload: a cubin (ELF) or PTX text for one architecture, possibly
//! compressed. Layout as nvcc 13 writes it, checked against the fatbins in
//! `tests/kernels/`.

use pvgpu_ring::CuError;

/// The container's magic number.
pub const MAGIC: u32 = 0xBA55_ED50;

/// Entry kind: PTX text.
pub const KIND_PTX: u16 = 1;
/// Entry kind: a cubin (ELF).
pub const KIND_ELF: u16 = 2;

/// Entry flag: the payload is compressed with LZ4.
pub const FLAG_LZ4: u64 = 0x2000;
/// Entry flag: the payload is compressed with Zstandard.
pub const FLAG_ZSTD: u64 = 0x8000;

/// One entry of a fatbin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// [`KIND_PTX`] or [`KIND_ELF`] (others exist and are skipped by users).
    pub kind: u16,
    /// The architecture, as `sm_XY` numbers it (90 for sm_90).
    pub arch: u32,
    /// Flags, among them [`FLAG_LZ4`] and [`FLAG_ZSTD`].
    pub flags: u64,
    /// The payload as stored.
    pub payload: &'a [u8],
}

impl Entry<'_> {
    /// Whether the payload is compressed.
    pub fn compressed(&self) -> bool {
        self.flags & (FLAG_LZ4 | FLAG_ZSTD) != 0
    }
}

/// Whether `image` starts like a fatbin container.
pub fn is_fatbin(image: &[u8]) -> bool {
    image.get(..4).is_some_and(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == MAGIC)
}

fn rd<const N: usize>(d: &[u8], at: usize) -> Result<[u8; N], CuError> {
    d.get(at..at.checked_add(N).ok_or(CuError::INVALID_IMAGE)?).and_then(|s| s.try_into().ok()).ok_or(CuError::INVALID_IMAGE)
}

/// The entries of a fatbin, every extent checked against the buffer: the
/// container's declared size must fit, and so must each entry's header and
/// payload.
pub fn entries(image: &[u8]) -> Result<Vec<Entry<'_>>, CuError> {
    if !is_fatbin(image) {
        return Err(CuError::INVALID_IMAGE);
    }
    let header = u16::from_le_bytes(rd(image, 6)?) as usize;
    let size = usize::try_from(u64::from_le_bytes(rd(image, 8)?)).map_err(|_| CuError::INVALID_IMAGE)?;
    let end = header.checked_add(size).filter(|&e| e <= image.len() && header >= 16).ok_or(CuError::INVALID_IMAGE)?;
    let mut out = Vec::new();
    let mut at = header;
    while at < end {
        let eh = u32::from_le_bytes(rd(image, at + 4)?) as usize;
        let len = usize::try_from(u64::from_le_bytes(rd(image, at + 8)?)).map_err(|_| CuError::INVALID_IMAGE)?;
        let next = at.checked_add(eh).and_then(|v| v.checked_add(len)).ok_or(CuError::INVALID_IMAGE)?;
        if eh < 48 || next > end {
            return Err(CuError::INVALID_IMAGE);
        }
        out.push(Entry {
            kind: u16::from_le_bytes(rd(image, at)?),
            arch: u32::from_le_bytes(rd(image, at + 28)?),
            flags: u64::from_le_bytes(rd(image, at + 40)?),
            payload: &image[at + eh..next],
        });
        at = next;
    }
    Ok(out)
}
