//! Choosing what a GPU runs, and writing it as a fatbin of its own.

use crate::parse::{Entry, parse};
use crate::{HEADER_LEN, MAGIC};

/// Whether a cubin for `arch` runs on a GPU of compute capability `cc`
/// (as `major * 10 + minor`): cubins run on their own major version, at
/// their minor version or a later one.
fn cubin_runs(arch: u32, cc: u32) -> bool {
    arch / 10 == cc / 10 && arch % 10 <= cc % 10
}

/// The entries of `entries` a GPU of compute capability `cc` would load:
/// every cubin of the best architecture it runs, or failing that every PTX
/// of the best architecture at or below `cc` (the driver compiles it).
fn chosen<'a>(entries: &[Entry<'a>], cc: u32) -> Vec<Entry<'a>> {
    let best = |f: &dyn Fn(&Entry) -> bool| entries.iter().filter(|e| f(e)).map(|e| e.arch).max();
    if let Some(arch) = best(&|e| e.is_elf() && cubin_runs(e.arch, cc)) {
        return entries.iter().filter(|e| e.is_elf() && e.arch == arch).copied().collect();
    }
    match best(&|e| e.is_ptx() && e.arch <= cc) {
        Some(arch) => entries.iter().filter(|e| e.is_ptx() && e.arch == arch).copied().collect(),
        None => Vec::new(),
    }
}

/// What of `image` a GPU of compute capability `cc` (`major * 10 + minor`)
/// runs, as a new single-container fatbin whose entries are those of
/// `image` byte for byte. `None` when `image` is not a well-formed fatbin,
/// holds nothing for that GPU (the driver then reports it), or holds
/// nothing else (the image is as small as it gets).
pub fn select(image: &[u8], cc: u32) -> Option<Vec<u8>> {
    let fat = parse(image).ok()?;
    let keep = chosen(&fat.entries, cc);
    if keep.is_empty() || keep.len() == fat.entries.len() && fat.containers == 1 {
        return None;
    }
    let body: usize = keep.iter().map(|e| e.raw.len()).sum();
    let mut out = Vec::with_capacity(HEADER_LEN + body);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    // Version 1, header size 16 (as nvcc writes them).
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out.extend_from_slice(&(body as u64).to_le_bytes());
    for e in &keep {
        out.extend_from_slice(e.raw);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{container, entry};
    use crate::{FLAG_LZ4, KIND_ELF, KIND_PTX};

    /// An uncompressed payload without its padding.
    fn trim(p: &[u8]) -> Vec<u8> {
        p.iter().rposition(|&b| b != 0).map_or(Vec::new(), |n| p[..=n].to_vec())
    }

    #[test]
    fn the_best_cubin_wins_then_the_best_ptx() {
        let fat = [
            container(&[entry(KIND_ELF, 75, 0, 5, b"sm_75"), entry(KIND_PTX, 75, 0, 6, b"ptx 75")]),
            container(&[entry(KIND_ELF, 80, 0, 5, b"sm_80"), entry(KIND_ELF, 86, 0, 5, b"sm_86"), entry(KIND_ELF, 90, 0, 5, b"sm_90")]),
            container(&[entry(KIND_PTX, 90, 0, 6, b"ptx 90")]),
        ]
        .concat();
        let payloads = |cc| select(&fat, cc).map(|v| parse(&v).unwrap().entries.iter().map(|e| trim(e.payload)).collect::<Vec<_>>());
        assert_eq!(payloads(90), Some(vec![b"sm_90".to_vec()]));
        assert_eq!(payloads(89), Some(vec![b"sm_86".to_vec()]), "8.9 runs 8.6 cubins");
        assert_eq!(payloads(80), Some(vec![b"sm_80".to_vec()]));
        assert_eq!(payloads(120), Some(vec![b"ptx 90".to_vec()]), "no cubin for 12.0: the newest PTX");
        assert_eq!(payloads(70), None, "nothing for 7.0");
    }

    #[test]
    fn entries_are_copied_byte_for_byte() {
        let lz4 = lz4_flex::block::compress(b"a cubin, compressed, a cubin");
        let fat = container(&[entry(KIND_ELF, 90, FLAG_LZ4, 28, &lz4), entry(KIND_ELF, 80, 0, 3, b"old")]);
        let out = select(&fat, 90).unwrap();
        let e = parse(&out).unwrap().entries[0];
        assert_eq!(e.raw, parse(&fat).unwrap().entries[0].raw);
        assert_eq!(&*e.decompressed().unwrap(), b"a cubin, compressed, a cubin");
    }

    #[test]
    fn a_fatbin_that_holds_only_what_is_needed_is_left_alone() {
        let fat = container(&[entry(KIND_ELF, 90, 0, 5, b"sm_90")]);
        assert_eq!(select(&fat, 90), None);
        assert_eq!(select(b"not a fatbin", 90), None);
    }
}
