# The start the GPU scripts share (sourced: `. "$(dirname "$0")/start.sh"`
# with the script's BIN_DIR and OUT_DIR as $1 and $2): sets bin (the release
# builds), out (the results folder, made), root (the repository), w (a
# work folder) and PATH to the CUDA toolkit, and puts the drop-in
# libcuda.so.1 (and libnvidia-ml.so.1 where built) in $w/lib.
set -u
bin=$(realpath "$1")
mkdir -p "$2"
out=$(realpath "$2")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
w=$(mktemp -d)
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$w/lib"
cp "$bin/libpvgpu_cuda.so" "$w/lib/libcuda.so.1"
if [ -f "$bin/libpvgpu_nvml.so" ]; then cp "$bin/libpvgpu_nvml.so" "$w/lib/libnvidia-ml.so.1"; fi
