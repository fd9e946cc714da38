#!/usr/bin/env bash
# A hostile guest on the GPU (tests/gpu/hostile.py), natively and through
# pvgpu with a quota: what it may take, and whether a session with a kernel
# that never ends is ended when its program is gone.
#
#   tests/gpu/hostile.sh BIN_DIR OUT_DIR
set -u
bin=$(realpath "$1")
out=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
mkdir -p "$out" "$work/lib"
cp "$bin/libpvgpu_cuda.so" "$work/lib/libcuda.so.1"
cat > "$work/big.cu" <<'CU'
__device__ char big[6ull << 30];
extern "C" __global__ void touch(int i) { big[i] = 1; }
CU
cat > "$work/forever.cu" <<'CU'
extern "C" __global__ void forever(volatile int *flag) { while (*flag == 0) {} }
CU
nvcc -cubin -arch=sm_90 -o "$work/big.cubin" "$work/big.cu" 2> "$out/nvcc.txt"
nvcc -ptx -arch=sm_90 -o "$work/k.ptx" "$work/forever.cu" 2>> "$out/nvcc.txt"
{
  echo "== native"
  timeout 120 python3 "$root/tests/gpu/hostile.py" quota "$work/big.cubin" 2>&1 | tail -12
  echo "== pvgpu, --mem-quota 4G"
  "$bin/pvgpu-backend" --listen "local:$work/pv.sock" --executor cuda --mem-quota 4G --end-grace 3 --image-cache off \
    > "$work/backend.log" 2>&1 &
  b=$!
  for _ in $(seq 50); do [ -S "$work/pv.sock" ] && break; sleep 0.2; done
  LD_LIBRARY_PATH=$work/lib PVGPU_BACKEND=local:$work/pv.sock timeout 120 python3 "$root/tests/gpu/hostile.py" quota "$work/big.cubin" 2>&1 | tail -12
  echo "== pvgpu, a kernel that never ends, then the program exits"
  LD_LIBRARY_PATH=$work/lib PVGPU_BACKEND=local:$work/pv.sock timeout 60 python3 "$root/tests/gpu/hostile.py" stuck "$work/k.ptx" 2>&1 | tail -3
  w=$(pgrep -f "pvgpu-backend worker" | head -1)
  [ -n "$w" ] && echo "worker $w: $(grep -E '^(Seccomp|NoNewPrivs):' /proc/$w/status | tr '\n\t' '  ')"
  t0=$(date +%s%N)
  for i in $(seq 40); do
    n=$(pgrep -fc "pvgpu-backend worker" || true)
    apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c . || true)
    echo "t+$(( ($(date +%s%N) - t0) / 1000000 ))ms workers=$n gpu_processes=$apps used_mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)"
    [ "$n" = 0 ] && [ "$apps" = 0 ] && break
    sleep 0.5
  done
  kill $b; wait $b 2> /dev/null
  echo "== backend log (warnings)"
  grep -E "WARN|ERROR" "$work/backend.log" | sed 's/\x1b\[[0-9;]*m//g' | tail -8
} > "$out/hostile.txt" 2>&1
cat "$out/hostile.txt"
