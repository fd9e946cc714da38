//! Reading kernel entry points, their parameter layouts, and device globals
//! out of module images, for the host test double (the GPU executor lets the
//! driver do this).
//!
//! - PTX text: `.entry name(.param ...)` declarations and `.global`
//!   variables with scalar initialisers;
//! - cubin (ELF, read with `object`): `FUNC` symbols, the
//!   `EIATTR_KPARAM_INFO` records of each `.nv.info.<name>` section, and
//!   `OBJECT` symbols with their bytes;
//! - fatbin (NVIDIA's container, read with `pvgpu-fatbin`): its first
//!   cubin, else its first PTX, decompressed.
//!
//! All parsing is bounds-checked: a malformed image is an error
//! (`CUDA_ERROR_INVALID_IMAGE` / `CUDA_ERROR_INVALID_PTX`), never a panic.

mod elf;
mod nvinfo;
mod ptx;

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
/// Largest global kept from an image, PTX or cubin: a larger one is not
/// listed (its zeroed bytes would be allocated while parsing).
const MAX_GLOBAL: u64 = 64 << 20;

/// Parses a PTX, cubin or fatbin image.
pub fn parse(image: &[u8]) -> Result<ImageInfo, CuError> {
    if image.starts_with(ELF_MAGIC) {
        return elf::parse(image);
    }
    if pvgpu_fatbin::is_fatbin(image) {
        let fat = pvgpu_fatbin::parse(image).map_err(|_| CuError::INVALID_IMAGE)?;
        let pick = fat.entries.iter().find(|e| e.is_elf()).or_else(|| fat.entries.iter().find(|e| e.is_ptx()));
        let e = pick.ok_or(CuError::NO_BINARY_FOR_GPU)?;
        let payload = e.decompressed().map_err(|_| CuError::INVALID_IMAGE)?;
        return parse(&payload);
    }
    // PTX is NUL-terminated, in a fatbin padded with NULs.
    let text = &image[..image.iter().rposition(|&b| b != 0).map_or(0, |n| n + 1)];
    let text = std::str::from_utf8(text).map_err(|_| CuError::INVALID_IMAGE)?;
    if !text.contains(".version") || !text.contains(".target") {
        return Err(CuError::INVALID_IMAGE);
    }
    ptx::parse(text)
}

/// The names of the variables in global memory an image declares: those
/// a kernel may change (`__constant__` variables are left out: only the
/// host writes them, through a lookup). Of a fatbin, its first cubin's,
/// else its first PTX's.
pub fn writable_globals(image: &[u8]) -> Result<Vec<String>, CuError> {
    if image.starts_with(ELF_MAGIC) {
        return elf::writable_globals(image);
    }
    if pvgpu_fatbin::is_fatbin(image) {
        let fat = pvgpu_fatbin::parse(image).map_err(|_| CuError::INVALID_IMAGE)?;
        let pick = fat.entries.iter().find(|e| e.is_elf()).or_else(|| fat.entries.iter().find(|e| e.is_ptx()));
        let e = pick.ok_or(CuError::NO_BINARY_FOR_GPU)?;
        let payload = e.decompressed().map_err(|_| CuError::INVALID_IMAGE)?;
        return writable_globals(&payload);
    }
    Ok(parse(image)?.globals.into_keys().filter(|n| !n.starts_with('$')).collect())
}

/// Checks the sizes and offsets a driver trusts when it parses a cubin or a
/// fatbin, since it is never told the buffer's length: the fatbin's
/// containers and each entry's extent, that each compressed payload
/// inflates to the size its entry declares, and in each cubin the ELF
/// header's section and program header tables and every section's data.
/// PTX needs no check (the caller NUL-terminates it). Defence in depth:
/// sessions also run in their own processes.
pub fn check_bounds(image: &[u8]) -> Result<(), CuError> {
    if image.starts_with(ELF_MAGIC) {
        return elf::check(image);
    }
    if pvgpu_fatbin::is_fatbin(image) {
        let fat = pvgpu_fatbin::parse(image).map_err(|_| CuError::INVALID_IMAGE)?;
        for e in &fat.entries {
            let payload = e.decompressed().map_err(|_| CuError::INVALID_IMAGE)?;
            if payload.starts_with(ELF_MAGIC) {
                elf::check(&payload)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &[u8] = include_bytes!("../../../../tests/kernels/kernels.ptx");
    const CUBIN: &[u8] = include_bytes!("../../../../tests/kernels/kernels.sm_90.cubin");
    const FATBIN: &[u8] = include_bytes!("../../../../tests/kernels/kernels.fatbin");

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
    fn every_form_names_the_same_writable_globals() {
        for image in [PTX, CUBIN, FATBIN] {
            assert_eq!(writable_globals(image).unwrap(), ["pvgpu_scale"]);
        }
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

    /// Found by the `module_image` fuzz target: a few bytes of PTX
    /// declaring a 4 GB global made the parser allocate its zeroed bytes.
    /// Globals over `MAX_GLOBAL` are not kept, in PTX as in cubins.
    #[test]
    fn huge_globals_are_not_allocated() {
        let info = parse(b".version 8.0\n.target sm_75\n.global .b8 big[4000000000];\n.global .u32 small = 7;\n").unwrap();
        assert!(!info.globals.contains_key("big"));
        assert_eq!(info.globals["small"].init, 7u32.to_le_bytes());
        let at_limit = format!(".version 8.0\n.target sm_75\n.global .b8 edge[{MAX_GLOBAL}];\n");
        assert_eq!(parse(at_limit.as_bytes()).unwrap().globals["edge"].size, MAX_GLOBAL);
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
