#!/usr/bin/env bash
# GPU time by tenant share (docs/benchmarks.md): two programs keep the GPU
# busy at once, natively, through pvgpu with the driver's time-slicing, and
# through pvgpu with --gpu-share weighted at shares 3:1 and 1:1; then
# PyTorch natively and at 3:1. On a machine with a GPU, nvcc and PyTorch:
#
#   BIN=DIR OUT=DIR bash tests/gpu-share/run.sh
#
# BIN holds release builds of pvgpu-backend, pvgpu-ctl, libpvgpu_cuda.so
# and libpvgpu_nvml.so (and e2e, the e2e test binary, if the e2e test of
# shares is to run against the GPU too). Results go to OUT/share.txt.
set -u
: "${BIN:?set BIN to the folder of the release binaries}" "${OUT:?set OUT to a folder for the results}"
B=$BIN; S=$(cd "$(dirname "$0")" && pwd); W=$(mktemp -d); mkdir -p $W/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
cp $B/libpvgpu_cuda.so $W/lib/libcuda.so.1; cp $B/libpvgpu_nvml.so $W/lib/libnvidia-ml.so.1
nvcc -O2 -o $W/busy $S/busy.cu || exit 1
SECS=${SECS:-8}
pair() { # label, cmd-prefix-heavy, cmd-prefix-light, program...
  local label=$1 ph=$2 pl=$3; shift 3
  local at=$(python3 -c "import time; print(time.time() + ${LEAD:-4})")
  timeout 90 $ph "$@" heavy $at $SECS > $W/h.txt 2>&1 & local a=$!
  timeout 90 $pl "$@" light $at $SECS > $W/l.txt 2>&1 & local b=$!
  wait $a $b
  echo "== $label"; cat $W/h.txt $W/l.txt
}
alone() { local at=$(python3 -c "import time; print(time.time() + 2)"); echo "== $1 alone"; shift; timeout 60 "$@" alone $at $SECS; }
backend() { # share mode
  rm -rf $W/state; $B/pvgpu-backend --listen tcp:127.0.0.1:7390 --executor cuda --state-dir $W/state \
    --control unix:$W/ctl.sock --worker-pool 2 --gpu-share $1 > $W/backend-$1.log 2>&1 & bp=$!
  sleep 4
  C="$B/pvgpu-ctl --control unix:$W/ctl.sock"
  $C tenant add heavy --share ${2:-3} >/dev/null; $C tenant add light --share ${3:-1} >/dev/null
  rm -f $W/h.key $W/l.key; $C key issue heavy --out $W/h.key >/dev/null; $C key issue light --out $W/l.key >/dev/null
  H="env LD_LIBRARY_PATH=$W/lib PVGPU_BACKEND=tcp:127.0.0.1:7390 PVGPU_TCP_KEY=$W/h.key"
  L="env LD_LIBRARY_PATH=$W/lib PVGPU_BACKEND=tcp:127.0.0.1:7390 PVGPU_TCP_KEY=$W/l.key"
}
stop() { $B/pvgpu-ctl --control unix:$W/ctl.sock tenant list; curl -s --unix-socket $W/ctl.sock http://pvgpu/metrics | grep -E "gpu_turn|gpu_share" ; kill $bp; wait $bp; }
at=$(python3 -c "import time; print(time.time() + 1)"); $W/busy calibrate $at 1 > /dev/null 2> $W/cal.txt
export BUSY_ITERS=$(grep -o "[0-9]* iterations" $W/cal.txt | cut -d" " -f1)
echo "kernel: $BUSY_ITERS iterations (about 2 ms alone)" > $OUT/share.txt
{
alone "native" $W/busy
pair "native, two at once" "env" "env" $W/busy
backend driver; pair "pvgpu tcp, --gpu-share driver" "$H" "$L" $W/busy; stop
backend weighted 3 1; alone "pvgpu tcp weighted" $H $W/busy; pair "pvgpu tcp, weighted 3:1" "$H" "$L" $W/busy; stop
backend weighted 1 1; pair "pvgpu tcp, weighted 1:1" "$H" "$L" $W/busy; stop
LEAD=10 pair "PyTorch native, two at once" "env" "env" python3 $S/torch_busy.py
LEAD=15 backend weighted 3 1; LEAD=15 pair "PyTorch pvgpu tcp, weighted 3:1" "$H" "$L" python3 $S/torch_busy.py; stop
} >> $OUT/share.txt 2>&1
[ -x $B/e2e ] && cd $W && (PVGPU_TEST_EXECUTOR=cuda PVGPU_BACKEND_BIN=$B/pvgpu-backend timeout 200 $B/e2e gpu_share --nocapture > $W/e2e.txt 2>&1; echo "e2e rc $?" >> $W/e2e.txt); grep -E "shares|turns|test result|rc|panicked" $W/e2e.txt > $OUT/e2e.txt
tar -C $W -czf $OUT/logs.tgz backend-driver.log backend-weighted.log e2e.txt 2>/dev/null
cat $OUT/gpu.txt $OUT/share.txt $OUT/e2e.txt
