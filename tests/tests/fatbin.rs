//! Fatbins as nvcc 13 builds them (from NVIDIA's PyPI wheels, fetched by
//! `tests/all.sh`): several architectures, compressed entries, and several
//! containers in one program. Parsed with `pvgpu-fatbin`, reduced to what
//! one GPU runs, decompressed, and read by the backend's test double.

use object::{Object, ObjectSection};
use pvgpu_tests::TempDir;
use pvgpu_tests::dropin::cuda_home;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const ARCHS: [&str; 4] =
    ["arch=compute_75,code=sm_75", "arch=compute_80,code=sm_80", "arch=compute_90,code=[sm_90,compute_90]", "arch=compute_86,code=sm_86"];

fn kernels() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/kernels.cu")
}

/// Runs nvcc with `args`, asserting it succeeds.
fn nvcc(args: &[&str], out: &Path, srcs: &[&Path]) -> Vec<u8> {
    let status = Command::new(cuda_home().join("bin/nvcc")).args(args).arg("-o").arg(out).args(srcs).status().expect("cannot run nvcc");
    assert!(status.success(), "nvcc {args:?} failed");
    std::fs::read(out).unwrap()
}

struct Built {
    _dir: TempDir,
    /// Four architectures, nvcc's default compression (PTX compressed).
    multi: Vec<u8>,
    /// The same, every entry compressed.
    all_compressed: Vec<u8>,
    /// The sm_90 cubin alone.
    cubin: Vec<u8>,
    /// The `.nv_fatbin` section of a program of two translation units.
    section: Vec<u8>,
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = TempDir::new("fatbins");
        let gencode: Vec<&str> = ARCHS.iter().flat_map(|a| ["-gencode", a]).collect();
        let with = |extra: &[&'static str]| [&["-fatbin"][..], extra, &gencode].concat();
        let multi = nvcc(&with(&[]), &dir.0.join("multi.fatbin"), &[&kernels()]);
        let all_compressed = nvcc(&with(&["-Xfatbin", "-compress-all"]), &dir.0.join("all.fatbin"), &[&kernels()]);
        let cubin = nvcc(&["-cubin", "-arch=sm_90"], &dir.0.join("k.cubin"), &[&kernels()]);
        let second = Path::new(env!("CARGO_MANIFEST_DIR")).join("fatbin/second.cu");
        let prog = nvcc(&["-gencode", "arch=compute_90,code=sm_90"], &dir.0.join("prog"), &[&kernels(), &second]);
        let file = object::File::parse(&*prog).expect("an ELF program");
        let section = file.section_by_name(".nv_fatbin").expect("a .nv_fatbin section").data().unwrap().to_vec();
        Built { _dir: dir, multi, all_compressed, cubin, section }
    })
}

#[test]
fn every_architecture_is_found_and_cubins_are_as_nvcc_writes_them() {
    let b = built();
    let f = pvgpu_fatbin::parse(&b.multi).unwrap();
    let mut elf: Vec<u32> = f.entries.iter().filter(|e| e.is_elf()).map(|e| e.arch).collect();
    elf.sort();
    assert_eq!(elf, vec![75, 80, 86, 90]);
    assert_eq!(f.entries.iter().filter(|e| e.is_ptx()).map(|e| e.arch).collect::<Vec<_>>(), vec![90]);
    let sm90 = f.entries.iter().find(|e| e.is_elf() && e.arch == 90).unwrap();
    assert_eq!(&*sm90.decompressed().unwrap(), &b.cubin[..], "the fatbin's sm_90 cubin is nvcc -cubin's");
    let ptx = f.entries.iter().find(|e| e.is_ptx()).unwrap().decompressed().unwrap();
    assert!(String::from_utf8_lossy(&ptx).contains(".entry saxpy"), "PTX inflates to text");
}

#[test]
fn compressed_cubins_inflate_to_the_same_bytes() {
    let b = built();
    let plain = pvgpu_fatbin::parse(&b.multi).unwrap();
    let packed = pvgpu_fatbin::parse(&b.all_compressed).unwrap();
    let mut checked = 0;
    for e in packed.entries.iter().filter(|e| e.is_elf()) {
        assert!(e.compressed(), "sm_{} stored compressed", e.arch);
        let twin = plain.entries.iter().find(|p| p.is_elf() && p.arch == e.arch).unwrap();
        assert_eq!(e.decompressed().unwrap(), twin.decompressed().unwrap(), "sm_{}", e.arch);
        checked += 1;
    }
    assert_eq!(checked, 4);
    assert!(b.all_compressed.len() < b.multi.len());
}

#[test]
fn a_program_holds_one_container_per_translation_unit() {
    let f = pvgpu_fatbin::parse(&built().section).unwrap();
    // Ours two, and nvcc adds one of its own.
    assert!(f.containers >= 2, "{} containers", f.containers);
    let kernels: Vec<_> = f.entries.iter().filter_map(|e| pvgpu_backend::exec::image::parse(&e.decompressed().unwrap()).ok()).collect();
    assert!(kernels.iter().any(|k| k.entries.contains_key("saxpy")));
    assert!(kernels.iter().any(|k| k.entries.contains_key("pvgpu_second")));
}

#[test]
fn a_gpu_gets_only_what_it_runs_and_the_test_double_reads_it() {
    let b = built();
    for (image, what) in [(&b.multi, "default"), (&b.all_compressed, "all compressed")] {
        for (cc, arch, elf) in [(90, 90, true), (89, 86, true), (80, 80, true), (75, 75, true), (120, 90, false)] {
            let chosen = pvgpu_fatbin::select(image, cc).unwrap_or_else(|| panic!("{what}: something for {cc}"));
            let f = pvgpu_fatbin::parse(&chosen).unwrap();
            assert_eq!(f.entries.len(), 1, "{what}: one entry for {cc}");
            assert_eq!((f.entries[0].arch, f.entries[0].is_elf()), (arch, elf), "{what}: for {cc}");
            assert!(chosen.len() < image.len() / 2);
            // The backend's test double reads it (decompressing as needed).
            let info = pvgpu_backend::exec::image::parse(&chosen).unwrap();
            assert_eq!(info.entries["saxpy"].params.len(), 4, "{what}: for {cc}");
            pvgpu_backend::exec::image::check_bounds(&chosen).unwrap();
        }
        assert_eq!(pvgpu_fatbin::select(image, 70), None, "nothing runs on 7.0");
    }
    // Two containers become one.
    let both = pvgpu_fatbin::select(&b.section, 90);
    assert_eq!(both.map(|v| pvgpu_fatbin::parse(&v).unwrap().containers), Some(1));
}
