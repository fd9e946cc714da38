# Shell functions both lab images share, installed as /etc/lab/lib.sh.
# The caller defines warn() (how a warning reaches the serial log).

# The pseudo file systems and tmpfs mounts an initramfs init needs.
lab_mounts() {
  mount -t proc proc /proc
  mount -t sysfs sysfs /sys
  mount -t devtmpfs devtmpfs /dev
  mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
  mount -t tmpfs tmpfs /run
  mount -t tmpfs tmpfs /tmp
  mkdir -p /var && ln -sfn /run /var/run && ln -sfn /run/lock /var/lock
}

# Loads the modules lab.sh listed in /etc/lab/modules, in order, skipping
# those already loaded.
lab_modules() {
  while read -r m; do
    n=$(basename "$m" .ko | tr - _)
    grep -q "^$n " /proc/modules && continue
    insmod "$m" 2>/tmp/insmod.err || warn "insmod $m: $(cat /tmp/insmod.err)"
  done < /etc/lab/modules
}

# wait_key path seconds: prints the XenStore value at path once it exists;
# fails if it does not appear in time.
wait_key() {
  n=$(($2 * 2))
  while [ "$n" -gt 0 ]; do
    xenstore-read "$1" 2>/dev/null && return 0
    usleep 500000; n=$((n - 1))
  done
  return 1
}

# lab_rxe IFACE: soft-RoCE on IFACE (device rxe0), for the RDMA transport.
# Needs rdma_rxe, ib_uverbs and rdma_ucm loaded (LAB_*_MODULES), and
# rdma-core's libraries, the rxe provider and iproute2's `rdma` copied in
# (LAB_*_BINS); the provider's driver file is given as $2. Prints why it
# could not, and fails.
lab_rxe() {
  grep -q "^rdma_rxe " /proc/modules || { echo "no rdma_rxe module loaded"; return 1; }
  mkdir -p /etc/libibverbs.d && cp "$2" /etc/libibverbs.d/rxe.driver
  rdma link show rxe0/1 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$1" || { echo "rdma link add rxe0 on $1 failed"; return 1; }
  [ -e /dev/infiniband/rdma_cm ] || { echo "no /dev/infiniband/rdma_cm"; return 1; }
  echo "rxe0 on $1: $(rdma link show rxe0/1 2>&1)"
}
