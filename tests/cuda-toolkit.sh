#!/usr/bin/env bash
# Fetch a minimal CUDA 13.0 toolkit (nvcc + cudart + crt + nvvm + CCCL) from
# NVIDIA's PyPI wheels and unpack it as a normal toolkit tree, so that a plain
# `$PVGPU_CUDA_HOME/bin/nvcc` builds runtime-API programs (static or shared
# cudart, any -gencode, Thrust/CUB) with the system gcc and no extra flags.
#
#   tests/cuda-toolkit.sh                     # install (idempotent), print env
#   eval "$(tests/cuda-toolkit.sh)"           # ... and export it
#   tests/cuda-toolkit.sh --with-cuobjdump    # also cuobjdump + nvdisasm
#
# stdout carries only `export NAME=value` lines (also written to
# $PVGPU_CUDA_HOME/env.sh); everything else goes to stderr, and only on error.
#
# Layout (wheel prefix nvidia/cu13/ stripped):
#   bin/{nvcc,nvcc.profile,ptxas,fatbinary,nvlink,cudafe++,bin2c,crt/}
#   nvvm/bin/cicc, nvvm/libdevice/   include/ (runtime, crt/, cccl/)
#   lib/{libcudart_static.a,libcudart.so.13,libcudadevrt.a,libnvvm.so.4}
# plus two symlinks the wheels lack: lib64 -> lib (the wheel's nvcc.profile
# passes -L$(TOP)/lib64) and lib/libcudart.so -> libcudart.so.13 (for
# `-cudart shared`). No nvcc.profile edit is needed.
#
# cuobjdump/nvdisasm have no 13.0 wheel (first on PyPI with 13.2.51); the 13.2
# cuobjdump reads 13.0 fatbins fine, so --with-cuobjdump pins that one.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${PVGPU_CUDA_TOOLKIT_DIR:-$root/target/cuda-toolkit}

# CUDA 13.0 Update 2. nvidia-cuda-runtime must match the pin in tests/all.sh.
wheels=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-cccl==13.0.85
)
with_objdump=${PVGPU_CUDA_WITH_CUOBJDUMP:-0}
for arg in "$@"; do
  case $arg in
    --with-cuobjdump) with_objdump=1 ;;
    *) echo "cuda-toolkit.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
if [ "$with_objdump" = 1 ]; then
  wheels+=(nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51)
fi

emit_env() {
  {
    echo "export PVGPU_CUDA_HOME=$dest"
    echo "export PVGPU_NVCC=$dest/bin/nvcc"
    if [ -x "$dest/bin/cuobjdump" ]; then
      echo "export PVGPU_CUOBJDUMP=$dest/bin/cuobjdump"
    fi
  } >"$dest/env.sh"
  cat "$dest/env.sh"
}

# Up to date when every wanted wheel is already in the stamp (so a tree built
# with --with-cuobjdump also satisfies a plain call).
have_all=0
if [ -f "$dest/.stamp" ] && [ -x "$dest/bin/nvcc" ]; then
  have_all=1
  for w in "${wheels[@]}"; do
    grep -qxF -- "$w" "$dest/.stamp" || have_all=0
  done
fi
if [ "$have_all" = 1 ]; then
  emit_env
  exit 0
fi

mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.cuda-toolkit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if ! python3 -m pip download --quiet --no-deps --only-binary=:all: \
       --disable-pip-version-check -d "$tmp/whl" "${wheels[@]}" >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "cuda-toolkit.sh: pip download failed" >&2
  exit 1
fi

python3 - "$tmp/whl" "$tmp/tree" <<'EOF'
import glob, os, shutil, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
prefix = "nvidia/cu13/"
for whl in sorted(glob.glob(os.path.join(src, "*.whl"))):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(prefix):
                continue  # *.dist-info
            rel = name[len(prefix):]
            if rel.startswith(".metadata/"):
                continue
            out = os.path.join(dst, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as s, open(out, "wb") as d:
                shutil.copyfileobj(s, d, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(out, 0o755 if mode & 0o111 else 0o644)
EOF

ln -s lib "$tmp/tree/lib64"
ln -s libcudart.so.13 "$tmp/tree/lib/libcudart.so"
for f in bin/nvcc bin/ptxas bin/fatbinary bin/nvlink nvvm/bin/cicc \
         lib/libcudart_static.a include/cuda_runtime.h include/crt/host_config.h \
         include/cccl/thrust/version.h; do
  if [ ! -e "$tmp/tree/$f" ]; then
    echo "cuda-toolkit.sh: unpacked toolkit lacks $f" >&2
    exit 1
  fi
done
if ! "$tmp/tree/bin/nvcc" --version >"$tmp/nvcc.log" 2>&1; then
  cat "$tmp/nvcc.log" >&2
  echo "cuda-toolkit.sh: nvcc does not run" >&2
  exit 1
fi
printf '%s\n' "${wheels[@]}" >"$tmp/tree/.stamp"

rm -rf "$dest"
mv "$tmp/tree" "$dest"
emit_env
