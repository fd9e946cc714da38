#!/usr/bin/env bash
# On a GPU machine: PyTorch, CuPy and JAX (their CUDA graph paths,
# tests/frameworks/graphs.py, and their FFTs, tests/frameworks/fft.py) natively and through pvgpu's
# drop-in libcuda, over the local transport with the backend's image cache
# cold and then warm (a new backend on the same cache), and over TCP (warm).
# Compares each run's check lines with the native run's and keeps the
# timings torch_train.py measures.
#
#   tests/gpu/frameworks.sh BIN_DIR OUT_DIR
#
# PVGPU_WORKLOADS picks workloads (default: torch cupy jax graphs-torch
# graphs-jax graphs-cupy fft-cupy fft-torch fft-jax).
#
# BIN_DIR holds release builds of pvgpu-backend, libpvgpu_cuda.so and
# (optionally) libpvgpu_nvml.so.
# OUT_DIR receives summary.md, timings.json and logs.tar.gz.
set -u
bin=$(realpath "$1")
out=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
mkdir -p "$out" "$work/lib" "$work/logs"
cp "$bin/libpvgpu_cuda.so" "$work/lib/libcuda.so.1"
ln -sf libcuda.so.1 "$work/lib/libcuda.so"
# NVML beside it, as a guest installs both (PyTorch asks NVML too).
[ -f "$bin/libpvgpu_nvml.so" ] && cp "$bin/libpvgpu_nvml.so" "$work/lib/libnvidia-ml.so.1"
cache=$work/image-cache
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/tcp.key"
chmod 600 "$work/tcp.key"

backend() { # start a backend on the shared image cache
  "$bin/pvgpu-backend" --listen "local:$work/pv.sock" --listen tcp:127.0.0.1:7310 --tcp-key "$work/tcp.key" --executor cuda --image-cache "$cache" \
    > "$work/logs/backend-$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do [ -S "$work/pv.sock" ] && break; sleep 0.2; done
}
stop() { kill "$pid"; wait "$pid" 2> /dev/null; rm -f "$work/pv.sock"; }

run() { # label, mode (native|local|tcp), script args...
  local label=$1 mode=$2; shift 2
  local log=$work/logs/$label.$mode
  if [ "$mode" = native ]; then
    timeout 300 python3 "$@" --json "$log.json" > "$log.txt" 2>&1
  else
    local addr="local:$work/pv.sock"; [ "$mode" = tcp ] && addr=tcp:127.0.0.1:7310
    LD_LIBRARY_PATH="$work/lib" PVGPU_BACKEND=$addr PVGPU_TCP_KEY=$work/tcp.key PVGPU_LOG=warn,pvgpu_frontend::client=debug,pvgpu_cuda::image=debug \
      timeout 300 python3 "$@" --json "$log.json" > "$log.txt" 2>&1
  fi
  echo "rc $?" >> "$log.txt"
}

workloads=${PVGPU_WORKLOADS:-torch cupy jax graphs-torch graphs-jax graphs-cupy fft-cupy fft-torch fft-jax}
for w in $workloads; do
  case $w in
    torch) args=("$root/tests/frameworks/torch_train.py") ;;
    graphs-*) args=("$root/tests/frameworks/graphs.py" "${w#graphs-}") ;;
    fft-*) args=("$root/tests/frameworks/fft.py" "${w#fft-}") ;;
    *) args=("$root/tests/frameworks/cupy_jax.py" "$w") ;;
  esac
  run "$w" native "${args[@]}"
  backend "$w-cold"; run "$w" cold "${args[@]}"; stop
  backend "$w-warm"; run "$w" warm "${args[@]}"; run "$w" tcp "${args[@]}"; stop
done

# The check lines ("name: value") of a run.
checks() { sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E '^[A-Za-z0-9 _-]+: ' | grep -v '^timings: '; }
{
  echo "| workload | check | native | pvgpu local, cache cold | pvgpu local, cache warm | pvgpu tcp |"
  echo "|---|---|---|---|---|---|"
  for w in $workloads; do
    checks "$work/logs/$w.native.txt" | while IFS= read -r line; do
      name=${line%%: *}
      cells=("$(echo "${line#*: }" | cut -c1-70)")
      for m in cold warm tcp; do
        other=$(checks "$work/logs/$w.$m.txt" | grep -F "$name: " | head -1)
        if [ "$other" = "$line" ]; then cells+=("same"); else cells+=("DIFFERS: $(echo "${other#*: }" | cut -c1-70)"); fi
      done
      echo "| $w | $name | ${cells[0]} | ${cells[1]} | ${cells[2]} | ${cells[3]} |"
    done
  done
} > "$out/summary.md"
python3 - "$work/logs" > "$out/timings.json" << 'PY'
import glob, json, os, sys
print(json.dumps({os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json")))}, indent=1))
PY
for m in cold warm tcp; do
  cat "$work"/logs/*."$m".txt | sed 's/\x1b\[[0-9;]*m//g' | awk -v m="$m" '
    /module image: sent/ {s++} /module image: named by hash/ {h++}
    END {printf "module images (%s): %d sent, %d named by hash and not sent\n", m, s, h}'
done >> "$out/summary.md"
cat "$work"/logs/*.cold.txt | sed 's/\x1b\[[0-9;]*m//g' | grep "fatbin: sending" | sed -E 's/.* image=([0-9]+) sent=([0-9]+).*/\1 \2/' |
  awk '{i+=$1; s+=$2; n++} END {printf "fatbins: %d loads, %.1f MB in the programs, %.1f MB sent (what the GPU runs)\n", n, i/1e6, s/1e6}' >> "$out/summary.md"
tar -czf "$out/logs.tar.gz" -C "$work" logs
cat "$out/summary.md"
