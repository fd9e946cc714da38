#!/usr/bin/env bash
# The whole test suite, as CI runs it (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }

# What a fresh Debian machine lacks, installed here so that this command
# works on one: rustfmt and clippy (when the toolchain came without them),
# libxen-dev (the Xen headers the /dev/xen layer is checked against),
# Chromium with its WebDriver (the dashboard is tested in a real browser),
# Slurm with munge (a one-node cluster runs jobs on pvgpu GPUs), openssl
# (its test reaches the backend over HTTPS with a certificate made for it),
# and rdma-core's libraries with the soft-RoCE provider (the RDMA transport,
# run in the Xen lab's kernel, which has rdma_rxe).
# The Xen lab at the end installs its own (QEMU, busybox, Xen, a kernel).
step "toolchain components and Debian packages the build needs"
for c in clippy rustfmt; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
missing=()
for p in libxen-dev chromium chromium-driver slurm-wlm munge openssl librdmacm1 libibverbs1 ibverbs-providers iproute2; do
  dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

step "Selenium (PyPI), which drives Chromium in the dashboard's test"
selenium=4.27.1
if [ ! -d "target/selenium/selenium-$selenium.dist-info" ]; then
  rm -rf target/selenium
  python3 -m pip install --quiet --disable-pip-version-check --target target/selenium "selenium==$selenium"
fi

step "NVIDIA's cuda.h for the C program the drop-in libcuda is tested with"
if [ ! -f target/cuda-include/cudaProfilerTypedefs.h ]; then
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    nvidia-cuda-runtime==13.0.96 -d "$tmp"
  python3 - "$tmp" <<'PY'
import glob, os, sys, zipfile
whl = glob.glob(os.path.join(sys.argv[1], "nvidia_cuda_runtime-*.whl"))[0]
os.makedirs("target/cuda-include", exist_ok=True)
with zipfile.ZipFile(whl) as z:
    for name in ("cuda.h", "cudaTypedefs.h", "cudaProfilerTypedefs.h"):
        with open(os.path.join("target/cuda-include", name), "wb") as f:
            f.write(z.read("nvidia/cu13/include/" + name))
PY
  rm -rf "$tmp"
fi

step "NVIDIA's nvcc and CUDA runtime (PyPI wheels) for the runtime-API programs the drop-in libcuda is tested with"
eval "$(bash tests/cuda-toolkit.sh)"

step "NVIDIA's NVML bindings for Python (pynvml) that the drop-in libnvidia-ml is tested with"
pynvml=13.615.71
if [ ! -d "target/pynvml/nvidia_ml_py-$pynvml.dist-info" ]; then
  rm -rf target/pynvml
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target target/pynvml "nvidia-ml-py==$pynvml"
fi

step "the driver API's declaration list (cuda-decl/cuda.decl) is what NVIDIA's headers say"
pycparser=3.12
if [ ! -d "target/pycparser/pycparser-$pycparser.dist-info" ]; then
  rm -rf target/pycparser
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target target/pycparser "pycparser==$pycparser"
fi
PYTHONPATH=target/pycparser python3 cuda-decl/gen/gen_decl.py target/cuda-include > target/cuda.decl
diff -u cuda-decl/cuda.decl target/cuda.decl || { echo "cuda-decl/cuda.decl differs from what gen_decl.py makes of the headers" >&2; exit 1; }

step "format and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings

step "build (the drop-in libcuda and the binaries the tests start)"
cargo build --workspace --all-targets

step "unit, property, CLI, end-to-end and drop-in library tests, runtime-API programs built with nvcc (embedded backend, one thread per session)"
cargo test --workspace

step "end-to-end suite again, every session in its own worker process"
PVGPU_TEST_ISOLATION=process cargo test -p pvgpu-tests --test e2e

step "the main job, quick, on the host executor: pvgpu-bench against the embedded backend over local and TCP, programs started afresh for the session start"
target/debug/pvgpu-bench --quick --no-torch --json > target/pvgpu-bench-quick.json
python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["samples"]; m = {(x["transport"], x["metric"]) for x in s}; need = {(t, k) for t in ("local", "tcp") for k in ("null_rtt_p50_us", "htod_gbps_1048576", "matsum_ms", "session_start_ms")}; sys.exit(f"missing: {sorted(need - m)}" if need - m else 0)' target/pvgpu-bench-quick.json

step "Debian packages: built, installed, the service started, an unmodified program through pvgpu-run, purged"
bash tests/packages.sh

step "Slurm: srun --gres=pvgpu:N on a one-node cluster, a tenant, key and GPUs per job, the backend reached over HTTPS"
bash tests/slurm.sh

step "loom model of the ring's index protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p pvgpu-ring --test loom --release

step "fuzzing: the request decoder, the ring under a hostile peer, module images, the local handshake and XenStore replies (${PVGPU_FUZZ_SECONDS:-20} s each)"
bash tests/fuzz.sh

step "two domains on a real Xen (under QEMU): the suite over grant pages and over RDMA (soft-RoCE), xen vs tcp vs rdma, a backend killed and a guest destroyed mid-session"
if [ "${PVGPU_SKIP_XEN_LAB:-0}" = 1 ]; then
  echo "skipped: PVGPU_SKIP_XEN_LAB=1"
elif [ "$(id -u)" != 0 ]; then
  echo "cannot run the Xen lab: it needs root (QEMU, an initramfs, apt for its packages); run: sudo bash tests/xen/pvgpu.sh" >&2
  exit 1
else
  bash tests/xen/pvgpu.sh
fi

step "all tests passed"
