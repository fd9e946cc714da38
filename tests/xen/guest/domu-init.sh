#!/bin/sh
# /init of the lab's PV DomU initramfs. Loads the xen modules, brings up eth0
# (netfront, on Dom0's bridge), runs /lab/run.sh and powers the domain off.
# Its console (hvc0) is logged by Dom0's xenconsoled; Dom0's init prints that
# log into the serial log at the end. Markers start with "LAB-DOMU: ".
# It also reports through XenStore (relative paths = /local/domain/<domid>/):
#   data/lab-status = running | done     data/lab-rc = exit status of run.sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:/lab
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "LAB-DOMU: $* [domU +$(up)s]"; }
warn() { say "WARNING: $*"; }
. /etc/lab/lib.sh

lab_mounts
set -a; . /etc/lab/env; set +a
say "init up (kernel $(uname -r), $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) MiB)"

lab_modules

ip link set lo up
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do usleep 100000; i=$((i + 1)); done
if [ -e /sys/class/net/eth0 ]; then
  ip addr add "$LAB_DOMU_IP/$LAB_NET_PREFIX" dev eth0
  ip link set eth0 up
  say "eth0 $LAB_DOMU_IP/$LAB_NET_PREFIX up"
else
  say "no eth0 (no vif?)"
fi

export LAB_DOM0_IP LAB_DOMU_IP LAB_NET_PREFIX LAB_ROLE HOME=/root
DOMID=$(xenstore-read domid 2>/dev/null)
export LAB_DOMID=$DOMID
xenstore-write data/lab-status running 2>/dev/null
cd /lab
if [ -f /lab/run.sh ]; then
  say "run.sh start (domid $DOMID)"
  if [ -x /lab/run.sh ]; then /lab/run.sh </dev/null; else sh /lab/run.sh </dev/null; fi
  RC=$?
else
  say "run.sh missing: /lab/run.sh does not exist"
  RC=127
fi
say "run.sh exited rc=$RC"
xenstore-write data/lab-rc "$RC" 2>/dev/null
xenstore-write data/lab-status done 2>/dev/null
sync
poweroff -f
sleep 60
