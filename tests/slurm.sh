#!/usr/bin/env bash
# Slurm from Debian, one node, as an HPC admin sets it up with pvgpu
# (packaging/slurm/), the backend reached as on another host (its control
# API over HTTPS with a token): `srun --gres=pvgpu:N` runs an unmodified
# CUDA program (Python calling the driver API through ctypes) on a pvgpu
# backend with a key of its own, seeing the N GPUs Slurm gave the job and
# no others, under N times the memory per GPU; the job's tenant exists
# while it runs and is gone after; asking for more pvgpu GPUs than the node
# has is refused by Slurm. Runs against the debug binaries of the suite and
# the host test executor (two devices); needs root (Slurm's daemons and
# prolog).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "skipped: Slurm's daemons need root"
  exit 0
fi
repo=$(pwd)
w=$(mktemp -d /tmp/pvgpu-slurm.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  pkill -f "slurmctld -D -f $w" 2> /dev/null || true
  pkill -f "slurmd -D -f $w" 2> /dev/null || true
  # The daemons write their state as they stop: the folder goes once they
  # have (a removal racing them failed with "Directory not empty").
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  for _ in $(seq 100); do pgrep -f -- "-D -f $w" > /dev/null || break; sleep 0.1; done
  rm -f /etc/pvgpu/slurm.env
  rmdir /etc/pvgpu 2> /dev/null || true
  rm -rf "$w"
}
trap cleanup EXIT
host=$(hostname -s)
mkdir -p "$w"/{state,spool,dev,lib,keys}
ln -s "$repo/target/debug/libpvgpu_cuda.so" "$w/lib/libcuda.so.1"
touch "$w/dev/pvgpu0"

# munge, Slurm's authentication.
if ! munge -n > /dev/null 2>&1; then
  install -d -o munge -g munge -m 0755 /run/munge
  [ -s /etc/munge/munge.key ] || mungekey --create > /dev/null
  runuser -u munge -- /usr/sbin/munged
fi

# The control API's certificate (an authority of the test's own) and token.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=pvgpu-slurm-test-ca \
  -keyout "$w/ca.key" -out "$w/ca.pem" 2> /dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
  -keyout "$w/control.key" -out "$w/control.csr" 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > "$w/san.ext"
openssl x509 -req -in "$w/control.csr" -CA "$w/ca.pem" -CAkey "$w/ca.key" -CAcreateserial -days 1 \
  -extfile "$w/san.ext" -out "$w/control.pem" 2> /dev/null
head -c 24 /dev/urandom | base64 > "$w/control.token"
chmod 600 "$w/control.token" "$w/control.key"

# The backend: two GPUs (the host executor's), tenants under a state
# directory, TCP for the jobs, the control API over HTTPS.
# Four ports in a row (the backend, slurmctld, slurmd, the control API),
# below the kernel's ephemeral range (32768 and up), so that no outgoing
# connection takes one as its source port before its server binds it.
port=$(python3 - <<'PY'
import random, socket
for _ in range(500):
    p = random.randrange(20000, 32000 - 4)
    held = []
    try:
        for q in range(p, p + 4):
            s = socket.socket()
            s.bind(("0.0.0.0", q))
            held.append(s)
    except OSError:
        continue
    finally:
        for s in held:
            s.close()
    if len(held) == 4:
        print(p)
        break
PY
)
RUST_LOG=warn "$repo/target/debug/pvgpu-backend" --executor host --host-devices 2 --listen "tcp:127.0.0.1:$port" \
  --state-dir "$w/state-pvgpu" --control off --control-http "127.0.0.1:$((port + 3))" \
  --control-token "$w/control.token" --control-tls-cert "$w/control.pem" --control-tls-key "$w/control.key" &
pids+=($!)
ctl="$repo/target/debug/pvgpu-ctl --control https://127.0.0.1:$((port + 3)) --token $w/control.token --ca $w/ca.pem"
for _ in $(seq 100); do $ctl sessions > /dev/null 2>&1 && break; sleep 0.1; done

# pvgpu's Slurm configuration, as /etc/pvgpu/slurm.env says it.
mkdir -p /etc/pvgpu
cat > /etc/pvgpu/slurm.env <<ENV
PVGPU_BACKEND=tcp:127.0.0.1:$port
PVGPU_SLURM_CONTROL=https://127.0.0.1:$((port + 3))
PVGPU_SLURM_CONTROL_TOKEN=$w/control.token
PVGPU_SLURM_CONTROL_CA=$w/ca.pem
PVGPU_SLURM_MEMORY_PER_GPU=64MiB
PVGPU_SLURM_KEYS=$w/keys
PVGPU_SLURM_LIBDIR=$w/lib
PVGPU_CTL=$repo/target/debug/pvgpu-ctl
ENV
cat > "$w/slurm.conf" <<CONF
ClusterName=pvgpu-test
SlurmctldHost=$host
SlurmctldPort=$((port + 1))
SlurmdPort=$((port + 2))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$w/state
SlurmdSpoolDir=$w/spool
SlurmctldPidFile=$w/slurmctld.pid
SlurmdPidFile=$w/slurmd.pid
SlurmctldLogFile=$w/slurmctld.log
SlurmdLogFile=$w/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
GresTypes=pvgpu
Prolog=$repo/packaging/slurm/pvgpu-slurm-prolog
TaskProlog=$repo/packaging/slurm/pvgpu-slurm-taskprolog
Epilog=$repo/packaging/slurm/pvgpu-slurm-epilog
NodeName=$host CPUs=$(nproc) RealMemory=1000 Gres=pvgpu:2 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=10 State=UP
CONF
touch "$w/dev/pvgpu1"
printf 'NodeName=%s Name=pvgpu File=%s\n' "$host" "$w/dev/pvgpu0" "$host" "$w/dev/pvgpu1" > "$w/gres.conf"
export SLURM_CONF=$w/slurm.conf
slurmctld -D -f "$w/slurm.conf" > "$w/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$w/slurm.conf" > "$w/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do sinfo -h -o %t 2> /dev/null | grep -q idle && break; sleep 0.2; done
sinfo -h -o '%P %t %G'

cat > "$w/probe.py" <<'PY'
import ctypes, os, subprocess, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit"
n = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(n)) == 0
# Which of the backend's GPUs: the host executor's UUIDs end in 1, 2, ...
gpus = []
for i in range(n.value):
    uuid = (ctypes.c_ubyte * 16)()
    assert cuda.cuDeviceGetUuid_v2(uuid, i) == 0
    gpus.append(str(uuid[15] - 1))
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
ptr = ctypes.c_uint64()
big = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(96 << 20))
small = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(48 << 20))
listed = subprocess.run(sys.argv[1].split() + ["sessions"], capture_output=True, text=True).stdout
print("job %s: %d device(s), backend GPUs %s, key %s, 96 MiB -> %d, 48 MiB -> %d" % (
    os.environ["SLURM_JOB_ID"], n.value, ",".join(gpus), os.path.basename(os.environ.get("PVGPU_TCP_KEY", "-")), big, small))
print(listed.strip())
PY
out=$(srun --gres=pvgpu:1 python3 "$w/probe.py" "$ctl")
echo "$out"
job=$(echo "$out" | sed -n 's/^job \([0-9]*\):.*/\1/p')
echo "$out" | grep -q "1 device(s), backend GPUs 0, key $job.key, 96 MiB -> 2, 48 MiB -> 0" \
  || { echo "the job did not get its pvgpu GPU, key and 64 MiB quota" >&2; exit 1; }
echo "$out" | grep -q "slurm-job-$job" || { echo "the job's session is not its tenant's" >&2; exit 1; }
# After the job: the tenant is gone.
for _ in $(seq 50); do $ctl tenant list | grep -q "slurm-job-$job" || break; sleep 0.1; done
if $ctl tenant list | grep -q "slurm-job-$job"; then echo "the epilog left the job's tenant" >&2; exit 1; fi
[ ! -e "$w/keys/$job.key" ] || { echo "the epilog left the job's key" >&2; exit 1; }
# Both GPUs, and twice the memory.
out=$(srun --gres=pvgpu:2 python3 "$w/probe.py" "$ctl")
echo "$out"
echo "$out" | grep -q "2 device(s), backend GPUs 0,1, key [0-9]*.key, 96 MiB -> 0, 48 MiB -> 2" \
  || { echo "a job with two pvgpu GPUs did not get both and 128 MiB" >&2; exit 1; }
# More pvgpu GPUs than the node has: Slurm refuses the job.
if srun --gres=pvgpu:3 true 2> "$w/refused.txt"; then echo "a job got 3 pvgpu GPUs of 2" >&2; exit 1; fi
echo "refused: $(head -1 "$w/refused.txt")"
echo "slurm: PASS"
