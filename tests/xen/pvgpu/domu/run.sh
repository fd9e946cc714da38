#!/bin/sh
# pvgpu in the Xen lab, guest side: the end-to-end suite over the Xen
# transport, runtime-API programs built by nvcc on the drop-in libcuda, the
# ring-vs-TCP-vs-RDMA benchmark between the domains, the suite over RDMA
# (soft-RoCE), a program whose
# backend Dom0 kills and restarts, a program whose session Dom0
# checkpoints and restores, a program running while Dom0 saves and
# restores the guest, then a client that Dom0 destroys the guest
# under. Results go to XenStore (data/) for
# Dom0 and to the console.
say() { echo "LAB-PVGPU domU: $* [+$(cut -d' ' -f1 /proc/uptime)s]"; }
cd /lab
. /etc/lab/lib.sh   # lab_rxe
# Every page of a session's region is a grant; allow more than the default
# 1024 so that several sessions run at once.
echo 65536 > /sys/module/xen_gntalloc/parameters/limit

i=0
while ! xenstore-ls device/vgpu >/dev/null 2>&1 && [ $i -lt 240 ]; do usleep 500000; i=$((i + 1)); done
say "vgpu devices: $(xenstore-list device/vgpu 2>/dev/null | tr '\n' ' ')"

echo 7 > /proc/sys/kernel/printk
# Dom0's backend runs a worker process per session (tests that depend on
# it, such as graph memory, must know).
export PVGPU_TEST_EXECUTOR=host PVGPU_TEST_ISOLATION=process RUST_LOG=warn,pvgpu_frontend::transport::xen=debug
# One process per test, so that a test that crashes the process still
# leaves the others' results (and its own output) to read.
R=pass
n=0
failed=""
for t in $(./e2e --list 2>/dev/null | sed -n 's/^\(xen::[a-z0-9_]*\): test$/\1/p'); do
  n=$((n + 1))
  if ./e2e --exact "$t" > "/tmp/e2e-$n.log" 2>&1; then
    echo "test $t ... ok"
  else
    rc=$?
    echo "test $t ... FAILED (rc=$rc)"
    tail -40 "/tmp/e2e-$n.log"
    failed="$failed $t"
  fi
done
# Short programs back to back: each must find grant entries free, so each
# connection must give its pages back when it closes (a grant still mapped
# by the backend when the guest ends it is freed only later, a few at a
# time, and 64 grant frames filled up after about 35 programs).
k=0
while [ $k -lt 60 ]; do
  k=$((k + 1))
  if ! ./e2e --exact xen::hello_and_devices > /tmp/back-to-back.log 2>&1; then
    echo "back-to-back program $k ... FAILED"
    tail -20 /tmp/back-to-back.log
    failed="$failed back-to-back-program-$k"
    break
  fi
done
say "60 short programs back to back: $([ $k -eq 60 ] && ! echo "$failed" | grep -q back-to-back && echo ok || echo "failed at $k")"
[ "$n" -gt 0 ] || failed=" (no tests listed)"
[ -z "$failed" ] || R="fail:$failed"
say "end-to-end suite over xen: $R"
xenstore-write data/pvgpu-e2e "$R"

# Programs built by nvcc (static cudart) on the drop-in libcuda.so.1 over
# Xen: each must end with PASS, and print what the H100 prints natively
# where an .expected file says.
P=pass
for prog in programs/*; do
  case "$prog" in *.expected) continue ;; esac
  name=$(basename "$prog")
  if LD_LIBRARY_PATH=/lab/lib PVGPU_BACKEND=xen RUST_LOG=warn timeout 300 "$prog" > "/tmp/prog-$name.out" 2>&1 &&
    [ "$(tail -1 "/tmp/prog-$name.out")" = PASS ] &&
    { [ ! -f "$prog.expected" ] || cmp -s "$prog.expected" "/tmp/prog-$name.out"; }; then
    echo "program $name ... ok"
  else
    echo "program $name ... FAILED"
    tail -30 "/tmp/prog-$name.out"
    P="$P fail:$name"
  fi
done
[ "$P" = pass ] || P=${P#pass }
say "runtime-API programs over xen: $P"
xenstore-write data/pvgpu-programs "$P"

chmod 600 tcp.key
# Soft-RoCE on the guest's interface, for the benchmark's and the suite's
# RDMA connections to Dom0.
RXE=$(lab_rxe eth0 /lab/rxe.driver) && RDMA=1 || RDMA=0
say "$RXE"
RUST_LOG=warn PVGPU_TCP_KEY=/lab/tcp.key ./pvgpu-bench --quick --connect xen --connect "tcp:$LAB_DOM0_IP:7300" \
  $([ $RDMA = 1 ] && echo "--connect rdma:$LAB_DOM0_IP:7400") > /tmp/bench.out 2> /tmp/bench.err
BRC=$?
echo "----- pvgpu-bench (xen vs tcp vs rdma between domains) -----"
cat /tmp/bench.err /tmp/bench.out
echo "----- end of pvgpu-bench -----"
[ $BRC -eq 0 ] && xenstore-write data/pvgpu-bench done || xenstore-write data/pvgpu-bench "fail rc=$BRC"

# The suite's bodies over RDMA, in one process (two at a time), against the
# same backend; PVGPU_TEST_RDMA=required makes a missing RDMA a failure.
if [ $RDMA = 1 ]; then
  PVGPU_TEST_RDMA=required PVGPU_TEST_RDMA_ADDR=$LAB_DOM0_IP:7400 PVGPU_TCP_KEY=/lab/tcp.key RUST_LOG=warn \
    timeout 700 ./e2e rdma:: --test-threads=2 > /tmp/rdma.log 2>&1
  RRC=$?
  grep -E "^test |test result" /tmp/rdma.log
  if [ $RRC -eq 0 ] && grep -q "test result: ok" /tmp/rdma.log; then RR=pass; else RR="fail rc=$RRC"; tail -60 /tmp/rdma.log; fi
else
  RR="fail: no soft-RoCE in the guest: $RXE"
fi
say "end-to-end suite over rdma: $RR"
xenstore-write data/pvgpu-rdma "$RR"

# A program waits in a call while Dom0 kills the backend (SIGKILL) and starts
# a new one: the call must fail rather than hang, and a program started
# afterwards must get a session from the new backend.
PVGPU_CHILD_ADDR=xen PVGPU_CHILD_SPIN_S=60 ./e2e --exact child_client_helper --nocapture > /tmp/held.log 2>&1 &
i=0
while ! grep -q READY /tmp/held.log && [ $i -lt 120 ]; do usleep 500000; i=$((i + 1)); done
xenstore-write data/pvgpu-held "$(grep -c READY /tmp/held.log)"
i=0
while ! xenstore-read data/pvgpu-restarted >/dev/null 2>&1 && [ $i -lt 240 ]; do usleep 500000; i=$((i + 1)); done
i=0
while ! grep -q "^SYNC " /tmp/held.log && [ $i -lt 60 ]; do usleep 500000; i=$((i + 1)); done
HELD=$(grep "^SYNC " /tmp/held.log | head -1)
say "the call waiting when the backend died returned: ${HELD:-nothing yet}"
if ./e2e --exact xen::matsum_matches_cpu > /tmp/after.log 2>&1; then AFTER=pass; else AFTER="fail rc=$?"; tail -30 /tmp/after.log; fi
say "a new program after the backend restarted: $AFTER"
case "$HELD" in
  "SYNC CUDA_ERROR_DEVICE_UNAVAILABLE"*) R=$AFTER ;;
  *) R="fail: the waiting call returned '${HELD:-nothing}'; new program: $AFTER" ;;
esac
xenstore-write data/pvgpu-restart "$R"

# A program whose session Dom0 checkpoints (the session leaves the backend)
# and restores: its next call claims a free vgpu device, presents the
# session's token, and the program goes on with its memory, stream and
# kernels.
PVGPU_CHECKPOINTED_ADDR=xen RUST_LOG=warn,pvgpu_frontend=info timeout 700 ./e2e --exact checkpointed_client_helper --nocapture > /tmp/ckpt.log 2>&1 &
CK=$!
i=0
while ! grep -q READY /tmp/ckpt.log && [ $i -lt 240 ]; do usleep 500000; i=$((i + 1)); done
xenstore-write data/pvgpu-ckpt-ready "$(grep -c READY /tmp/ckpt.log)"
wait $CK
CRC=$?
grep -E "READY|DETACHED|CHECKPOINT|panicked|taken back|waiting for it" /tmp/ckpt.log
if [ $CRC -eq 0 ] && grep -q "CHECKPOINT ok" /tmp/ckpt.log; then CR=pass; else CR="fail rc=$CRC"; tail -30 /tmp/ckpt.log; fi
say "a program checkpointed and restored from Dom0: $CR"
xenstore-write data/pvgpu-checkpoint "$CR"

# Two programs holding sessions while Dom0 saves and restores this guest
# (`pvgpu-xl save`, `pvgpu-xl restore`): one idle (it makes no call until
# its session has left: its library answers the backend's request for
# one), one making calls. Both sessions leave the backend before the save,
# and each program takes its own back in the restored domain (a new domain
# id) through a device attached to it.
BEFORE=$(xenstore-read domid)
PVGPU_CHECKPOINTED_IDLE=1 PVGPU_CHECKPOINTED_ADDR=xen RUST_LOG=warn,pvgpu_frontend=info timeout 700 ./e2e --exact checkpointed_client_helper --nocapture > /tmp/xlsave-idle.log 2>&1 &
XI=$!
PVGPU_CHECKPOINTED_ADDR=xen RUST_LOG=warn,pvgpu_frontend=info timeout 700 ./e2e --exact checkpointed_client_helper --nocapture > /tmp/xlsave-busy.log 2>&1 &
XB=$!
i=0
while [ "$(cat /tmp/xlsave-idle.log /tmp/xlsave-busy.log | grep -c READY)" -lt 2 ] && [ $i -lt 240 ]; do usleep 500000; i=$((i + 1)); done
xenstore-write data/pvgpu-xlsave-ready "$(cat /tmp/xlsave-idle.log /tmp/xlsave-busy.log | grep -c READY)"
wait $XI; XIRC=$?
wait $XB; XBRC=$?
AFTER=$(xenstore-read domid)
XR=pass
for l in idle busy; do
  grep -E "READY|DETACHED|CHECKPOINT|panicked|taken back|waiting for it|restored as" /tmp/xlsave-$l.log | sed "s/^/$l: /"
  grep -q "CHECKPOINT ok" /tmp/xlsave-$l.log || { XR="fail ($l program)"; tail -30 /tmp/xlsave-$l.log; }
done
[ $XIRC -eq 0 ] && [ $XBRC -eq 0 ] || XR="fail rc=$XIRC,$XBRC"
[ "$BEFORE" != "$AFTER" ] || XR="fail: the domain id stayed $BEFORE"
say "two programs (idle, busy) across xl save and xl restore of this guest (domain $BEFORE, then $AFTER): $XR"
xenstore-write data/pvgpu-xlsave "$XR"

# A program holding a session while Dom0 migrates this guest to its own
# host (`pvgpu-xl migrate ... localhost`). This lab's Xen has no log-dirty
# mode for a PV guest, so `xl migrate` fails there: the session comes back
# to the guest where it is, and the program goes on (Dom0 says which
# happened; a Xen that migrates gives the guest a new domain id).
BEFORE=$(xenstore-read domid)
PVGPU_CHECKPOINTED_ADDR=xen RUST_LOG=warn,pvgpu_frontend=info timeout 500 ./e2e --exact checkpointed_client_helper --nocapture > /tmp/xlmigrate.log 2>&1 &
XM=$!
i=0
while ! grep -q READY /tmp/xlmigrate.log && [ $i -lt 240 ]; do usleep 500000; i=$((i + 1)); done
xenstore-write data/pvgpu-xlmigrate-ready "$(grep -c READY /tmp/xlmigrate.log)"
wait $XM; XMRC=$?
AFTER=$(xenstore-read domid)
grep -E "READY|DETACHED|CHECKPOINT|panicked|taken back|waiting for it" /tmp/xlmigrate.log | sed "s/^/migrate: /"
if [ $XMRC -eq 0 ] && grep -q "CHECKPOINT ok" /tmp/xlmigrate.log; then MR=pass; else MR="fail rc=$XMRC"; tail -30 /tmp/xlmigrate.log; fi
say "a program across pvgpu-xl migrate of this guest (domain $BEFORE, then $AFTER): $MR"
xenstore-write data/pvgpu-xlmigrate "$MR $BEFORE $AFTER"

PVGPU_CHILD_ADDR=xen ./e2e --exact child_client_helper --nocapture > /tmp/victim.log 2>&1 &
i=0
while ! grep -q READY /tmp/victim.log && [ $i -lt 120 ]; do usleep 500000; i=$((i + 1)); done
say "victim client: $(grep -c READY /tmp/victim.log) READY"
xenstore-write data/pvgpu-victim ready
sleep 600
