#!/bin/sh
# /init of the lab's Dom0 initramfs (busybox + the Xen 4.17 toolstack).
# Brings up what xencommons would (xenstored, xenconsoled), the xen modules and
# the bridge xenbr0, runs /lab/run.sh under a time limit, prints the DomU
# console log, the result marker, and powers the machine off.
# Lines starting with "LAB: " are markers read by tests/xen/lab.sh.
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/xen-4.17/bin:/lab
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "LAB: $* [dom0 +$(up)s]"; }
warn() { echo "LAB: WARNING: $*"; }
. /etc/lab/lib.sh

lab_mounts
set -a; . /etc/lab/env; set +a
say "dom0 init up (kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) vCPUs, $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) MiB)"

# ---- kernel modules (listed in load order by lab.sh) ----
lab_modules
mkdir -p /proc/xen && mount -t xenfs xenfs /proc/xen || warn "mount xenfs failed"
for d in evtchn gntdev gntalloc privcmd xenbus; do
  [ -c /dev/xen/$d ] || warn "/dev/xen/$d missing"
done

# ---- what xencommons does: xenstored, Dom0's keys, xenconsoled ----
mkdir -p /var/lib/xen /var/lib/xenstored /var/log/xen/console /run/xen /run/xenstored /run/lock
xenstored --pid-file /run/xenstored.pid || warn "xenstored failed"
xen-init-dom0 >/tmp/xen-init-dom0.log 2>&1 || { warn "xen-init-dom0 failed"; cat /tmp/xen-init-dom0.log; }
xenconsoled --pid-file=/run/xenconsoled.pid --log=guest --log-dir=/var/log/xen/console ||
  warn "xenconsoled failed"

# ---- network: bridge xenbr0 with Dom0's address; vif-bridge adds the DomU's vif ----
ip link set lo up
ip link add name "$LAB_BRIDGE" type bridge stp_state 0 forward_delay 0 || warn "bridge $LAB_BRIDGE"
ip addr add "$LAB_DOM0_IP/$LAB_NET_PREFIX" dev "$LAB_BRIDGE" || warn "address on $LAB_BRIDGE"
ip link set "$LAB_BRIDGE" up || warn "$LAB_BRIDGE up"
say "dom0 ready: xenstored, xenconsoled, $LAB_BRIDGE $LAB_DOM0_IP/$LAB_NET_PREFIX"
[ "$LAB_DEBUG" = 1 ] && { xl info; cat /proc/modules; ip addr; }

# ---- the caller's program, in its own session, under a time limit ----
export LAB_DOMU_CFG LAB_DOMU_NAME LAB_DOM0_IP LAB_DOMU_IP LAB_NET_PREFIX LAB_BRIDGE LAB_ROLE
export HOME=/root
cd /lab
if [ -f /lab/run.sh ]; then
  say "run.sh start (limit ${LAB_RUN_TIMEOUT}s)"
  if [ -x /lab/run.sh ]; then set -- /lab/run.sh; else set -- /bin/sh /lab/run.sh; fi
  setsid "$@" </dev/null &
  RPID=$!
  ( sleep "$LAB_RUN_TIMEOUT"
    echo "LAB: run.sh still running after ${LAB_RUN_TIMEOUT}s: killing it"
    touch /tmp/run.timeout
    kill -TERM -"$RPID" 2>/dev/null; sleep 3; kill -KILL -"$RPID" 2>/dev/null ) &
  WPID=$!
  wait "$RPID"
  RC=$?
  kill "$WPID" 2>/dev/null
  kill -KILL -"$RPID" 2>/dev/null     # whatever run.sh left running
  [ -e /tmp/run.timeout ] && RC=timeout
  say "run.sh exited rc=$RC"
else
  say "run.sh missing: /lab/run.sh does not exist"
  RC=127
fi
cd /

# ---- collect ----
if [ "$RC" != 0 ] || [ "$LAB_DEBUG" = 1 ]; then
  echo "LAB: ----- xl list -----"; xl list 2>&1
  for f in /var/log/xen/xen-hotplug.log /var/log/xen/xl-*.log; do
    [ -s "$f" ] || continue
    echo "LAB: ----- $f -----"; tail -n 40 "$f"
  done
fi
# DomUs still alive: give their consoles a moment, then destroy them
sleep 1
for d in $(xl list 2>/dev/null | awk 'NR > 2 { print $1 }'); do
  xl destroy "$d" 2>/dev/null && echo "LAB: destroyed leftover domain $d"
done
for f in /var/log/xen/console/guest-*.log; do
  [ -e "$f" ] || continue
  n=${f##*/guest-}; n=${n%.log}
  echo "LAB: ===== BEGIN DOMU CONSOLE $n ====="
  tr -d '\r' < "$f"
  echo "LAB: ===== END DOMU CONSOLE $n ====="
done
if [ "$RC" = 0 ]; then say "RESULT PASS"; else say "RESULT FAIL rc=$RC"; fi
say "DONE"
sync
poweroff -f
sleep 60
