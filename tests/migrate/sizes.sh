#!/usr/bin/env bash
# Checkpoint and restore throughput by session size (docs/benchmarks.md,
# "Checkpoints by size"): holder.cu fills SIZE GiB of device memory and
# makes no call while its state is checkpointed and restored, natively
# with the driver's own checkpoint API (cuCheckpointProcessLock,
# ...Checkpoint, ...Restore, ...Unlock, called from another process as
# NVIDIA's cuda-checkpoint does), and through pvgpu: `pvgpu-ctl
# checkpoint` detaches the session into a file in DIR, the backend stops,
# a new one starts and `pvgpu-ctl restore` hands it the file; the program
# takes its session back at its next call. Either way the program then
# digests its memory again and must find it the same.
#
#   BIN=DIR OUT=DIR [SIZES="1 10 40"] [DIR=/dev/shm] [NATIVE=1] [EXECUTOR=cuda] \
#     [MOVES="in-place copied"] [RESTARTS=1] bash tests/migrate/sizes.sh
#
# MOVES adds live migrations of the same program between two backends side
# by side on the GPU (`pvgpu-ctl migrate --wait`): `in-place` keeps its
# device memory on the GPU (handed over to the other backend), `copied`
# moves it through the snapshot (`--copy`); `in-place-cold` and
# `copied-cold` rebuild the session in a fresh worker at the target
# (`--cold`) instead of one prepared from its skeleton; their pauses go to
# OUT/moves.md. RESTARTS=0 skips the checkpoints through a restart.
#
# BIN holds release builds of pvgpu-backend, pvgpu-ctl and
# libpvgpu_cuda.so; NVCC (default nvcc) builds holder.cu; NATIVE=0 skips
# the native runs (EXECUTOR=host runs pvgpu against the host test double).
# The table goes to OUT/sizes.md, the logs beside it.
set -u
: "${BIN:?set BIN to the folder of the release binaries}" "${OUT:?set OUT to a folder for the results}"
S=$(cd "$(dirname "$0")" && pwd); W=$(mktemp -d); mkdir -p $W/lib $OUT
cp $BIN/libpvgpu_cuda.so $W/lib/libcuda.so.1
DIR=${DIR:-/dev/shm}; EXECUTOR=${EXECUTOR:-cuda}; R=$OUT/sizes.md
${NVCC:-nvcc} -O2 -o $W/holder $S/holder.cu ${NVCC_ARGS:-} || exit 1
cat > $W/native_ckpt.py <<'PY'
# The driver's checkpoint API on another process, as cuda-checkpoint calls it.
import ctypes, sys, time
cu = ctypes.CDLL("libcuda.so.1")
pid = ctypes.c_int(int(sys.argv[1]))
assert cu.cuInit(0) == 0
def call(name):
    t = time.time(); r = getattr(cu, name)(pid, None); return r, time.time() - t
out = {n: call(n) for n in ["cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint"]}
out.update({n: call(n) for n in ["cuCheckpointProcessRestore", "cuCheckpointProcessUnlock"]})
bad = [f"{n}={r}" for n, (r, _) in out.items() if r != 0]
print("native", "FAILED " + " ".join(bad) if bad else "ok",
      f"checkpoint {out['cuCheckpointProcessCheckpoint'][1]:.2f} s restore {out['cuCheckpointProcessRestore'][1]:.2f} s")
PY
ready() { for _ in $(seq 1200); do grep -q READY $1 && return 0; kill -0 $2 2>/dev/null || return 1; sleep 0.1; done; return 1; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
rate() { python3 -c "print(f'{$1 / max($2, 1e-9):.2f}')"; }
CTL="$BIN/pvgpu-ctl --control unix:$W/ctl.sock"
# backend LOG [SUFFIX]: a backend at $W/pvSUFFIX.sock, controlled at $W/ctlSUFFIX.sock.
backend() {
  $BIN/pvgpu-backend --listen local:$W/pv${2:-}.sock --executor $EXECUTOR --control unix:$W/ctl${2:-}.sock --device-memory placed \
    --image-cache off > $OUT/backend-$1.log 2>&1 & bp=$!
  for _ in $(seq 100); do [ -S $W/ctl${2:-}.sock ] && [ -S $W/pv${2:-}.sock ] && break; sleep 0.1; done
}
# migrate_one GIB WAY: the holder moved live from one backend to another.
migrate_one() {
  local g=$1 way=$2 flag=; case $way in copied*) flag=--copy ;; esac; case $way in *-cold) flag="$flag --cold" ;; esac
  rm -f $W/go; backend M-$g-$way-a; local a=$bp; backend M-$g-$way-b B; local b=$bp
  PVGPU_BACKEND=local:$W/pv.sock PVGPU_RESUME_TIMEOUT_S=600 LD_LIBRARY_PATH=$W/lib:${HOLDER_LIBS:-} $W/holder $g $W/go > $W/pv.txt 2>&1 & local hp=$!
  local line="| $g | $way | failed | | | | |"
  if ready $W/pv.txt $hp; then
    local sid=$($CTL sessions --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
    $CTL migrate $sid --to unix:$W/ctlB.sock --address local:$W/pvB.sock --dir $DIR --timeout 600 --wait 600 --json $flag > $W/mig.json 2> $W/mig.err & local mp=$!
    # Told to call again once its session has left (not while room is
    # made for a copied snapshot, which it runs through).
    for _ in $(seq 6000); do grep -q "session checkpointed" $OUT/backend-M-$g-$way-a.log && break; kill -0 $mp 2>/dev/null || break; sleep 0.1; done
    touch $W/go; wait $mp; wait $hp
    line=$(python3 - $W/mig.json "$(tail -1 $W/pv.txt | cut -c1-40)" $g $way <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); b = r.get("back") or {}; rb = b.get("rebuild") or {}
# The session's part of the checkpoint, from the call it was taken at
# (older backends: the whole checkpoint, less the room made before it).
ck = r.get("held_seconds") or (r["checkpoint_seconds"] - r["room_seconds"])
rebuild = rb.get("rebuild_seconds", float("nan"))
# The holder is idle while it moves (it calls again once told to): its
# pause is what a program calling at once waits, the move and the rebuild.
pause = ck + r["restore_seconds"] + r["record_seconds"] + rebuild
print(f"| {sys.argv[3]} | {sys.argv[4]} | {r['state_bytes'] / 1e9:.2f} | {r['handed_bytes'] / 1e9:.2f} | {ck:.3f} | {r['restore_seconds']:.3f} | "
      f"{rebuild:.3f} (memory {rb.get('memory_seconds', float('nan')):.3f}{', prepared' if rb.get('prepared') else ''}) | {pause:.3f} | {sys.argv[2]} |")
PY
) || line="| $g | $way | failed: $(cat $W/mig.err | tr '\n' ' ' | cut -c1-200) |"
  fi
  kill $a $b 2>/dev/null; wait $a $b 2>/dev/null; rm -f $W/*.sock $DIR/pvgpu-migrate-*
  { echo "== migrate $g GiB $way"; cat $W/mig.json $W/mig.err $W/pv.txt 2>/dev/null; } >> $OUT/programs.txt
  echo "$line" >> $OUT/moves.md
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU ($EXECUTOR executor)"
  echo; echo "| GiB | native checkpoint (s) | native restore (s) | pvgpu checkpoint (s) | GB/s | pvgpu restore (s) | GB/s | program after |"
  echo "|---|---|---|---|---|---|---|---|"; } > $R
for g in $([ "${RESTARTS:-1}" = 1 ] && echo ${SIZES:-1 10 40}); do
  gb=$(python3 -c "print($g * 2**30 / 1e9)")
  nc=-; nr=-
  if [ "${NATIVE:-1}" = 1 ]; then
    rm -f $W/go; $W/holder $g $W/go > $W/native.txt 2>&1 & hp=$!
    if ready $W/native.txt $hp; then
      python3 $W/native_ckpt.py $hp > $W/native_ckpt.txt 2>&1
      nc=$(awk '/^native ok/ {print $4}' $W/native_ckpt.txt); nr=$(awk '/^native ok/ {print $7}' $W/native_ckpt.txt)
      [ -n "$nc" ] || { nc="failed"; nr=$(cat $W/native_ckpt.txt | tr '\n' ' '); }
    fi
    touch $W/go; wait $hp; echo "native $g GiB: $(tail -1 $W/native.txt)" >> $OUT/programs.txt
  fi
  rm -f $W/go $DIR/pvgpu-sizes.pvgpu; backend A-$g
  PVGPU_BACKEND=local:$W/pv.sock PVGPU_RESUME_TIMEOUT_S=600 LD_LIBRARY_PATH=$W/lib:${HOLDER_LIBS:-} $W/holder $g $W/go > $W/pv.txt 2>&1 & hp=$!
  pc=failed; pr=failed; after=failed
  if ready $W/pv.txt $hp; then
    sid=$($CTL sessions --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
    t0=$(date +%s.%N); $CTL checkpoint $sid $DIR/pvgpu-sizes.pvgpu --timeout 600 > $W/ckpt.txt 2>&1 && pc=$(secs $t0 $(date +%s.%N))
    kill $bp; wait $bp; rm -f $W/*.sock; backend B-$g
    t0=$(date +%s.%N); $CTL restore $DIR/pvgpu-sizes.pvgpu > $W/restore.txt 2>&1; rrc=$?; t1=$(date +%s.%N)
    touch $W/go; wait $hp
    # Restored: the backend's check of the file, then the rebuild in the
    # worker at the program's next call (the backend logs its time).
    rebuilt=$(sed 's/\x1b\[[0-9;]*m//g' $OUT/backend-B-$g.log | grep -o 'session resumed from its checkpoint.*secs=[0-9.]*' | grep -o '[0-9.]*$')
    [ $rrc = 0 ] && [ -n "$rebuilt" ] && grep -q SAME $W/pv.txt && pr=$(python3 -c "print(f'{$t1 - $t0 + $rebuilt:.2f}')")
    after=$(tail -1 $W/pv.txt | cut -c1-40)
  fi
  kill $bp 2>/dev/null; wait $bp 2>/dev/null; rm -f $W/*.sock $DIR/pvgpu-sizes.pvgpu
  { echo "== $g GiB"; cat $W/ckpt.txt $W/restore.txt $W/pv.txt $W/native_ckpt.txt 2>/dev/null; } >> $OUT/programs.txt
  pcr=-; prr=-; [ "$pc" != failed ] && pcr=$(rate $gb $pc); [ "$pr" != failed ] && prr=$(rate $gb $pr)
  echo "| $g | $nc | $nr | $pc | $pcr | $pr | $prr | $after |" >> $R
done
cat $R
if [ -n "${MOVES:-}" ]; then
  { echo "| GiB | memory | copied (GB) | left on the GPU (GB) | checkpoint's pause (s) | restore (s) | target's rebuild (s) | pause: the three and the move recorded (s) | program after |"
    echo "|---|---|---|---|---|---|---|---|---|"; } > $OUT/moves.md
  for g in ${SIZES:-1 10 40}; do for way in $MOVES; do migrate_one $g $way; done; done
  cat $OUT/moves.md
fi
