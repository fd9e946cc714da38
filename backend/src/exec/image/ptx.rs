//! PTX text: `.entry name(.param ...)` declarations give each kernel's
//! parameter layout, and `.global` variables with scalar initialisers give
//! the module's globals.

use super::{Entry, Global, ImageInfo, MAX_GLOBAL};
use crate::exec::Param;
use pvgpu_ring::CuError;

fn type_size(t: &str) -> Option<u32> {
    Some(match t {
        ".u8" | ".s8" | ".b8" | ".pred" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    })
}

/// Parses `[.align N] .type name[count]` into (size, align, name, element
/// size).
fn parse_decl(tokens: &[&str]) -> Result<(u32, u32, String, u32), CuError> {
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
    Ok((size, align, name.to_string(), ty))
}

pub(super) fn parse(text: &str) -> Result<ImageInfo, CuError> {
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
        let (name, entry, close) = entry(rest)?;
        info.entries.insert(name, entry);
        rest = &rest[close..];
    }
    for stmt in clean.split(';') {
        if let Some((name, global)) = global(stmt)? {
            info.globals.insert(name, global);
        }
    }
    Ok(info)
}

/// The kernel whose `.entry` directive `rest` follows: its name, its
/// parameter layout, and where its parameter list closes in `rest`.
fn entry(rest: &str) -> Result<(String, Entry, usize), CuError> {
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
        let (size, align, _, _) = parse_decl(&tokens[1..])?;
        offset = offset.checked_next_multiple_of(align).ok_or(CuError::INVALID_PTX)?;
        params.push(Param { offset, size });
        offset = offset.checked_add(size).ok_or(CuError::INVALID_PTX)?;
    }
    if name.is_empty() {
        return Err(CuError::INVALID_PTX);
    }
    Ok((name, Entry { params }, close))
}

/// The `.global` a statement declares, with its initial bytes; `None` for
/// any other statement, and for globals over [`MAX_GLOBAL`] (as for
/// cubins: their zeroed bytes would be allocated here, up to 4 GiB for a
/// few bytes of text).
fn global(stmt: &str) -> Result<Option<(String, Global)>, CuError> {
    // A declaration is the last line of its statement (the lines before it
    // end without ';': directives, braces).
    let s = stmt.trim().lines().last().unwrap_or("").trim();
    let tokens: Vec<&str> = s.split_whitespace().collect();
    let Some(g) = tokens.iter().position(|t| *t == ".global") else { return Ok(None) };
    if tokens[..g].iter().any(|t| *t != ".visible" && *t != ".extern" && *t != ".weak") {
        return Ok(None);
    }
    let (decl, init) = match tokens.iter().position(|t| *t == "=") {
        Some(eq) => (&tokens[g + 1..eq], Some(tokens[eq + 1..].join(" "))),
        None => (&tokens[g + 1..], None),
    };
    let (size, _, name, elem) = parse_decl(decl)?;
    if u64::from(size) > MAX_GLOBAL {
        return Ok(None);
    }
    let mut bytes = vec![0u8; size as usize];
    match init {
        // An array: `{a, b, c}`, each value `elem` bytes.
        Some(list) if list.starts_with('{') => {
            let values = list.trim_start_matches('{').trim_end_matches('}');
            for (i, v) in values.split(',').filter(|v| !v.trim().is_empty()).enumerate() {
                let v = parse_ptx_scalar(v).ok_or(CuError::INVALID_PTX)?;
                let at = i * elem as usize;
                let dst = bytes.get_mut(at..at + elem as usize).ok_or(CuError::INVALID_PTX)?;
                dst.copy_from_slice(&v.to_le_bytes()[..elem as usize]);
            }
        }
        Some(init) => {
            let v = parse_ptx_scalar(&init).ok_or(CuError::INVALID_PTX)?;
            let n = bytes.len().min(8);
            bytes[..n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        None => {}
    }
    Ok(Some((name, Global { size: size as u64, init: bytes })))
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
