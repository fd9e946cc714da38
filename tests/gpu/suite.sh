#!/usr/bin/env bash
# Everything the GPU machine checks, in one go (device time is scarce):
#   1. the end-to-end suite against the cuda executor, every session in its
#      own worker process;
#   2. the test programs natively and through pvgpu (compare.sh);
#   3. pvgpu-trace in front of NVIDIA's driver, for the CI runtime program
#      and for a first PyTorch operation (what NVIDIA's libraries ask of
#      the driver), and that PyTorch operation through pvgpu.
#
#   tests/gpu/suite.sh BIN_DIR OUT_DIR
#
# BIN_DIR: release builds of pvgpu-backend, libpvgpu_cuda.so,
# libpvgpu_trace.so and the e2e test binary (named e2e).
set -u
bin=$(realpath "$1")
out=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
nvcc --version | tail -2 >> "$out/gpu.txt"

echo "== e2e (cuda executor, process isolation)"
(cd "$root/tests" && PVGPU_TEST_EXECUTOR=cuda PVGPU_TEST_ISOLATION=process PVGPU_BACKEND_BIN="$bin/pvgpu-backend" \
  timeout 300 "$bin/e2e" --test-threads=4 > "$out/e2e.txt" 2>&1; echo "exit $?" >> "$out/e2e.txt")
grep -E "test result|FAILED|panicked" "$out/e2e.txt" | head -20

echo "== programs"
bash "$root/tests/gpu/compare.sh" "$bin" "$out"

echo "== traces"
x=$out/extra
mkdir -p "$x"
trace=$(mktemp -d)
cp "$bin/libpvgpu_trace.so" "$trace/libcuda.so.1"
driver=$(ldconfig -p | awk '/libcuda.so.1 / {print $NF; exit}')
prog=$(mktemp -d)/runtime_api
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$prog" "$root/tests/runtime/runtime_api.cu" 2> /dev/null
LD_LIBRARY_PATH=$trace PVGPU_TRACE_DRIVER=$driver PVGPU_TRACE_OUT=$x/trace-runtime-native.log timeout 120 "$prog" > "$x/trace-runtime-stdout.txt" 2>&1
torch_op='import torch; x = torch.ones(1024, device="cuda"); print("torch", torch.__version__, (x * 2).sum().item())'
LD_LIBRARY_PATH=$trace PVGPU_TRACE_DRIVER=$driver PVGPU_TRACE_OUT=$x/trace-torch-native.log timeout 240 python3 -c "$torch_op" > "$x/torch-native.txt" 2>&1
lib=$(mktemp -d)
cp "$bin/libpvgpu_cuda.so" "$lib/libcuda.so.1"
"$bin/pvgpu-backend" --listen "local:$lib/sock" --executor cuda > "$x/torch-backend.log" 2>&1 &
b=$!
sleep 2
LD_LIBRARY_PATH=$lib PVGPU_BACKEND=local:$lib/sock PVGPU_LOG=warn timeout 240 python3 -c "$torch_op" > "$x/torch-pvgpu.txt" 2>&1
kill $b; wait $b 2> /dev/null
tail -n 3 "$x/torch-native.txt" "$x/torch-pvgpu.txt"
tar -czf "$out/extra.tar.gz" -C "$out" extra && rm -rf "$x"
