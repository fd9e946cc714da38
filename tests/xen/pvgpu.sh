#!/usr/bin/env bash
# The pvgpu Xen lab: builds the backend, pvgpu-xl, the end-to-end suite
# (Xen transport), pvgpu-bench, the drop-in libcuda and runtime-API
# programs built with nvcc, and runs them in a real Xen under QEMU
# (tests/xen/lab.sh): the suite and the programs in a guest against the
# backend in Dom0, the ring-vs-TCP benchmark between the domains, a guest
# program's session checkpointed and restored, and a guest destroyed
# mid-session. Exit status 0 only if all of it passed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
B=$HERE/build
cd "$ROOT"

cargo build --release -p pvgpu-backend -p pvgpu-xen -p pvgpu-ctl --bins
cargo build --release -p pvgpu-tests --bin pvgpu-bench
E2E=$(cargo test --release -p pvgpu-tests --features xen --test e2e --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "e2e":
        print(m["executable"])')
[ -x "$E2E" ] || { echo "could not build the Xen end-to-end suite"; exit 3; }

# Runtime-API programs built by nvcc (NVIDIA's static cudart), run in the
# guest on the drop-in libcuda.so.1 over the Xen transport.
eval "$(bash tests/cuda-toolkit.sh)"
cargo build --release -p pvgpu-libcuda
PROGRAMS="graphs graph_nodes graph_host_memory graph_conditional graph_user_objects graph_memory graph_device_launch mapped textures managed ipc"
rm -rf "$B/pvgpu-dom0" "$B/pvgpu-domu"
mkdir -p "$B/pvgpu-dom0" "$B/pvgpu-domu"
cp tests/xen/pvgpu/dom0/run.sh target/release/pvgpu-backend target/release/pvgpu-xl target/release/pvgpu-ctl "$B/pvgpu-dom0/"
cp tests/xen/pvgpu/domu/run.sh target/release/pvgpu-bench "$B/pvgpu-domu/"
cp "$E2E" "$B/pvgpu-domu/e2e"
mkdir -p "$B/pvgpu-domu/lib" "$B/pvgpu-domu/programs"
cp target/release/libpvgpu_cuda.so "$B/pvgpu-domu/lib/libcuda.so.1"
for p in $PROGRAMS; do
  rdc=(); [ "$p" = graph_device_launch ] && rdc=(-rdc=true -lcudadevrt)
  "$PVGPU_NVCC" -O2 -gencode "arch=compute_90,code=[sm_90,compute_90]" "${rdc[@]}" -o "$B/pvgpu-domu/programs/$p" "tests/runtime/$p.cu"
  [ -f "tests/runtime/$p.expected" ] && cp "tests/runtime/$p.expected" "$B/pvgpu-domu/programs/"
done
# One key for the TCP listener in Dom0 and the client in the guest.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$B/pvgpu-dom0/tcp.key"
cp "$B/pvgpu-dom0/tcp.key" "$B/pvgpu-domu/tcp.key"
chmod 600 "$B/pvgpu-dom0/tcp.key" "$B/pvgpu-domu/tcp.key"
strip "$B"/pvgpu-dom0/pvgpu-* "$B"/pvgpu-domu/pvgpu-bench "$B"/pvgpu-domu/e2e "$B"/pvgpu-domu/lib/libcuda.so.1

# Soft-RoCE in both domains for the RDMA transport: the kernel's rxe driver
# (and the crc32 it asks the crypto API for), rdma-core's libraries, which
# pvgpu loads at run time, the rxe provider and iproute2's `rdma`.
RDMA_MODULES="crc32_generic rdma_rxe ib_uverbs rdma_ucm"
ML=/usr/lib/x86_64-linux-gnu
RDMA_BINS="rdma $ML/librdmacm.so.1 $ML/libibverbs.so.1 $ML/libibverbs/librxe-rdmav34.so"
for f in $RDMA_BINS /etc/libibverbs.d/rxe.driver; do
  [ -e "$(command -v "$f" || echo "$f")" ] || { echo "missing $f: install librdmacm1 libibverbs1 ibverbs-providers iproute2"; exit 3; }
done
cp /etc/libibverbs.d/rxe.driver "$B/pvgpu-dom0/"
cp /etc/libibverbs.d/rxe.driver "$B/pvgpu-domu/"

# -cpu qemu64: under TCG, -cpu max (even without SMAP) corrupts memory of
# both domains once grant mappings come and go quickly (see README.md).
LAB_DOM0_MODULES="$RDMA_MODULES" LAB_DOMU_MODULES="$RDMA_MODULES" LAB_DOM0_BINS="$RDMA_BINS" LAB_DOMU_BINS="$RDMA_BINS" \
  LAB_CPU=${LAB_CPU:-qemu64} LAB_DOM0_DIR=$B/pvgpu-dom0 LAB_DOMU_DIR=$B/pvgpu-domu LAB_DOMU_MEM=${LAB_DOMU_MEM:-384} LAB_MEM=${LAB_MEM:-2048} \
  LAB_TIMEOUT=${LAB_TIMEOUT:-900} \
  bash "$HERE/lab.sh"
