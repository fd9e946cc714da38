//! Reading kernel entry points, their parameter layouts, and device globals
//! out of module images, for the host test double (the GPU executor lets the
//! driver do this).
//!
//! - PTX text: `.entry name(.param ...)` declarations and `.global`
//!   variables with scalar initialisers;
//! - cubin (ELF): `FUNC` symbols, the `EIATTR_KPARAM_INFO` records of each
//!   `.nv.info.<name>` section, and `OBJECT` symbols with their bytes;
//! - fatbin: the first embedded cubin (uncompressed).
//!
//! All parsing is bounds-checked: a malformed image is an error
//! (`CUDA_ERROR_INVALID_IMAGE` / `CUDA_ERROR_INVALID_PTX`), never a panic.

use super::Param;
use pvgpu_ring::CuError;
use std::collections::HashMap;

/// An entry point of a module image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Parameter layout in declaration order.
    pub params: Vec<Param>,
}

/// A device global of a module image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// Size in bytes.
    pub size: u64,
    /// Initial bytes (zero-filled to `size`).
    pub init: Vec<u8>,
}

/// What the host executor needs from a module image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// Kernels by name.
    pub entries: HashMap<String, Entry>,
    /// Globals by name.
    pub globals: HashMap<String, Global>,
}

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const MAX_GLOBAL: u64 = 64 << 20;

/// Parses a PTX, cubin or fatbin image.
pub fn parse(image: &[u8]) -> Result<ImageInfo, CuError> {
    if image.starts_with(ELF_MAGIC) {
        return parse_elf(image);
    }
    if image.len() >= 4 && u32::from_le_bytes([image[0], image[1], image[2], image[3]]) == FATBIN_MAGIC {
        // The fatbin container holds one or more images; take the first
        // uncompressed cubin.
        return match find(image, ELF_MAGIC) {
            Some(at) => parse_elf(&image[at..]),
            None => Err(CuError::NO_BINARY_FOR_GPU),
        };
    }
    let text = image.strip_suffix(&[0]).unwrap_or(image);
    let text = std::str::from_utf8(text).map_err(|_| CuError::INVALID_IMAGE)?;
    if !text.contains(".version") || !text.contains(".target") {
        return Err(CuError::INVALID_IMAGE);
    }
    parse_ptx(text)
}

/// Checks the sizes and offsets a driver trusts when it parses a cubin or a
/// fatbin, since it is never told the buffer's length: the fatbin's total
/// size and each entry's extent, and the ELF header's section and program
/// header tables and every section's data. PTX needs no check (the caller
/// NUL-terminates it). Defence in depth: sessions also run in their own
/// processes.
pub fn check_bounds(image: &[u8]) -> Result<(), CuError> {
    if image.starts_with(ELF_MAGIC) {
        return check_elf(image);
    }
    if image.len() >= 4 && u32::from_le_bytes([image[0], image[1], image[2], image[3]]) == FATBIN_MAGIC {
        let header = u16_at(image, 6)? as usize;
        let fat = usize::try_from(u64_at(image, 8)?).map_err(|_| CuError::INVALID_IMAGE)?;
        let end = header.checked_add(fat).filter(|&e| e <= image.len() && header >= 16).ok_or(CuError::INVALID_IMAGE)?;
        let mut at = header;
        while at < end {
            let eh = u32_at(image, at + 4)? as usize;
            let payload = usize::try_from(u64_at(image, at + 8)?).map_err(|_| CuError::INVALID_IMAGE)?;
            let next = at.checked_add(eh).and_then(|v| v.checked_add(payload)).ok_or(CuError::INVALID_IMAGE)?;
            if eh < 16 || next > end {
                return Err(CuError::INVALID_IMAGE);
            }
            if image[at + eh..next].starts_with(ELF_MAGIC) {
                check_elf(&image[at + eh..next])?;
            }
            at = next;
        }
        return Ok(());
    }
    Ok(())
}

fn check_elf(d: &[u8]) -> Result<(), CuError> {
    if d.get(4) != Some(&2) || d.get(5) != Some(&1) {
        return Err(CuError::INVALID_IMAGE);
    }
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| CuError::INVALID_IMAGE);
    let table = |off: usize, entsize: usize, num: usize| -> Result<(), CuError> {
        let len = entsize.checked_mul(num).ok_or(CuError::INVALID_IMAGE)?;
        slice(d, off, len).map(|_| ())
    };
    let phoff = to_usize(u64_at(d, 0x20)?)?;
    let shoff = to_usize(u64_at(d, 0x28)?)?;
    let (phentsize, phnum) = (u16_at(d, 0x36)? as usize, u16_at(d, 0x38)? as usize);
    let (shentsize, shnum) = (u16_at(d, 0x3a)? as usize, u16_at(d, 0x3c)? as usize);
    if shentsize < 64 && shnum > 0 || phentsize < 56 && phnum > 0 {
        return Err(CuError::INVALID_IMAGE);
    }
    table(phoff, phentsize, phnum)?;
    table(shoff, shentsize, shnum)?;
    if u16_at(d, 0x3e)? as usize >= shnum.max(1) {
        return Err(CuError::INVALID_IMAGE);
    }
    for i in 0..shnum {
        let b = shoff + i * shentsize;
        if u32_at(d, b + 4)? != SHT_NOBITS {
            slice(d, to_usize(u64_at(d, b + 0x18)?)?, to_usize(u64_at(d, b + 0x20)?)?)?;
        }
    }
    for i in 0..phnum {
        let b = phoff + i * phentsize;
        slice(d, to_usize(u64_at(d, b + 8)?)?, to_usize(u64_at(d, b + 0x20)?)?)?;
    }
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn type_size(t: &str) -> Option<u32> {
    Some(match t {
        ".u8" | ".s8" | ".b8" | ".pred" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    })
}

/// Parses `[.align N] .type name[count]` into (size, align, name).
fn parse_decl(tokens: &[&str]) -> Result<(u32, u32, String), CuError> {
    let mut align = None;
    let mut i = 0;
    if tokens.first() == Some(&".align") {
        align = Some(tokens.get(1).and_then(|a| a.parse::<u32>().ok()).ok_or(CuError::INVALID_PTX)?);
        i = 2;
    }
    // Skip state-space qualifiers such as .ptr .global .align inside params.
    while i < tokens.len() && type_size(tokens[i]).is_none() && tokens[i].starts_with('.') {
        if tokens[i] == ".align" {
            align = Some(tokens.get(i + 1).and_then(|a| a.parse::<u32>().ok()).ok_or(CuError::INVALID_PTX)?);
            i += 2;
        } else {
            i += 1;
        }
    }
    let ty = type_size(tokens.get(i).copied().ok_or(CuError::INVALID_PTX)?).ok_or(CuError::INVALID_PTX)?;
    let decl = tokens.get(i + 1).ok_or(CuError::INVALID_PTX)?;
    let (name, count) = match decl.find('[') {
        Some(b) => {
            let n = decl[b + 1..].trim_end_matches(']').parse::<u32>().map_err(|_| CuError::INVALID_PTX)?;
            (&decl[..b], n)
        }
        None => (&decl[..], 1),
    };
    let size = ty.checked_mul(count).ok_or(CuError::INVALID_PTX)?;
    let align = align.unwrap_or(ty).max(1);
    if !align.is_power_of_two() {
        return Err(CuError::INVALID_PTX);
    }
    Ok((size, align, name.to_string()))
}

fn parse_ptx(text: &str) -> Result<ImageInfo, CuError> {
    // Drop comments.
    let mut clean = String::with_capacity(text.len());
    for line in text.lines() {
        clean.push_str(line.split("//").next().unwrap_or(""));
        clean.push('\n');
    }
    let mut info = ImageInfo::default();
    let mut rest = clean.as_str();
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let open = rest.find('(').ok_or(CuError::INVALID_PTX)?;
        let name = rest[..open].trim().to_string();
        let close = rest[open..].find(')').ok_or(CuError::INVALID_PTX)? + open;
        let mut params = Vec::new();
        let mut offset = 0u32;
        for decl in rest[open + 1..close].split(',') {
            let tokens: Vec<&str> = decl.split_whitespace().collect();
            if tokens.is_empty() {
                continue;
            }
            if tokens[0] != ".param" {
                return Err(CuError::INVALID_PTX);
            }
            let (size, align, _) = parse_decl(&tokens[1..])?;
            offset = offset.checked_next_multiple_of(align).ok_or(CuError::INVALID_PTX)?;
            params.push(Param { offset, size });
            offset = offset.checked_add(size).ok_or(CuError::INVALID_PTX)?;
        }
        if name.is_empty() {
            return Err(CuError::INVALID_PTX);
        }
        info.entries.insert(name, Entry { params });
        rest = &rest[close..];
    }
    for stmt in clean.split(';') {
        // A declaration is the last line of its statement (the lines before
        // it end without ';': directives, braces).
        let s = stmt.trim().lines().last().unwrap_or("").trim();
        let tokens: Vec<&str> = s.split_whitespace().collect();
        let Some(g) = tokens.iter().position(|t| *t == ".global") else { continue };
        if tokens[..g].iter().any(|t| *t != ".visible" && *t != ".extern" && *t != ".weak") {
            continue;
        }
        let (decl, init) = match tokens.iter().position(|t| *t == "=") {
            Some(eq) => (&tokens[g + 1..eq], Some(tokens[eq + 1..].join(" "))),
            None => (&tokens[g + 1..], None),
        };
        let (size, _, name) = parse_decl(decl)?;
        let mut bytes = vec![0u8; size as usize];
        if let Some(init) = init {
            let v = parse_ptx_scalar(&init).ok_or(CuError::INVALID_PTX)?;
            let n = bytes.len().min(8);
            bytes[..n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        info.globals.insert(name, Global { size: size as u64, init: bytes });
    }
    Ok(info)
}

/// Parses a PTX scalar initialiser: `0fXXXXXXXX`, `0dXXXXXXXXXXXXXXXX`,
/// hex or decimal integers. Returns the little-endian bit pattern.
fn parse_ptx_scalar(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0f").or_else(|| s.strip_prefix("0F")) {
        return u32::from_str_radix(h, 16).ok().map(u64::from);
    }
    if let Some(h) = s.strip_prefix("0d").or_else(|| s.strip_prefix("0D")) {
        return u64::from_str_radix(h, 16).ok();
    }
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(h.trim_end_matches('U'), 16).ok();
    }
    s.trim_end_matches('U').parse::<i64>().ok().map(|v| v as u64)
}

fn rd<const N: usize>(d: &[u8], at: usize) -> Result<[u8; N], CuError> {
    d.get(at..at.checked_add(N).ok_or(CuError::INVALID_IMAGE)?).and_then(|s| s.try_into().ok()).ok_or(CuError::INVALID_IMAGE)
}
fn u16_at(d: &[u8], at: usize) -> Result<u16, CuError> {
    rd::<2>(d, at).map(u16::from_le_bytes)
}
fn u32_at(d: &[u8], at: usize) -> Result<u32, CuError> {
    rd::<4>(d, at).map(u32::from_le_bytes)
}
fn u64_at(d: &[u8], at: usize) -> Result<u64, CuError> {
    rd::<8>(d, at).map(u64::from_le_bytes)
}

struct Section {
    name: u32,
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
    entsize: usize,
}

fn slice(d: &[u8], off: usize, len: usize) -> Result<&[u8], CuError> {
    d.get(off..off.checked_add(len).ok_or(CuError::INVALID_IMAGE)?).ok_or(CuError::INVALID_IMAGE)
}

fn cstr(d: &[u8], at: usize) -> Result<&str, CuError> {
    let tail = d.get(at..).ok_or(CuError::INVALID_IMAGE)?;
    let end = tail.iter().position(|&c| c == 0).ok_or(CuError::INVALID_IMAGE)?;
    std::str::from_utf8(&tail[..end]).map_err(|_| CuError::INVALID_IMAGE)
}

const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
const EIFMT_NVAL: u8 = 1;
const EIFMT_BVAL: u8 = 2;
const EIFMT_HVAL: u8 = 3;
const EIFMT_SVAL: u8 = 4;
const EIATTR_KPARAM_INFO: u8 = 0x17;

fn parse_elf(d: &[u8]) -> Result<ImageInfo, CuError> {
    // ELF64, little-endian only (what NVIDIA emits).
    if d.get(4) != Some(&2) || d.get(5) != Some(&1) {
        return Err(CuError::INVALID_IMAGE);
    }
    let shoff = usize::try_from(u64_at(d, 0x28)?).map_err(|_| CuError::INVALID_IMAGE)?;
    let shentsize = u16_at(d, 0x3a)? as usize;
    let shnum = u16_at(d, 0x3c)? as usize;
    let shstrndx = u16_at(d, 0x3e)? as usize;
    if shentsize < 64 || shnum > 4096 {
        return Err(CuError::INVALID_IMAGE);
    }
    let mut secs = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let b = shoff.checked_add(i * shentsize).ok_or(CuError::INVALID_IMAGE)?;
        let to_usize = |v: u64| usize::try_from(v).map_err(|_| CuError::INVALID_IMAGE);
        secs.push(Section {
            name: u32_at(d, b)?,
            kind: u32_at(d, b + 4)?,
            offset: to_usize(u64_at(d, b + 0x18)?)?,
            size: to_usize(u64_at(d, b + 0x20)?)?,
            link: u32_at(d, b + 0x28)?,
            entsize: to_usize(u64_at(d, b + 0x38)?)?,
        });
    }
    let shstr = secs.get(shstrndx).ok_or(CuError::INVALID_IMAGE)?;
    let shstr = slice(d, shstr.offset, shstr.size)?;
    let sec_name = |s: &Section| cstr(shstr, s.name as usize);

    let mut info = ImageInfo::default();
    let symtab = secs.iter().find(|s| s.kind == SHT_SYMTAB).ok_or(CuError::INVALID_IMAGE)?;
    let strtab = secs.get(symtab.link as usize).ok_or(CuError::INVALID_IMAGE)?;
    let strtab = slice(d, strtab.offset, strtab.size)?;
    let syms = slice(d, symtab.offset, symtab.size)?;
    let entsize = symtab.entsize.max(24);
    for sym in syms.chunks_exact(entsize) {
        let name = cstr(strtab, u32::from_le_bytes(rd::<4>(sym, 0)?) as usize)?;
        let st_type = sym[4] & 0xf;
        let shndx = u16::from_le_bytes(rd::<2>(sym, 6)?) as usize;
        let value = u64::from_le_bytes(rd::<8>(sym, 8)?);
        let size = u64::from_le_bytes(rd::<8>(sym, 16)?);
        match st_type {
            STT_FUNC if !name.is_empty() => {
                info.entries.insert(name.to_string(), Entry { params: Vec::new() });
            }
            STT_OBJECT if !name.is_empty() && !name.starts_with('.') && size <= MAX_GLOBAL => {
                let mut init = vec![0u8; size as usize];
                if let Some(sec) = secs.get(shndx) {
                    if sec.kind != SHT_NOBITS {
                        let off = usize::try_from(value).map_err(|_| CuError::INVALID_IMAGE)?;
                        if let Ok(bytes) = slice(d, sec.offset.saturating_add(off), size as usize) {
                            init.copy_from_slice(bytes);
                        }
                    }
                }
                info.globals.insert(name.to_string(), Global { size, init });
            }
            _ => {}
        }
    }
    for s in &secs {
        let Some(func) = sec_name(s)?.strip_prefix(".nv.info.") else { continue };
        let Some(entry) = info.entries.get_mut(func) else { continue };
        let mut params: Vec<(u16, Param)> = Vec::new();
        let b = slice(d, s.offset, s.size)?;
        let mut i = 0;
        while i + 2 <= b.len() {
            let (fmt, attr) = (b[i], b[i + 1]);
            i += 2;
            match fmt {
                EIFMT_NVAL => {}
                EIFMT_BVAL => i += 1,
                EIFMT_HVAL => i += 2,
                EIFMT_SVAL => {
                    let n = u16_at(b, i)? as usize;
                    let pay = slice(b, i + 2, n)?;
                    i += 2 + n;
                    if attr == EIATTR_KPARAM_INFO {
                        let ordinal = u16_at(pay, 4)?;
                        let offset = u16_at(pay, 6)? as u32;
                        let size = (u32_at(pay, 8)? >> 18) & 0x3fff;
                        params.push((ordinal, Param { offset, size }));
                    }
                }
                _ => return Err(CuError::INVALID_IMAGE),
            }
        }
        params.sort_by_key(|(o, _)| *o);
        entry.params = params.into_iter().map(|(_, p)| p).collect();
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &[u8] = include_bytes!("../../../tests/kernels/kernels.ptx");
    const CUBIN: &[u8] = include_bytes!("../../../tests/kernels/kernels.sm_90.cubin");
    const FATBIN: &[u8] = include_bytes!("../../../tests/kernels/kernels.fatbin");

    fn p(offset: u32, size: u32) -> Param {
        Param { offset, size }
    }

    fn check(info: &ImageInfo) {
        assert_eq!(info.entries["mat_sum"].params, vec![p(0, 8), p(8, 8), p(16, 8), p(24, 4)]);
        assert_eq!(info.entries["mixed_params"].params, vec![p(0, 1), p(8, 8), p(16, 2), p(24, 8), p(32, 4), p(40, 8)]);
        assert_eq!(info.entries["pvgpu_null"].params, vec![]);
        assert_eq!(info.entries["saxpy"].params, vec![p(0, 4), p(8, 8), p(16, 8), p(24, 4)]);
        assert_eq!(info.globals["pvgpu_scale"].size, 4);
        assert_eq!(info.globals["pvgpu_scale"].init, 3.0f32.to_le_bytes());
    }

    #[test]
    fn ptx_cubin_and_fatbin_agree() {
        check(&parse(PTX).unwrap());
        check(&parse(CUBIN).unwrap());
        check(&parse(FATBIN).unwrap());
    }

    #[test]
    fn bounds_checks_accept_real_images_and_refuse_lies() {
        check_bounds(PTX).unwrap();
        check_bounds(CUBIN).unwrap();
        check_bounds(FATBIN).unwrap();
        let mut fat = FATBIN.to_vec();
        fat[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(check_bounds(&fat), Err(CuError::INVALID_IMAGE));
        let mut elf = CUBIN.to_vec();
        elf[0x28..0x30].copy_from_slice(&(CUBIN.len() as u64).to_le_bytes());
        assert_eq!(check_bounds(&elf), Err(CuError::INVALID_IMAGE));
        assert_eq!(check_bounds(&CUBIN[..CUBIN.len() - 1]), Err(CuError::INVALID_IMAGE));
    }

    #[test]
    fn struct_params_and_alignment() {
        let ptx =
            b".version 8.0\n.target sm_75\n.visible .entry k(\n .param .u8 a,\n .param .align 16 .b8 s[24],\n .param .u32 c\n)\n{ ret; }\n";
        let info = parse(ptx).unwrap();
        assert_eq!(info.entries["k"].params, vec![p(0, 1), p(16, 24), p(40, 4)]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(parse(b"hello"), Err(CuError::INVALID_IMAGE));
        assert!(parse(b"\x7fELF\x02\x01").is_err());
        let mut cut = CUBIN.to_vec();
        cut.truncate(CUBIN.len() / 2);
        assert!(parse(&cut).is_err());
        assert!(parse(b".version 8.0\n.target sm_75\n.entry k(.param .q32 x) {}").is_err());
    }

    proptest::proptest! {
        #[test]
        fn mutated_images_never_panic(at in 0usize..CUBIN.len(), byte in proptest::prelude::any::<u8>(), which in 0usize..2) {
            let mut img = if which == 0 { CUBIN.to_vec() } else { PTX.to_vec() };
            let at = at % img.len();
            img[at] = byte;
            let _ = parse(&img);
        }
    }
}
