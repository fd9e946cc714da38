#!/bin/sh
# Smoke test, DomU side: XenStore write, ping Dom0 over the vif, then wait for
# Dom0 to destroy this domain.
# Relative XenStore paths resolve to /local/domain/<my domid>/.
say() { echo "smoke-domU: $*"; }

say "domid $LAB_DOMID, my ip $LAB_DOMU_IP, dom0 ip $LAB_DOM0_IP"
xenstore-write data/smoke-hello "hello-from-domU-$LAB_DOMID" || { say "FAIL xenstore-write"; exit 1; }
say "wrote data/smoke-hello"

ok=fail
i=0
while [ $i -lt 30 ]; do
  if ping -c 1 -W 1 "$LAB_DOM0_IP" >/tmp/ping.out 2>&1; then ok=ok; break; fi
  i=$((i + 1))
done
cat /tmp/ping.out
say "ping dom0: $ok after $((i + 1)) tries"
ip addr show eth0
xenstore-write data/smoke-ping "$ok"
[ "$ok" = ok ] || exit 1

# Dom0 now pings us and then destroys this domain; we only wait.
say "waiting for Dom0 to destroy me"
sleep 120
say "FAIL: still alive after 120 s"
exit 1
