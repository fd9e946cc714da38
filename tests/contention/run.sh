#!/usr/bin/env bash
# Many trainings at once (docs/benchmarks.md, "Many trainings at once"):
# N PyTorch trainings start together, natively and through one pvgpu
# backend (local transport, TCP, and local with --gpu-share weighted), and each reports its wall time and
# step times. On a machine with a GPU and PyTorch:
#
#   BIN=DIR OUT=DIR [COUNTS="1 16"] [MODES="native local tcp local-weighted-20"] \
#     [STEPS=200] bash tests/contention/run.sh
#
# BIN holds release builds of pvgpu-backend, libpvgpu_cuda.so and
# libpvgpu_nvml.so. Results go to OUT/contention.txt; a run that does not
# finish in time leaves the threads' wait channels and the backend's log
# under OUT.
set -u
: "${BIN:?set BIN to the folder of the release binaries}" "${OUT:?set OUT to a folder for the results}"
B=$BIN; S=$(cd "$(dirname "$0")" && pwd); W=$(mktemp -d); mkdir -p $W/lib
cp $B/libpvgpu_cuda.so $W/lib/libcuda.so.1; cp $B/libpvgpu_nvml.so $W/lib/libnvidia-ml.so.1
STEPS=${STEPS:-200}; LIMIT=${LIMIT:-240}; R=$OUT/contention.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $R
# Where every thread of the processes matching $1 waits, with its state.
stacks() {
  for p in $(pgrep -f "$1"); do
    echo "-- $p $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-80)"
    for t in /proc/$p/task/*; do echo "$(basename $t) $(cut -d' ' -f3 $t/stat) $(cat $t/wchan 2>/dev/null) $(cut -d' ' -f14,15 $t/stat)"; done | sort -k2,3 | uniq -c -f1 | head -20
  done
}
# label, count, environment prefix
trainings() {
  local label=$1 n=$2 pre=$3 at=$(python3 -c "import time; print(time.time() + 25 + $n)") pids=()
  for i in $(seq $n); do $pre timeout $LIMIT python3 $S/train.py t$i $at $STEPS > $W/t$i.json 2> $W/t$i.err & pids+=($!); done
  ( sleep $((LIMIT - 20)); { echo "== $label x$n still running after $((LIMIT - 20)) s"; top -b -n1 | head -40; stacks "train.py"; stacks pvgpu-backend; } > $OUT/stall-$label-$n.txt 2>&1 ) & local watch=$!
  local t0=$(date +%s.%N); wait "${pids[@]}"; local t1=$(date +%s.%N); kill $watch 2>/dev/null
  python3 - "$label" $n $t0 $t1 $W/t*.json <<'PY' >> $R
import json, sys
label, n, t0, t1, files = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
rs = []
for f in files[:n]:
    try: rs.append(json.loads(open(f).read().strip().splitlines()[-1]))
    except Exception: pass
if not rs:
    print(f"{label} x{n}: none finished"); sys.exit()
w = max(r["wall_s"] for r in rs); m = sum(r["mean_step_ms"] for r in rs) / len(rs)
print(f"{label} x{n}: {len(rs)}/{n} finished, wall {w:.2f} s (slowest), mean step {m:.2f} ms, "
      f"worst mean step {max(r['mean_step_ms'] for r in rs):.2f} ms, worst step {max(r['max_step_ms'] for r in rs):.1f} ms")
PY
  for i in $(seq $n); do tail -2 $W/t$i.err; done > $OUT/progress-$label-$n.txt; rm -f $W/t*.json $W/t*.err
}
backend() { # transport address, extra flags
  $B/pvgpu-backend --listen $1 --executor cuda --control unix:$W/ctl.sock --worker-pool ${POOL:-16} ${@:2} > $W/backend.log 2>&1 & bp=$!
  sleep 4
}
# MODES: native, local, tcp, and local-weighted-MS (local with --gpu-share weighted
# and a slice of MS milliseconds)
for n in ${COUNTS:-1 16}; do
  for m in ${MODES:-native local}; do
    case $m in
      native) trainings native $n env; continue ;;
      local) backend local:$W/pv.sock; at="PVGPU_BACKEND=local:$W/pv.sock" ;;
      local-weighted*) backend local:$W/pv.sock --gpu-share weighted --gpu-slice-ms ${m#local-weighted-}; at="PVGPU_BACKEND=local:$W/pv.sock" ;;
      tcp) head -c 32 /dev/urandom > $W/tcp.key; chmod 600 $W/tcp.key
           backend tcp:127.0.0.1:7391 --tcp-key $W/tcp.key --max-sessions-per-peer 16; at="PVGPU_BACKEND=tcp:127.0.0.1:7391 PVGPU_TCP_KEY=$W/tcp.key" ;;
    esac
    trainings $m $n "env LD_LIBRARY_PATH=$W/lib $at"; kill $bp; wait $bp; cp $W/backend.log $OUT/backend-$m-$n.log
  done
done
cat $R
