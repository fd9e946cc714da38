//! Reading containers and entries, every extent checked.

use crate::{ENTRY_HEADER_LEN, FLAG_LZ4, FLAG_ZSTD, FatbinError, HEADER_LEN, KIND_ELF, KIND_PTX, MAGIC, MAX_LEN, is_fatbin};
use std::io::Read;

/// One entry of a fatbin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// [`KIND_PTX`], [`KIND_ELF`] or another kind (kept, not interpreted).
    pub kind: u16,
    /// The architecture, as `sm_XY` numbers it (90 for sm_90).
    pub arch: u32,
    /// Flags, among them [`FLAG_LZ4`] and [`FLAG_ZSTD`].
    pub flags: u64,
    /// Size of the payload once decompressed (the stored size when it is
    /// not compressed).
    pub size: u64,
    /// The payload as stored (compressed or not), without padding.
    pub payload: &'a [u8],
    /// The whole entry as stored: header, payload and padding.
    pub raw: &'a [u8],
}

impl<'a> Entry<'a> {
    /// Whether the payload is compressed.
    pub fn compressed(&self) -> bool {
        self.flags & (FLAG_LZ4 | FLAG_ZSTD) != 0
    }

    /// Whether it is a cubin.
    pub fn is_elf(&self) -> bool {
        self.kind == KIND_ELF
    }

    /// Whether it is PTX.
    pub fn is_ptx(&self) -> bool {
        self.kind == KIND_PTX
    }

    /// The payload, decompressed if it is compressed. Refuses a payload
    /// that does not inflate to exactly the declared size, or a declared
    /// size over [`MAX_LEN`].
    pub fn decompressed(&self) -> Result<std::borrow::Cow<'a, [u8]>, FatbinError> {
        if !self.compressed() {
            return Ok(std::borrow::Cow::Borrowed(self.payload));
        }
        let size = usize::try_from(self.size).ok().filter(|&s| s <= MAX_LEN).ok_or(FatbinError::Malformed("decompressed size"))?;
        let out = if self.flags & FLAG_ZSTD != 0 {
            let mut d = ruzstd::decoding::StreamingDecoder::new(self.payload).map_err(|e| FatbinError::Compression(e.to_string()))?;
            let mut out = Vec::with_capacity(size);
            // One byte more than declared, to see a payload that is longer.
            (&mut d).take(size as u64 + 1).read_to_end(&mut out).map_err(|e| FatbinError::Compression(e.to_string()))?;
            out
        } else {
            lz4_flex::block::decompress(self.payload, size).map_err(|e| FatbinError::Compression(e.to_string()))?
        };
        if out.len() != size {
            return Err(FatbinError::Compression(format!("{} bytes, {size} declared", out.len())));
        }
        Ok(std::borrow::Cow::Owned(out))
    }
}

/// A parsed fatbin: its containers' entries, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatbin<'a> {
    /// Every entry of every container.
    pub entries: Vec<Entry<'a>>,
    /// Containers read.
    pub containers: usize,
    /// Bytes the containers span (padding between them included).
    pub len: usize,
}

fn u16_at(d: &[u8], at: usize) -> Result<u16, FatbinError> {
    Ok(u16::from_le_bytes(bytes(d, at)?))
}

fn u32_at(d: &[u8], at: usize) -> Result<u32, FatbinError> {
    Ok(u32::from_le_bytes(bytes(d, at)?))
}

fn u64_at(d: &[u8], at: usize) -> Result<u64, FatbinError> {
    Ok(u64::from_le_bytes(bytes(d, at)?))
}

fn bytes<const N: usize>(d: &[u8], at: usize) -> Result<[u8; N], FatbinError> {
    let end = at.checked_add(N).ok_or(FatbinError::Truncated("field"))?;
    d.get(at..end).and_then(|s| s.try_into().ok()).ok_or(FatbinError::Truncated("field"))
}

/// The container at the start of `d`: its entries and its length.
fn container(d: &[u8]) -> Result<(Vec<Entry<'_>>, usize), FatbinError> {
    let header = u16_at(d, 6)? as usize;
    let size = usize::try_from(u64_at(d, 8)?).map_err(|_| FatbinError::Truncated("container"))?;
    if header < HEADER_LEN {
        return Err(FatbinError::Malformed("container header size"));
    }
    let end = header.checked_add(size).filter(|&e| e <= d.len()).ok_or(FatbinError::Truncated("container"))?;
    let mut entries = Vec::new();
    let mut at = header;
    while at < end {
        let eh = u32_at(d, at + 4)? as usize;
        // The payload padded to 8 bytes; the stored (compressed) size when
        // the payload is compressed, else 0 (nvcc 13) or the payload's size.
        let padded = u32_at(d, at + 8)? as usize;
        let stored = u32_at(d, at + 16)? as usize;
        if eh < ENTRY_HEADER_LEN || stored > padded {
            return Err(FatbinError::Malformed("entry header"));
        }
        let data = at.checked_add(eh).ok_or(FatbinError::Truncated("entry"))?;
        let next = data.checked_add(padded).filter(|&n| n <= end).ok_or(FatbinError::Truncated("entry"))?;
        let flags = u64_at(d, at + 40)?;
        let compressed = flags & (FLAG_LZ4 | FLAG_ZSTD) != 0;
        let len = if compressed || stored != 0 { stored } else { padded };
        entries.push(Entry {
            kind: u16_at(d, at)?,
            arch: u32_at(d, at + 28)?,
            flags,
            size: if compressed { u64_at(d, at + 56)? } else { len as u64 },
            payload: &d[data..data + len],
            raw: &d[at..next],
        });
        at = next;
    }
    Ok((entries, end))
}

/// Parses the containers at the start of `image`: the first one, and each
/// that follows it directly (after padding to 8 bytes).
pub fn parse(image: &[u8]) -> Result<Fatbin<'_>, FatbinError> {
    if !is_fatbin(image) {
        return Err(FatbinError::NotFatbin);
    }
    if image.len() > MAX_LEN {
        return Err(FatbinError::Malformed("size"));
    }
    let mut fat = Fatbin { entries: Vec::new(), containers: 0, len: 0 };
    let mut at = 0;
    loop {
        let (entries, len) = container(&image[at..])?;
        fat.entries.extend(entries);
        fat.containers += 1;
        fat.len = at + len;
        at = (at + len).next_multiple_of(8);
        if !image.get(at..).is_some_and(|rest| rest.starts_with(&MAGIC.to_le_bytes())) {
            return Ok(fat);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{container, entry};
    use proptest::prelude::*;

    #[test]
    fn containers_back_to_back_are_one_fatbin() {
        let a = container(&[entry(KIND_ELF, 90, 0, 3, b"one"), entry(KIND_PTX, 90, 0, 5, b"two 2")]);
        let b = container(&[entry(KIND_ELF, 80, 0, 5, b"three")]);
        let mut img = [a.clone(), b.clone()].concat();
        img.extend_from_slice(b"trailing bytes that are no container");
        let f = parse(&img).unwrap();
        assert_eq!((f.containers, f.len, f.entries.len()), (2, a.len() + b.len(), 3));
        // Uncompressed payloads are stored padded to 8 bytes.
        let p: Vec<&[u8]> = f.entries.iter().map(|e| e.payload).collect();
        assert_eq!(p, vec![&b"one\0\0\0\0\0"[..], b"two 2\0\0\0", b"three\0\0\0"]);
        assert_eq!(f.entries[1].raw.len(), 64 + 8, "header and payload padded to 8");
    }

    #[test]
    fn compressed_payloads_inflate_to_their_declared_size() {
        let text = b"PTX text, repeated, repeated, repeated, repeated".repeat(20);
        let zstd = ruzstd::encoding::compress_to_vec(&text[..], ruzstd::encoding::CompressionLevel::Fastest);
        let lz4 = lz4_flex::block::compress(&text);
        let img = container(&[
            entry(KIND_PTX, 90, FLAG_ZSTD, text.len() as u64, &zstd),
            entry(KIND_PTX, 80, FLAG_LZ4, text.len() as u64, &lz4),
            entry(KIND_PTX, 75, FLAG_ZSTD, text.len() as u64 + 1, &zstd),
            entry(KIND_PTX, 70, FLAG_LZ4, 1 << 40, &lz4),
        ]);
        let f = parse(&img).unwrap();
        assert_eq!(&*f.entries[0].decompressed().unwrap(), &text[..]);
        assert_eq!(&*f.entries[1].decompressed().unwrap(), &text[..]);
        assert!(matches!(f.entries[2].decompressed(), Err(FatbinError::Compression(_))), "shorter than declared");
        assert_eq!(f.entries[3].decompressed(), Err(FatbinError::Malformed("decompressed size")));
    }

    #[test]
    fn lies_about_sizes_are_refused() {
        let good = container(&[entry(KIND_ELF, 90, 0, 3, b"one")]);
        let mut big = good.clone();
        big[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(parse(&big), Err(FatbinError::Truncated("container")));
        let mut entry_big = good.clone();
        entry_big[16 + 8..16 + 12].copy_from_slice(&4096u32.to_le_bytes());
        assert_eq!(parse(&entry_big), Err(FatbinError::Truncated("entry")));
        let mut short_header = good.clone();
        short_header[16 + 4..16 + 8].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(parse(&short_header), Err(FatbinError::Malformed("entry header")));
        assert_eq!(parse(&good[..good.len() - 1]), Err(FatbinError::Truncated("container")));
        assert_eq!(parse(b"\x7fELF"), Err(FatbinError::NotFatbin));
    }

    proptest! {
        /// Arbitrary bytes after a container magic never panic.
        #[test]
        fn random_bytes_never_panic(rest in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut img = MAGIC.to_le_bytes().to_vec();
            img.extend(rest);
            if let Ok(f) = parse(&img) {
                for e in &f.entries {
                    let _ = e.decompressed();
                }
                let _ = crate::select(&img, 90);
            }
        }

        /// Any byte of a real layout changed never panics, and what parses
        /// stays inside the buffer.
        #[test]
        fn mutated_fatbins_never_panic(at in 0usize..400, byte in any::<u8>()) {
            let lz4 = lz4_flex::block::compress(&[7u8; 300]);
            let mut img = [
                container(&[entry(KIND_ELF, 90, FLAG_LZ4, 300, &lz4), entry(KIND_PTX, 90, 0, 9, b"ptx 9.0 .")]),
                container(&[entry(KIND_ELF, 80, 0, 4, b"elf!")]),
            ]
            .concat();
            let at = at % img.len();
            img[at] = byte;
            if let Ok(f) = parse(&img) {
                prop_assert!(f.len <= img.len());
                for e in &f.entries {
                    let _ = e.decompressed();
                }
            }
        }
    }
}
