#!/bin/sh
# Smoke test, Dom0 side: start the DomU, wait for its XenStore key, check that
# it pinged us, ping it back over xenbr0, destroy it.
say() { echo "smoke-dom0: $* [+$(cut -d' ' -f1 /proc/uptime)s]"; }
fail() { say "FAIL: $*"; exit 1; }

. /etc/lab/lib.sh   # wait_key

say "xl create $LAB_DOMU_CFG"
xl create "$LAB_DOMU_CFG" || fail "xl create"
DOMID=$(xl domid "$LAB_DOMU_NAME") || fail "xl domid"
xl list
say "domU $LAB_DOMU_NAME has domid $DOMID"
D=/local/domain/$DOMID

HELLO=$(wait_key "$D/data/smoke-hello" 120) || fail "no $D/data/smoke-hello from the DomU"
say "read $D/data/smoke-hello = '$HELLO'"
[ "$HELLO" = "hello-from-domU-$DOMID" ] || fail "unexpected value"

PING=$(wait_key "$D/data/smoke-ping" 60) || fail "no $D/data/smoke-ping from the DomU"
say "DomU's ping of $LAB_DOM0_IP: $PING"
[ "$PING" = ok ] || fail "DomU could not ping Dom0"

echo "ports of $LAB_BRIDGE: $(ls /sys/class/net/$LAB_BRIDGE/brif)"
ping -c 3 -W 2 "$LAB_DOMU_IP" || fail "ping $LAB_DOMU_IP"
say "ping of the DomU ($LAB_DOMU_IP): ok"

xl destroy "$LAB_DOMU_NAME" || fail "xl destroy"
xl domid "$LAB_DOMU_NAME" >/dev/null 2>&1 && fail "domain still exists after xl destroy"
xenstore-exists "$D" 2>/dev/null && fail "$D still in XenStore after xl destroy"
xl list
say "DomU destroyed"
say "PASS"
