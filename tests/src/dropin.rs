//! Running unmodified programs against the drop-in `libcuda.so.1`: the
//! directory that holds it under the driver's names, NVIDIA's headers and
//! nvcc (fetched from NVIDIA's PyPI wheels by `tests/all.sh`), and running a
//! program against a harness backend.

use crate::{Harness, Transport};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The directory cargo puts this build's artifacts in.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A directory holding the drop-in library as libcuda.so.1 and libcuda.so.
pub fn shim_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let t = target_dir();
        let lib = t.join("libpvgpu_cuda.so");
        assert!(lib.exists(), "{} not found: build it first (cargo build -p pvgpu-libcuda)", lib.display());
        let dir = t.join("pvgpu-libcuda");
        std::fs::create_dir_all(&dir).expect("cannot create the library directory");
        for name in ["libcuda.so.1", "libcuda.so"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("../libpvgpu_cuda.so", &link).expect("cannot link the library");
        }
        dir
    })
    .clone()
}

/// A directory holding the tracing library (`pvgpu-trace`) as
/// libcuda.so.1.
pub fn trace_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let t = target_dir();
        assert!(t.join("libpvgpu_trace.so").exists(), "libpvgpu_trace.so not found: build it first (cargo build -p pvgpu-trace)");
        let dir = t.join("pvgpu-trace");
        std::fs::create_dir_all(&dir).expect("cannot create the library directory");
        let link = dir.join("libcuda.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("../libpvgpu_trace.so", &link).expect("cannot link the library");
        dir
    })
    .clone()
}

/// A directory holding the drop-in NVML library (`pvgpu-nvml`) as
/// libnvidia-ml.so.1. It loads `libcuda.so.1` at `nvmlInit`: put
/// [`shim_dir`] on the library path beside it.
pub fn nvml_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let t = target_dir();
        assert!(t.join("libpvgpu_nvml.so").exists(), "libpvgpu_nvml.so not found: build it first (cargo build -p pvgpu-nvml)");
        let dir = t.join("pvgpu-nvml");
        std::fs::create_dir_all(&dir).expect("cannot create the library directory");
        let link = dir.join("libnvidia-ml.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("../libpvgpu_nvml.so", &link).expect("cannot link the library");
        dir
    })
    .clone()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// NVIDIA's `cuda.h`: `PVGPU_CUDA_INCLUDE`, or `target/cuda-include/`.
pub fn cuda_include() -> PathBuf {
    let dir = std::env::var_os("PVGPU_CUDA_INCLUDE").map(PathBuf::from).unwrap_or_else(|| workspace().join("target/cuda-include"));
    assert!(
        dir.join("cuda.h").exists(),
        "cuda.h not found in {}: run tests/all.sh (it fetches NVIDIA's headers) or set PVGPU_CUDA_INCLUDE",
        dir.display()
    );
    dir
}

/// The CUDA toolkit nvcc runs from: `PVGPU_CUDA_HOME`, or
/// `target/cuda-toolkit/` (what `tests/cuda-toolkit.sh` unpacks).
pub fn cuda_home() -> PathBuf {
    let dir = std::env::var_os("PVGPU_CUDA_HOME").map(PathBuf::from).unwrap_or_else(|| workspace().join("target/cuda-toolkit"));
    assert!(
        dir.join("bin/nvcc").exists(),
        "nvcc not found in {}/bin: run tests/cuda-toolkit.sh (it unpacks NVIDIA's nvcc from PyPI) or set PVGPU_CUDA_HOME",
        dir.display()
    );
    dir
}

/// Runs `cmd` against the drop-in library and `h`'s backend over `t`;
/// returns its output.
pub fn run_program(cmd: &mut Command, h: &Harness, t: Transport) -> Output {
    let mut path = shim_dir().into_os_string();
    path.push(":");
    path.push(cuda_home().join("lib"));
    cmd.env("LD_LIBRARY_PATH", path)
        .env("PVGPU_BACKEND", h.addr(t).to_string())
        .env("PVGPU_TCP_KEY", &h.tcp_key)
        .env_remove("PVGPU_LOG")
        .output()
        .expect("cannot start the program")
}
