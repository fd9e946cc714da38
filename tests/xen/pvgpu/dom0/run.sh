#!/bin/sh
# pvgpu in the Xen lab, Dom0 side: run pvgpu-backend (host executor, a worker
# process per session) on vgpu devices, TCP and RDMA (soft-RoCE on the
# guests' bridge), start the guest, attach its devices, wait for the
# guest's end-to-end suites (Xen, RDMA), programs and benchmark, kill the
# backend under a waiting guest call and start a new one, checkpoint and
# restore a guest program's session, save and restore the guest with two
# programs' sessions in it (pvgpu-xl save/restore), then destroy the guest in the middle
# of a session and check that everything of it is
# reclaimed. Exits 0 only if every step passed.
say() { echo "LAB-PVGPU dom0: $* [+$(cut -d' ' -f1 /proc/uptime)s]"; }
RC=0
fail() { say "FAIL: $*"; RC=1; }
. /etc/lab/lib.sh   # wait_key
# Session workers of the backend: processes named pvgpu-worker (a worker
# started for its session, or one of the pool's that took it; idle ones
# are pvgpu-idle). One pipeline: forks are slow under TCG.
workers() {
  cat /proc/[0-9]*/comm 2>/dev/null | grep -c "^pvgpu-worker$"
}

cd /lab
# Crashes of any process (a session worker, say) reach the console.
echo 7 > /proc/sys/kernel/printk
chmod 600 tcp.key
# Every test of the RDMA suite is one peer: allow it as many sessions as
# the Xen suite's guest has.
start_backend() {
  RUST_LOG=${RUST_LOG:-info,pvgpu_backend::xen=debug} ./pvgpu-backend --listen xen --listen tcp:0.0.0.0:7300 $RDMA_LISTEN --tcp-key tcp.key \
    --max-tcp-sessions 64 --max-sessions-per-peer 32 --executor host --host-mem 1G >> /tmp/backend.log 2>&1 &
  BPID=$!
  say "pvgpu-backend pid $BPID"
}
: > /tmp/backend.log
xl create "$LAB_DOMU_CFG" || { say "FAIL: xl create"; exit 1; }
# Soft-RoCE on the bridge the guest's vif joins, before the backend binds
# its RDMA address there.
if RXE=$(lab_rxe "$LAB_BRIDGE" /lab/rxe.driver); then
  say "$RXE"
  RDMA_LISTEN="--listen rdma:$LAB_DOM0_IP:7400"
else
  fail "soft-RoCE in Dom0: $RXE"
  RDMA_LISTEN=
fi
start_backend
# Stream the backend's warnings and the guest's console to the serial log as
# they happen.
tail -F /tmp/backend.log 2>/dev/null | grep -E "WARN|ERROR" &
tail -F "/var/log/xen/console/guest-$LAB_DOMU_NAME.log" 2>/dev/null &

DOMID=$(xl domid "$LAB_DOMU_NAME")
D=/local/domain/$DOMID
./pvgpu-xl attach "$LAB_DOMU_NAME" --count 12 || fail "pvgpu-xl attach"
sleep 2
./pvgpu-xl list

E2E=$(wait_key "$D/data/pvgpu-e2e" 900) || E2E="no result"
say "guest end-to-end suite over xen: $E2E"
[ "$E2E" = pass ] || fail "end-to-end suite over xen: $E2E"

PROGS=$(wait_key "$D/data/pvgpu-programs" 900) || PROGS="no result"
say "guest runtime-API programs over xen: $PROGS"
[ "$PROGS" = pass ] || fail "runtime-API programs over xen: $PROGS"

BENCH=$(wait_key "$D/data/pvgpu-bench" 400) || BENCH="no result"
say "guest benchmark: $BENCH"
[ "$BENCH" = done ] || fail "benchmark: $BENCH"

RDMA=$(wait_key "$D/data/pvgpu-rdma" 900) || RDMA="no result"
say "guest end-to-end suite over rdma: $RDMA"
[ "$RDMA" = pass ] || fail "end-to-end suite over rdma: $RDMA"

HELD=$(wait_key "$D/data/pvgpu-held" 120) || HELD="no result"
[ "$HELD" = 1 ] || fail "program holding a session: $HELD"
kill -KILL $BPID
wait $BPID 2>/dev/null
say "pvgpu-backend killed (SIGKILL) while a guest program waits in a call"
i=0
while [ "$(workers)" -gt 0 ] && [ $i -lt 100 ]; do usleep 200000; i=$((i + 1)); done
[ "$(workers)" -eq 0 ] && say "the killed backend's session workers have exited" || fail "workers of the killed backend left: $(workers)"
start_backend
xenstore-write "$D/data/pvgpu-restarted" 1
RESTART=$(wait_key "$D/data/pvgpu-restart" 300) || RESTART="no result"
say "guest across the backend restart: $RESTART"
[ "$RESTART" = pass ] || fail "backend restart: $RESTART"

# The guest's next program holds a session with state: checkpoint it (it
# leaves the backend), restore it, and the program must go on.
CKREADY=$(wait_key "$D/data/pvgpu-ckpt-ready" 300) || CKREADY="no result"
if [ "$CKREADY" = 1 ]; then
  SID=$(./pvgpu-ctl sessions --json | grep -o '"id": *[0-9]*' | head -1 | grep -o '[0-9]*$')
  rm -f /tmp/session.pvgpu
  if ./pvgpu-ctl checkpoint "$SID" /tmp/session.pvgpu && ./pvgpu-ctl restore /tmp/session.pvgpu; then
    say "the guest's session $SID checkpointed and restored"
  else
    fail "checkpoint or restore of the guest's session ${SID:-(none listed)}"
  fi
else
  fail "checkpointed program: $CKREADY"
fi
CK=$(wait_key "$D/data/pvgpu-checkpoint" 300) || CK="no result"
say "guest program across a checkpoint and restore: $CK"
[ "$CK" = pass ] || fail "checkpoint and restore: $CK"

# Two guest programs (one idle) hold sessions while the guest is saved and
# restored: `pvgpu-xl save` checkpoints the sessions (they leave the
# backend) before `xl save`; `pvgpu-xl restore` runs `xl restore`, attaches
# devices to the new domain and hands the sessions back to the backend.
XSREADY=$(wait_key "$D/data/pvgpu-xlsave-ready" 300) || XSREADY="no result"
if [ "$XSREADY" = 2 ]; then
  rm -rf /tmp/domu.save /tmp/domu.save.pvgpu
  if ./pvgpu-xl save "$LAB_DOMU_NAME" /tmp/domu.save && ./pvgpu-xl restore /tmp/domu.save; then
    say "the guest saved and restored with its programs' sessions"
  else
    fail "pvgpu-xl save or restore"
  fi
  rm -f /tmp/domu.save
  DOMID=$(xl domid "$LAB_DOMU_NAME")
  D=/local/domain/$DOMID
  ./pvgpu-xl list
else
  fail "program for xl save: $XSREADY"
fi
XSAVE=$(wait_key "$D/data/pvgpu-xlsave" 300) || XSAVE="no result"
say "guest programs across xl save and xl restore: $XSAVE"
[ "$XSAVE" = pass ] || fail "xl save and restore: $XSAVE"

# `pvgpu-xl migrate` of the guest to this host, a program holding a session
# in it. This lab's Xen has no log-dirty mode for a PV guest ("Failed to
# enable logdirty"), so `xl migrate` fails after the session was
# checkpointed: the session must go back to the backend, the devices come
# back online, and the program go on in the same domain. A Xen that
# migrates moves the guest to a new domain, to which the session goes.
# The remote shell runs the command here (`xl migrate -s` form).
XMREADY=$(wait_key "$D/data/pvgpu-xlmigrate-ready" 300) || XMREADY="no result"
MIGRATED=
if [ "$XMREADY" = 1 ]; then
  printf '#!/bin/sh\nshift\neval "$*"\n' > /tmp/here; chmod 755 /tmp/here
  rm -rf /tmp/domu.migrate
  if ./pvgpu-xl migrate "$LAB_DOMU_NAME" localhost --ssh /tmp/here --dir /tmp/domu.migrate > /tmp/xlmigrate.out 2>&1; then
    MIGRATED=1
    say "the guest migrated to this host with its programs' sessions"
    DOMID=$(xl domid "$LAB_DOMU_NAME")
    D=/local/domain/$DOMID
  elif grep -q "was not migrated and runs on (1 GPU session(s) handed back" /tmp/xlmigrate.out; then
    say "xl migrate failed here, as this Xen cannot migrate a PV guest; the guest runs on with its session handed back"
  else
    fail "pvgpu-xl migrate"
  fi
  sed 's/^/  /' /tmp/xlmigrate.out | tail -12
  DOMVM=$(xenstore-read "$D/vm" 2>/dev/null)
  say "the guest's virtual machine path $DOMVM: $(xenstore-read "$DOMVM/uuid" 2>/dev/null || echo gone)"
else
  fail "program for pvgpu-xl migrate: $XMREADY"
fi
XMIG=$(wait_key "$D/data/pvgpu-xlmigrate" 300) || XMIG="no result"
say "guest program across pvgpu-xl migrate: $XMIG"
set -- $XMIG
if [ "$1" != pass ]; then fail "pvgpu-xl migrate: $XMIG"
elif [ -n "$MIGRATED" ] && [ "$2" = "$3" ]; then fail "migrated, but the program's domain id stayed $2"
elif [ -z "$MIGRATED" ] && [ "$2" != "$3" ]; then fail "not migrated, but the program's domain id changed from $2 to $3"
fi
rm -rf /tmp/domu.migrate

VICTIM=$(wait_key "$D/data/pvgpu-victim" 120) || VICTIM="no result"
[ "$VICTIM" = ready ] || fail "victim client: $VICTIM"
N=$(workers)
say "sessions alive before destroying the guest: $N"
[ "$N" -ge 1 ] || fail "no session for the victim client"
./pvgpu-xl list
xl destroy "$LAB_DOMU_NAME" || fail "xl destroy"
say "guest destroyed mid-session"
i=0
while [ "$(workers)" -gt 0 ] && [ $i -lt 100 ]; do usleep 200000; i=$((i + 1)); done
[ "$(workers)" -eq 0 ] && say "every session worker of the guest has exited (grants unmapped, ports closed, memory freed)" || fail "session workers left: $(workers)"
i=0
while xenstore-exists "/local/domain/0/backend/vgpu/$DOMID" 2>/dev/null && [ $i -lt 50 ]; do usleep 200000; i=$((i + 1)); done
xenstore-exists "/local/domain/0/backend/vgpu/$DOMID" 2>/dev/null && fail "backend directories of the destroyed guest remain" || say "backend directories of the destroyed guest removed"

kill -TERM $BPID
wait $BPID
BRC=$?
[ $BRC -eq 0 ] && say "pvgpu-backend stopped cleanly" || fail "pvgpu-backend exit status $BRC"
echo "----- pvgpu-backend log -----"
tail -400 /tmp/backend.log
echo "----- end of pvgpu-backend log -----"
[ $RC -eq 0 ] && say "PASS" || say "FAIL"
exit $RC
