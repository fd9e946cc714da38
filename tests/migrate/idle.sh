#!/usr/bin/env bash
# An idle PyTorch program (sleeping 25 s between two halves of a training,
# as a notebook waiting for its user) checkpointed on the GPU: in place
# (--leave-running), then detached through a backend restart. The backend
# asks the program's library for a call (the ring's "leave wanted" byte),
# the session leaves, a new backend process takes the snapshot, and the
# program goes on after its sleep. Its losses are compared with a native
# run (docs/benchmarks.md, "A program that makes no call"):
#
#   BIN=DIR OUT=DIR bash tests/migrate/idle.sh
#
# BIN holds release builds of pvgpu-backend, pvgpu-ctl, libpvgpu_cuda.so
# and libpvgpu_nvml.so; the report goes to OUT/idle/.
set -u
: "${BIN:?set BIN to the folder of the release binaries}" "${OUT:?set OUT to a folder for the results}"
B=$BIN; W=$(mktemp -d); mkdir -p $W/lib $OUT/idle
cp $B/libpvgpu_cuda.so $W/lib/libcuda.so.1; cp $B/libpvgpu_nvml.so $W/lib/libnvidia-ml.so.1
cat > $W/idle.py <<'PY'
import sys, time, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.05)
x = torch.randn(1024, 256, device="cuda"); y = torch.randint(0, 10, (1024,), device="cuda")
def steps(n):
    for _ in range(n):
        opt.zero_grad(); loss = torch.nn.functional.cross_entropy(m(x), y); loss.backward(); opt.step()
        print(f"{loss.item():.6f}", flush=True)
steps(20)
print("IDLE", file=sys.stderr, flush=True)
t = time.time(); time.sleep(float(sys.argv[1])); print(f"slept {time.time() - t:.1f}", file=sys.stderr, flush=True)
t = time.time(); steps(20); print(f"second half {time.time() - t:.2f} s", file=sys.stderr, flush=True)
PY
python3 $W/idle.py 0 > $W/native.txt 2>/dev/null
CTL="$B/pvgpu-ctl --control unix:$W/ctl.sock"
backend() { $B/pvgpu-backend --listen local:$W/pv.sock --executor cuda --control unix:$W/ctl.sock --device-memory placed --image-cache off > $OUT/idle/backend-$1.log 2>&1 & bp=$!
  for _ in $(seq 100); do [ -S $W/ctl.sock ] && [ -S $W/pv.sock ] && break; sleep 0.1; done; }
backend A
PVGPU_BACKEND=local:$W/pv.sock PVGPU_RESUME_TIMEOUT_S=120 LD_LIBRARY_PATH=$W/lib python3 $W/idle.py 25 > $W/pv.txt 2> $W/pv.err & tp=$!
while ! grep -q IDLE $W/pv.err && kill -0 $tp 2>/dev/null; do sleep 0.1; done
sleep 2
sid=$($CTL sessions --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
$CTL checkpoint $sid $W/keep.pvgpu --leave-running > $OUT/idle/ckpt-keep.txt 2>&1; echo "leave-running rc=$?" >> $OUT/idle/ckpt-keep.txt
$CTL checkpoint $sid $W/snap.pvgpu > $OUT/idle/ckpt.txt 2>&1; echo "detach rc=$?" >> $OUT/idle/ckpt.txt
kill $bp; wait $bp; rm -f $W/*.sock
backend B
$CTL restore $W/snap.pvgpu > $OUT/idle/restore.txt 2>&1; echo "restore rc=$?" >> $OUT/idle/restore.txt
wait $tp; echo "program rc=$?" > $OUT/idle/result.txt
kill $bp; wait $bp
diff $W/native.txt $W/pv.txt > $OUT/idle/diff.txt && echo "losses identical to native ($(wc -l < $W/pv.txt) steps)" >> $OUT/idle/result.txt || echo "DIFFERENT" >> $OUT/idle/result.txt
cp $W/pv.err $W/native.txt $W/pv.txt $OUT/idle/
cat $OUT/idle/ckpt-keep.txt $OUT/idle/ckpt.txt $OUT/idle/restore.txt $OUT/idle/result.txt; cat $W/pv.err | tail -5
for f in $OUT/idle/backend-*.log; do echo "== $f"; sed 's/\x1b\[[0-9;]*m//g' $f | grep -E "WARN|ERROR|checkpoint|resumed|restor|parked" | tail -6; done
