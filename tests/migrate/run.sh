#!/usr/bin/env bash
# A session that leaves its backend process and goes on in another
# (docs/benchmarks.md, "Sessions that move"): a PyTorch training runs through
# the drop-in libcuda against backend A (--device-memory placed); at step
# AT, `pvgpu-ctl checkpoint` detaches its session into a file; A stops; a
# new backend process B starts at the same addresses; `pvgpu-ctl restore`
# hands it the file and the training goes on. Its losses are compared
# with a native run, line by line. On a machine with a GPU and PyTorch:
#
#   BIN=DIR OUT=DIR [STEPS=120] [AT=40] [CASES="train-0 train-1024 symbols"] [HOW="restart migrate"] \
#     bash tests/migrate/run.sh
#
# HOW=restart: A stops and B starts at A's addresses (a backend upgrade);
# HOW=migrate: A and B run side by side and `pvgpu-ctl migrate` moves the
# session from A to B while both run (the program is sent to B's socket);
# HOW=refused: the same, with B's GPU drained, so that B refuses the
# session: A takes it back from its snapshot and the program goes on there.
# MIGRATE_ARGS adds options to pvgpu-ctl migrate (--upload: the snapshot
# goes to B as an upload, as to a backend on another host).
# BACKEND_ARGS adds options to both backends (--worker-pool 1: the target
# has a worker with its driver started waiting for the session). A_GPUS and
# B_GPUS give each its CUDA_VISIBLE_DEVICES (A_GPUS=0 B_GPUS=1: a migration
# from GPU 0 to GPU 1, its memory copied; on one GPU it stays there).
# TRANSPORT=tcp runs the program over TCP (with a key) instead of the local
# transport: page-locked memory kernels reach is then mirrored in the
# backend, and moves with the session.
# train-MB is train.py holding MB more of device memory; graph-MB the same
# training replaying one CUDA graph per step (captured); jax-MB a JAX jit
# training (train_jax.py, XLA's command buffers are CUDA graphs); symbols is
# symbols.cu (built here with nvcc), a program with a __device__ table;
# textures is textures.cu, a program holding CUDA arrays and texture and
# surface objects; pools is pools.cu, a program allocating from memory
# pools of its own; counter is counter.cu, whose kernels keep state in
# __device__ variables the host never names; conditional is conditional.cu,
# replaying graphs with while and if/else nodes; cnn-MB and attn-MB are
# train_real.py (cuDNN convolutions and batch norm in autocast, or
# transformer blocks with fused attention, fused AdamW); jaxconv-MB,
# jaxscan-MB and jaxrejit-MB train_jax.py's other modes (a cuDNN
# convolution network, a lax.scan per step, modules unloaded first);
# cupy is cupy_fft.py (cuFFT, NVRTC-compiled kernels).
# BIN holds release builds of pvgpu-backend, pvgpu-ctl, libpvgpu_cuda.so
# and libpvgpu_nvml.so. The report goes to OUT/migrate.txt, with what
# cudaMalloc and cudaFree cost natively and in either --device-memory mode
# (alloc_cost.cu).
set -u
: "${BIN:?set BIN to the folder of the release binaries}" "${OUT:?set OUT to a folder for the results}"
B=$BIN; S=$(cd "$(dirname "$0")" && pwd); W=$(mktemp -d); mkdir -p $W/lib
cp $B/libpvgpu_cuda.so $W/lib/libcuda.so.1; cp $B/libpvgpu_nvml.so $W/lib/libnvidia-ml.so.1
STEPS=${STEPS:-120}; AT=${AT:-40}; R=$OUT/migrate.txt
CTL="$B/pvgpu-ctl --control unix:$W/pv-ctl.sock"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > $W/tcp.key; chmod 600 $W/tcp.key
# The program's address of backend A (pv) and B (pvb).
addr() { if [ "${TRANSPORT:-local}" = tcp ]; then [ $1 = pv ] && echo tcp:127.0.0.1:7391 || echo tcp:127.0.0.1:7392; else echo local:$W/$1.sock; fi; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $R
backend() { # log name, device memory (placed by default), socket name (pv)
  local n=${3:-pv}
  local port=7391; [ $n = pvb ] && port=7392
  env ${GPUS:+CUDA_VISIBLE_DEVICES=$GPUS} $B/pvgpu-backend --listen local:$W/$n.sock --listen tcp:127.0.0.1:$port --tcp-key $W/tcp.key --executor cuda \
    --control unix:$W/$n-ctl.sock --device-memory ${2:-placed} --image-cache off ${BACKEND_ARGS:-} > $OUT/backend-$1.log 2>&1 & bp=$!
  for _ in $(seq 100); do [ -S $W/$n-ctl.sock ] && [ -S $W/$n.sock ] && break; sleep 0.1; done
}
for how in ${HOW:-restart migrate}; do
for case in ${CASES:-train-0 train-1024 symbols}; do
  case $case in
    train-*) mb=${case#train-}; prog="python3 $S/train.py $STEPS $mb" ;;
    graph-*) mb=${case#graph-}; prog="python3 $S/train.py $STEPS $mb 0.05 graph" ;;
    jax-*) mb=${case#jax-}; prog="env XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_autotune_level=0 python3 $S/train_jax.py $STEPS $mb" ;;
    cnn-*|attn-*) mb=${case#*-}; prog="python3 $S/train_real.py $STEPS ${case%-*} $mb" ;;
    jaxconv-*|jaxscan-*|jaxrejit-*) mb=${case#*-}; mode=${case%-*}; prog="env XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_autotune_level=0 python3 $S/train_jax.py $STEPS $mb 0.05 ${mode#jax}" ;;
    cupy) mb=0; prog="python3 $S/cupy_fft.py $STEPS" ;;
    symbols) mb=0; [ -x $W/symbols ] || nvcc -O2 -o $W/symbols $S/symbols.cu; prog="$W/symbols $STEPS" ;;
    textures) mb=0; [ -x $W/textures ] || nvcc -O2 -o $W/textures $S/textures.cu; prog="$W/textures $STEPS" ;;
    pools) mb=0; [ -x $W/pools ] || nvcc -O2 -o $W/pools $S/pools.cu; prog="$W/pools $STEPS" ;;
    counter) mb=0; [ -x $W/counter ] || nvcc -O2 -o $W/counter $S/counter.cu; prog="$W/counter $STEPS" ;;
    conditional) mb=0; [ -x $W/conditional ] || nvcc -O2 -arch=native -o $W/conditional $S/conditional.cu; prog="$W/conditional $STEPS" ;;
  esac
  $prog > $W/native.txt 2> $W/native.err || { echo "native run failed"; tail -5 $W/native.err; } >> $R
  GPUS=${A_GPUS:-} backend A-$case
  : > $W/pv.txt   # before the program starts: the wait below reads it
  PVGPU_BACKEND=$(addr pv) PVGPU_TCP_KEY=$W/tcp.key PVGPU_RESUME_TIMEOUT_S=120 LD_LIBRARY_PATH=$W/lib $prog > $W/pv.txt 2> $W/pv.err & tp=$!
  while [ $(wc -l < $W/pv.txt) -lt $AT ] && kill -0 $tp 2>/dev/null; do sleep 0.05; done
  sid=$($CTL sessions --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
  if [ $how = restart ]; then
    rm -f $W/snap.pvgpu
    t0=$(date +%s.%N); $CTL checkpoint $sid $W/snap.pvgpu > $W/ckpt.txt 2>&1; rc=$?; t1=$(date +%s.%N)
    at=$(wc -l < $W/pv.txt)
    kill $bp; wait $bp; rm -f $W/pv-ctl.sock $W/pv.sock
    t2=$(date +%s.%N); backend B-$case; t3=$(date +%s.%N)
    $CTL restore $W/snap.pvgpu > $W/restore.txt 2>&1; rrc=$?; t4=$(date +%s.%N)
    size=$(ls -l $W/snap.pvgpu 2>/dev/null | awk '{print $5}')
  else
    ap=$bp; GPUS=${B_GPUS:-} backend B-$case placed pvb
    [ $how = refused ] && $B/pvgpu-ctl --control unix:$W/pvb-ctl.sock device drain 0 > /dev/null
    t0=$(date +%s.%N); t1=$t0; t2=$t0; t3=$t0
    $CTL migrate $sid --to unix:$W/pvb-ctl.sock --address $(addr pvb) --wait 60 ${MIGRATE_ARGS:-} > $W/ckpt.txt 2>&1; rc=$?; rrc=$rc; t4=$(date +%s.%N)
    # Refused: the session is back at A, which serves the program.
    [ $how = refused ] && { sleep 1; echo "-- sessions at A after the refused move"; $CTL sessions; } >> $W/ckpt.txt 2>&1
    at=$(wc -l < $W/pv.txt); size=0
    : > $W/restore.txt
  fi
  wait $tp; prc=$?; t5=$(date +%s.%N)
  kill $bp ${ap:-}; wait $bp ${ap:-} 2>/dev/null; rm -f $W/*.sock; ap=
  # What the move cost the program, by its own clock: its steps (past its
  # first five, which warm up) longer than twice the usual one and 5 ms,
  # each less the usual step (the skeleton's write, then the pause, which
  # may fall over two steps: the call that waited, then the next call).
  pause=$(grep -h '^step_ms' $W/pv.err | python3 -c '
import sys, statistics
s = [float(l.split()[1]) for l in sys.stdin][5:]
if s:
    m = statistics.median(s)
    x = [v - m for v in s if v > 2 * m + 5]
    print(f"{sum(x):.0f} ms over its usual {m:.1f} ms steps (" + ", ".join(f"+{v:.0f}" for v in x) + ")")
else:
    print("not measured (the program prints no step times)")')
  same=$(diff -q $W/native.txt $W/pv.txt > /dev/null && echo "identical to native" || echo "DIFFERENT from native")
  python3 - "$how $case" "$at" "$rc" "$rrc" "$prc" "$same" $t0 $t1 $t2 $t3 $t4 $t5 "${size:-0}" "${pause:-?}" <<'PY' >> $R
import sys
mb, at, rc, rrc, prc, same = sys.argv[1:7]
t0, t1, t2, t3, t4, t5 = map(float, sys.argv[7:13])
size, pause = sys.argv[13] or "0", sys.argv[14]
if mb.startswith("migrate") or mb.startswith("refused"):
    print(f"{mb}: migrate at line {at} rc {rc} in {t4-t0:.2f} s; program rc {prc}, its steps longer by {pause}; losses {same}")
else:
    print(f"{mb}: checkpoint at line {at} rc {rc} in {t1-t0:.2f} s ({int(size)/2**20:.0f} MiB file); "
          f"backend B up in {t3-t2:.2f} s; restore rc {rrc} in {t4-t3:.2f} s; program rc {prc}, "
          f"rest of the run {t5-t4:.2f} s, its steps longer by {pause}; losses {same}")
PY
  { echo "-- checkpoint"; cat $W/ckpt.txt; echo "-- restore"; cat $W/restore.txt; echo "-- program's last lines"; tail -3 $W/pv.txt; grep -v '^step_ms' $W/pv.err | tail -5
    # With PVGPU_STATS=1, the commands of mirrored memory the program sent.
    grep -i "mirror" $W/pv.err | head -5; } >> $R
done
done
# What an allocation costs in each mode.
nvcc -O2 -o $W/alloc_cost $S/alloc_cost.cu && {
  echo "-- cudaMalloc/cudaFree, native"; $W/alloc_cost
  for mem in driver placed; do
    backend alloc-$mem $mem
    echo "-- through pvgpu (local), --device-memory $mem"; PVGPU_BACKEND=local:$W/pv.sock LD_LIBRARY_PATH=$W/lib $W/alloc_cost
    kill $bp; wait $bp; rm -f $W/*.sock
  done
} >> $R 2>&1
cat $R
