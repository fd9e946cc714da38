#!/usr/bin/env bash
# On a GPU machine: builds the test programs of tests/programs (and the CI
# runtime-API program) with the machine's nvcc, static and shared cudart,
# and runs each natively, then through pvgpu's drop-in libcuda over the
# local transport and over TCP against a pvgpu-backend on the GPU, and
# compares their standard output with the native run's.
#
#   [BACKEND_ARGS="--device-memory placed"] tests/gpu/compare.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds release builds of pvgpu-backend and libpvgpu_cuda.so.
# OUT_DIR receives summary.md (one row per program and cudart), and
# outputs.tar.gz (every run's output and the backend's log).
set -u
bin=$(realpath "$1")
mkdir -p "$2"
out=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$work/lib" "$work/bin" "$work/runs"
cp "$bin/libpvgpu_cuda.so" "$work/lib/libcuda.so.1"
ln -sf libcuda.so.1 "$work/lib/libcuda.so"

# Build everything at once.
cd "$root/tests/programs"
arch="-gencode arch=compute_90,code=[sm_90,compute_90]"
build() { # name, nvcc args...
  local name=$1; shift
  if ! nvcc "$@" > "$work/runs/build-$name.log" 2>&1; then echo "build of $name failed" >> "$work/runs/build-failures.txt"; fi
}
for src in *.cu; do
  p=${src%.cu}
  libs=(); [ "$p" = cufft ] && libs=(-lcufft)
  build "$p-static" -O2 $arch -o "$work/bin/$p-static" "$src" "${libs[@]}" &
  build "$p-shared" -O2 $arch -cudart shared -o "$work/bin/$p-shared" "$src" "${libs[@]}" &
done
build cufft-static_cufft -O2 $arch -o "$work/bin/cufft-static_cufft" cufft.cu -lcufft_static -lculibos &
build runtime_api-static -O2 $arch -o "$work/bin/runtime_api-static" "$root/tests/runtime/runtime_api.cu" &
build runtime_api-shared -O2 $arch -cudart shared -o "$work/bin/runtime_api-shared" "$root/tests/runtime/runtime_api.cu" &
build graphs-static -O2 $arch -o "$work/bin/graphs-static" "$root/tests/runtime/graphs.cu" &
build graphs-shared -O2 $arch -cudart shared -o "$work/bin/graphs-shared" "$root/tests/runtime/graphs.cu" &
build mapped-static -O2 $arch -o "$work/bin/mapped-static" "$root/tests/runtime/mapped.cu" &
for p in graph_memory graph_host_memory graph_conditional graph_user_objects graph_nodes mem_pool registered; do
  build "$p-static" -O2 $arch -o "$work/bin/$p-static" "$root/tests/runtime/$p.cu" &
  build "$p-shared" -O2 $arch -cudart shared -o "$work/bin/$p-shared" "$root/tests/runtime/$p.cu" &
done
build mapped-shared -O2 $arch -cudart shared -o "$work/bin/mapped-shared" "$root/tests/runtime/mapped.cu" &
build graph_device_launch-static -O2 $arch -rdc=true -o "$work/bin/graph_device_launch-static" "$root/tests/runtime/graph_device_launch.cu" -lcudadevrt &
build graph_device_launch-shared -O2 $arch -rdc=true -cudart shared -o "$work/bin/graph_device_launch-shared" "$root/tests/runtime/graph_device_launch.cu" -lcudadevrt &
build graphs_driver-driver -O2 -o "$work/bin/graphs_driver-driver" graphs_driver.cpp -lcuda &
build nvrtc_saxpy-driver -O2 -o "$work/bin/nvrtc_saxpy-driver" nvrtc_saxpy.cpp -lnvrtc -lcuda &
build ptx_link-driver -O2 -o "$work/bin/ptx_link-driver" ptx_link.cpp -lnvrtc -lcuda &
build devrt_link-driver -O2 -o "$work/bin/devrt_link-driver" devrt_link.cpp -lnvrtc -lcuda &
build managed_global-driver -O2 -o "$work/bin/managed_global-driver" managed_global.cpp -lnvrtc -lcuda &
build driver_api_threads-driver -O2 -o "$work/bin/driver_api_threads-driver" driver_api_threads.cpp -lcuda -lpthread &
build kernels-fatbin -fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75 \
  -o "$work/bin/kernels.fatbin" "$root/tests/kernels/kernels.cu" &
wait

# The backend on the GPU: a worker process per session.
sock=$work/pvgpu.sock
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/tcp.key"
chmod 600 "$work/tcp.key"
"$bin/pvgpu-backend" --listen "local:$sock" --listen tcp:127.0.0.1:7300 --tcp-key "$work/tcp.key" --executor cuda ${BACKEND_ARGS:-} > "$work/runs/backend.log" 2>&1 &
backend=$!
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.2; done

run() { # label, transport, command...
  local label=$1 t=$2; shift 2
  if [ "$t" = native ]; then
    timeout 180 "$@" > "$work/runs/$label.native.out" 2>&1
  else
    local addr="local:$sock"; [ "$t" = tcp ] && addr=tcp:127.0.0.1:7300
    LD_LIBRARY_PATH="$work/lib:$LD_LIBRARY_PATH" PVGPU_BACKEND=$addr PVGPU_TCP_KEY=$work/tcp.key timeout 180 "$@" > "$work/runs/$label.$t.out" 2>&1
  fi
  echo $? > "$work/runs/$label.$t.rc"
}

summary=$out/summary.md
{
  echo "| program | cudart | native | pvgpu local | pvgpu tcp |"
  echo "|---|---|---|---|---|"
} > "$summary"
row() { # label, program, cudart, command...
  local label=$1 prog=$2 kind=$3; shift 3
  for t in native local tcp; do run "$label" "$t" "$@"; done
  local cells=() n_rc
  n_rc=$(cat "$work/runs/$label.native.rc")
  cells+=("$([ "$n_rc" = 0 ] && echo pass || echo "fail (exit $n_rc)")")
  for t in local tcp; do
    local rc; rc=$(cat "$work/runs/$label.$t.rc")
    if [ "$rc" = "$n_rc" ] && cmp -s "$work/runs/$label.native.out" "$work/runs/$label.$t.out"; then
      cells+=("$([ "$rc" = 0 ] && echo "pass, same output" || echo "same failure")")
    else
      local why; why=$(diff "$work/runs/$label.native.out" "$work/runs/$label.$t.out" | grep '^[<>]' | head -2 | tr '\n|' ' /' | cut -c1-160)
      cells+=("FAIL (exit $rc): $why")
    fi
  done
  echo "| $prog | $kind | ${cells[0]} | ${cells[1]} | ${cells[2]} |" >> "$summary"
}
for src in "$root"/tests/programs/*.cu; do
  p=$(basename "${src%.cu}")
  for k in static shared; do [ -x "$work/bin/$p-$k" ] && row "$p-$k" "$p" "$k" "$work/bin/$p-$k"; done
done
[ -x "$work/bin/cufft-static_cufft" ] && row cufft-static_cufft "cufft (static cuFFT)" static "$work/bin/cufft-static_cufft"
for k in static shared; do [ -x "$work/bin/runtime_api-$k" ] && row "runtime_api-$k" runtime_api "$k" "$work/bin/runtime_api-$k"; done
for k in static shared; do [ -x "$work/bin/graphs-$k" ] && row "graphs-$k" graphs "$k" "$work/bin/graphs-$k"; done
for p in graph_memory graph_host_memory graph_conditional graph_user_objects graph_nodes graph_device_launch mem_pool registered; do
  for k in static shared; do [ -x "$work/bin/$p-$k" ] && row "$p-$k" "$p" "$k" "$work/bin/$p-$k"; done
done
for k in static shared; do [ -x "$work/bin/mapped-$k" ] && row "mapped-$k" "mapped (--spin)" "$k" "$work/bin/mapped-$k" --spin; done
[ -x "$work/bin/graphs_driver-driver" ] && row graphs_driver graphs_driver "driver API" "$work/bin/graphs_driver-driver" "$work/bin/kernels.fatbin"
[ -x "$work/bin/nvrtc_saxpy-driver" ] && row nvrtc_saxpy nvrtc_saxpy "driver API" "$work/bin/nvrtc_saxpy-driver"
[ -x "$work/bin/ptx_link-driver" ] && row ptx_link ptx_link "driver API" "$work/bin/ptx_link-driver"
[ -x "$work/bin/devrt_link-driver" ] && row devrt_link devrt_link "driver API" "$work/bin/devrt_link-driver"
[ -x "$work/bin/managed_global-driver" ] && row managed_global managed_global "driver API" "$work/bin/managed_global-driver"
[ -x "$work/bin/driver_api_threads-driver" ] && row driver_api_threads driver_api_threads "driver API" "$work/bin/driver_api_threads-driver" "$work/bin/kernels.fatbin"
row cuda_core cuda_core_demo.py python python3 "$root/tests/programs/cuda_core_demo.py"

kill "$backend" 2> /dev/null; wait "$backend" 2> /dev/null
cp "$work"/runs/build-failures.txt "$out/" 2> /dev/null
tar -czf "$out/outputs.tar.gz" -C "$work" runs
cat "$summary"
