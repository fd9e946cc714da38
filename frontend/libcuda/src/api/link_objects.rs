//! Device code of host objects and libraries given to a link
//! (`CU_JIT_INPUT_OBJECT`, `CU_JIT_INPUT_LIBRARY`, as `libcudadevrt.a` for
//! device-side launches): the fatbins nvcc embeds in each object, found
//! here in the program and linked as fatbins. The host code stays in the
//! program; the backend only ever links device code it can check.

use object::read::archive::ArchiveFile;
use object::{Object, ObjectSection};
use pvgpu_ring::CuError;

/// Sections in which nvcc puts an object's device code: relocatable
/// (`-rdc`) and whole.
const SECTIONS: [&str; 2] = ["__nv_relfatbin", ".nv_fatbin"];

/// The fatbins of a host object (`library` false) or of every object of an
/// `ar` archive. An input that is neither, or holds no device code, is
/// `CUDA_ERROR_INVALID_IMAGE`.
pub(super) fn device_code(bytes: &[u8], library: bool) -> Result<Vec<Vec<u8>>, CuError> {
    let mut out = Vec::new();
    if library {
        let archive = ArchiveFile::parse(bytes).map_err(|_| CuError::INVALID_IMAGE)?;
        for member in archive.members() {
            let data = member.and_then(|m| m.data(bytes)).map_err(|_| CuError::INVALID_IMAGE)?;
            // Members that are not objects (a symbol table) hold no code.
            if let Ok(f) = object::File::parse(data) {
                fatbins_of(&f, &mut out);
            }
        }
    } else {
        let f = object::File::parse(bytes).map_err(|_| CuError::INVALID_IMAGE)?;
        fatbins_of(&f, &mut out);
    }
    if out.is_empty() {
        return Err(CuError::INVALID_IMAGE);
    }
    Ok(out)
}

fn fatbins_of(f: &object::File<'_>, out: &mut Vec<Vec<u8>>) {
    for s in f.sections() {
        if s.name().is_ok_and(|n| SECTIONS.contains(&n))
            && let Ok(d) = s.data()
            && pvgpu_fatbin::is_fatbin(d)
        {
            out.push(d.to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_no_object_or_holds_no_device_code_is_refused() {
        assert_eq!(device_code(b"not an object", false), Err(CuError::INVALID_IMAGE));
        assert_eq!(device_code(b"!<arch>\n", true), Err(CuError::INVALID_IMAGE), "an empty archive");
        assert_eq!(device_code(b"garbage", true), Err(CuError::INVALID_IMAGE));
    }

    /// `libcudadevrt.a` of NVIDIA's toolkit, where `tests/cuda-toolkit.sh`
    /// unpacked it (skipped elsewhere).
    #[test]
    fn the_device_runtime_library_yields_its_fatbins() {
        let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/cuda-toolkit/lib/libcudadevrt.a");
        let Ok(bytes) = std::fs::read(&lib) else {
            eprintln!("skipped: {} is not there (tests/cuda-toolkit.sh unpacks it)", lib.display());
            return;
        };
        let fatbins = device_code(&bytes, true).unwrap();
        assert!(!fatbins.is_empty());
        for f in &fatbins {
            let parsed = pvgpu_fatbin::parse(f).unwrap();
            assert!(parsed.entries.iter().any(|e| e.arch == 90), "device code for sm_90 (the H100) is there");
        }
    }
}
