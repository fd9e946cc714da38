//! PyTorch training steps (`tests/frameworks/torch_train.py --bench-runs`)
//! natively and through the drop-in `libcuda.so.1`, where a Python with
//! PyTorch and a GPU is present.

use crate::report::{Recorder, Sample};
use anyhow::{Context as _, Result, bail};
use pvgpu_tests::TempDir;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What a PyTorch run needs.
pub struct Torch {
    script: PathBuf,
    /// A directory holding the drop-in as `libcuda.so.1` (and NVML's).
    lib: TempDir,
    /// CPUs Python may use (all but the session's).
    cpus: Vec<usize>,
}

fn has_torch() -> bool {
    Command::new("python3")
        .args(["-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Torch {
    /// `None` (with the reason) when PyTorch, the GPU, the drop-in library
    /// or the script is missing.
    pub fn find(dropin: Option<&Path>, cpus: Vec<usize>) -> Result<Torch, String> {
        let script = [Path::new(env!("CARGO_MANIFEST_DIR")).join("frameworks/torch_train.py"), "tests/frameworks/torch_train.py".into()]
            .into_iter()
            .find(|p| p.is_file())
            .ok_or("tests/frameworks/torch_train.py not found (run from the repository)")?;
        let exe_dir = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf));
        let dropin = match dropin {
            Some(p) => p.to_path_buf(),
            None => exe_dir.map(|d| d.join("libpvgpu_cuda.so")).ok_or("cannot tell where the drop-in library is")?,
        };
        if !dropin.is_file() {
            return Err(format!("{} not found (cargo build --release -p pvgpu-libcuda, or --dropin)", dropin.display()));
        }
        if !has_torch() {
            return Err("python3 with PyTorch and a GPU not found".into());
        }
        let lib = TempDir::new("bench-torch-lib");
        let link = |from: &Path, name: &str| std::os::unix::fs::symlink(from, lib.0.join(name)).map_err(|e| e.to_string());
        let dropin = dropin.canonicalize().map_err(|e| e.to_string())?;
        link(&dropin, "libcuda.so.1")?;
        link(&dropin, "libcuda.so")?;
        let nvml = dropin.with_file_name("libpvgpu_nvml.so");
        if nvml.is_file() {
            link(&nvml, "libnvidia-ml.so.1")?;
        }
        Ok(Torch { script, lib, cpus })
    }

    /// Trains each model `runs` times after a warm-up; the mean step time
    /// of each run (ms), MLP and transformer. `backend` is `None` for
    /// native, else a `PVGPU_BACKEND` address.
    pub fn run(&self, backend: Option<(&str, &Path)>, runs: usize, steps: usize) -> Result<(Vec<f64>, Vec<f64>)> {
        let out = TempDir::new("bench-torch");
        let json = out.0.join("timings.json");
        let mut cmd = Command::new("python3");
        cmd.arg(&self.script).args(["--steps", &steps.to_string(), "--bench-runs", &runs.to_string(), "--json"]).arg(&json);
        if let Some((addr, key)) = backend {
            cmd.env("LD_LIBRARY_PATH", &self.lib.0).env("PVGPU_BACKEND", addr).env("PVGPU_TCP_KEY", key);
        }
        let mut set = nix::sched::CpuSet::new();
        for &c in &self.cpus {
            let _ = set.set(c);
        }
        // SAFETY: between fork and exec the closure only makes the
        // sched_setaffinity system call on a set built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
                Ok(())
            })
        };
        let mut child =
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().context("starting python3")?;
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                bail!("torch_train.py ran for more than 10 minutes");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let output = child.wait_with_output()?;
        if !status.success() {
            let err = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            bail!("torch_train.py failed ({status}): {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
        }
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).context("reading torch timings")?)?;
        let list = |k: &str| -> Vec<f64> { v[k].as_array().map(|a| a.iter().filter_map(|x| x.as_f64()).collect()).unwrap_or_default() };
        Ok((list("mlp_step_ms_runs"), list("transformer_step_ms_runs")))
    }
}

/// The training steps natively and over each of `targets` (name, backend
/// address), as samples; what cannot run is said on stderr and skipped.
pub fn steps(
    dropin: Option<&Path>,
    cpus: Vec<usize>,
    targets: &[(&str, String)],
    key: &Path,
    executor: &str,
    runs: usize,
    steps: usize,
) -> Vec<Sample> {
    let t = match Torch::find(dropin, cpus) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("PyTorch training steps skipped: {why}");
            return Vec::new();
        }
    };
    let mut samples = Vec::new();
    let all = std::iter::once(("native", None)).chain(targets.iter().map(|(n, a)| (*n, Some((a.as_str(), key)))));
    for (name, backend) in all {
        eprintln!("PyTorch training steps: {name}");
        match t.run(backend, runs, steps) {
            Ok((mlp, tr)) => {
                for (run, (m, x)) in mlp.iter().zip(&tr).enumerate() {
                    let mut rec = Recorder { samples: Vec::new(), transport: name, executor, run };
                    rec.add("torch_mlp_step_ms", *m, "ms");
                    rec.add("torch_transformer_step_ms", *x, "ms");
                    samples.extend(rec.samples);
                }
            }
            Err(e) => eprintln!("PyTorch over {name} failed: {e:#}"),
        }
    }
    samples
}
