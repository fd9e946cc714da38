//! Cubins are ELF64 little-endian files: the generic ELF work (headers,
//! section and program tables, symbols) is `object`'s; what is NVIDIA's
//! (the `.nv.info` attributes) is in [`super::nvinfo`].

use super::{Entry, Global, ImageInfo, MAX_GLOBAL, nvinfo};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader};
use object::{LittleEndian, Object, ObjectSection, ObjectSymbol, SectionIndex, SymbolKind, elf};
use pvgpu_ring::CuError;

fn invalid<E>(_: E) -> CuError {
    CuError::INVALID_IMAGE
}

/// Checks every extent a driver trusts in a cubin: the section and program
/// header tables, the section-name table, and every section's and
/// segment's bytes must lie inside `d`.
pub fn check(d: &[u8]) -> Result<(), CuError> {
    let e = LittleEndian;
    let header = elf::FileHeader64::<LittleEndian>::parse(d).map_err(invalid)?;
    if !header.is_little_endian() {
        return Err(CuError::INVALID_IMAGE);
    }
    let sections = header.sections(e, d).map_err(invalid)?;
    for s in sections.iter() {
        if s.sh_type(e) != elf::SHT_NOBITS {
            s.data(e, d).map_err(invalid)?;
        }
    }
    if header.shstrndx(e, d).map_err(invalid)? as usize >= sections.len().max(1) {
        return Err(CuError::INVALID_IMAGE);
    }
    for p in header.program_headers(e, d).map_err(invalid)? {
        p.data(e, d).map_err(invalid)?;
    }
    Ok(())
}

/// Kernels with their parameter layouts, and globals with their initial
/// bytes.
pub fn parse(d: &[u8]) -> Result<ImageInfo, CuError> {
    let file = ElfFile64::<LittleEndian>::parse(d).map_err(invalid)?;
    let mut info = ImageInfo::default();
    for sym in file.symbols() {
        let Ok(name) = sym.name() else { continue };
        match sym.kind() {
            SymbolKind::Text if !name.is_empty() => {
                info.entries.insert(name.to_string(), Entry { params: Vec::new() });
            }
            SymbolKind::Data if !name.is_empty() && !name.starts_with('.') && sym.size() <= MAX_GLOBAL => {
                let init = initial_bytes(&file, sym.section_index(), sym.address(), sym.size());
                info.globals.insert(name.to_string(), Global { size: sym.size(), init });
            }
            _ => {}
        }
    }
    for section in file.sections() {
        let Some(func) = section.name().ok().and_then(|n| n.strip_prefix(".nv.info.")) else { continue };
        let Some(entry) = info.entries.get_mut(func) else { continue };
        entry.params = nvinfo::params(section.data().map_err(invalid)?)?;
    }
    Ok(info)
}

/// Data symbols in the `.nv.global` sections (`.nv.global`,
/// `.nv.global.init`): variables in global memory, not constants, nor the
/// compiler's own (`$str`, a `printf` format).
pub fn writable_globals(d: &[u8]) -> Result<Vec<String>, CuError> {
    let file = ElfFile64::<LittleEndian>::parse(d).map_err(invalid)?;
    let in_global = |i: Option<SectionIndex>| {
        i.and_then(|i| file.section_by_index(i).ok()).and_then(|s| s.name().ok().map(|n| n.starts_with(".nv.global"))).unwrap_or(false)
    };
    Ok(file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Data && in_global(s.section_index()))
        .filter_map(|s| s.name().ok().filter(|n| !n.is_empty() && !n.starts_with(['.', '$'])).map(str::to_string))
        .collect())
}

/// A global's bytes in its section (zeros where the section holds none).
fn initial_bytes(file: &ElfFile64<'_, LittleEndian>, section: Option<SectionIndex>, at: u64, size: u64) -> Vec<u8> {
    let mut init = vec![0u8; size as usize];
    let bytes = section.and_then(|i| file.section_by_index(i).ok()).and_then(|s| s.data().ok()).and_then(|data| {
        let start = usize::try_from(at).ok()?;
        data.get(start..start.checked_add(size as usize)?)
    });
    if let Some(b) = bytes {
        init.copy_from_slice(b);
    }
    init
}
