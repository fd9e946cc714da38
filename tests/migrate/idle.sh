#!/usr/bin/env bash
# An idle PyTorch program (sleeping 25 s between two halves of a training,
# as a notebook waiting for its user) checkpointed on the GPU: in place
# (--leave-running), then detached through a backend restart. The backend
# asks the program's library for a call (the ring's "leave wanted" byte,
# or over TCP a message of its own), the session leaves, a new backend
# process takes the snapshot, and the program goes on after its sleep. Its
# losses are compared with a native run (docs/benchmarks.md, "A program
# that makes no call"):
#
#   BIN=DIR OUT=DIR [TRANSPORT=local|tcp] bash tests/migrate/idle.sh
#
# BIN holds release builds of pvgpu-backend, pvgpu-ctl, libpvgpu_cuda.so
# and libpvgpu_nvml.so; the report goes to OUT/idle-TRANSPORT/.
set -u
: "${BIN:?set BIN to the folder of the release binaries}" "${OUT:?set OUT to a folder for the results}"
T=${TRANSPORT:-local}
B=$BIN; W=$(mktemp -d); mkdir -p $W/lib $OUT/idle-$T
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > $W/tcp.key; chmod 600 $W/tcp.key
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
backend() { $B/pvgpu-backend --listen local:$W/pv.sock --listen tcp:127.0.0.1:7393 --tcp-key $W/tcp.key --executor cuda --control unix:$W/ctl.sock --device-memory placed --image-cache off > $OUT/idle-$T/backend-$1.log 2>&1 & bp=$!
  for _ in $(seq 100); do [ -S $W/ctl.sock ] && [ -S $W/pv.sock ] && break; sleep 0.1; done; }
backend A
if [ $T = tcp ]; then ADDR=tcp:127.0.0.1:7393; else ADDR=local:$W/pv.sock; fi
PVGPU_BACKEND=$ADDR PVGPU_TCP_KEY=$W/tcp.key PVGPU_RESUME_TIMEOUT_S=120 LD_LIBRARY_PATH=$W/lib python3 $W/idle.py 25 > $W/pv.txt 2> $W/pv.err & tp=$!
while ! grep -q IDLE $W/pv.err && kill -0 $tp 2>/dev/null; do sleep 0.1; done
sleep 2
sid=$($CTL sessions --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
$CTL checkpoint $sid $W/keep.pvgpu --leave-running > $OUT/idle-$T/ckpt-keep.txt 2>&1; echo "leave-running rc=$?" >> $OUT/idle-$T/ckpt-keep.txt
$CTL checkpoint $sid $W/snap.pvgpu > $OUT/idle-$T/ckpt.txt 2>&1; echo "detach rc=$?" >> $OUT/idle-$T/ckpt.txt
kill $bp; wait $bp; rm -f $W/*.sock
backend B
$CTL restore $W/snap.pvgpu > $OUT/idle-$T/restore.txt 2>&1; echo "restore rc=$?" >> $OUT/idle-$T/restore.txt
wait $tp; echo "program rc=$?" > $OUT/idle-$T/result.txt
kill $bp; wait $bp
diff $W/native.txt $W/pv.txt > $OUT/idle-$T/diff.txt && echo "losses identical to native ($(wc -l < $W/pv.txt) steps)" >> $OUT/idle-$T/result.txt || echo "DIFFERENT" >> $OUT/idle-$T/result.txt
cp $W/pv.err $W/native.txt $W/pv.txt $OUT/idle-$T/
cat $OUT/idle-$T/ckpt-keep.txt $OUT/idle-$T/ckpt.txt $OUT/idle-$T/restore.txt $OUT/idle-$T/result.txt; cat $W/pv.err | tail -5
for f in $OUT/idle-$T/backend-*.log; do echo "== $f"; sed 's/\x1b\[[0-9;]*m//g' $f | grep -E "WARN|ERROR|checkpoint|resumed|restor|parked" | tail -6; done
