#!/usr/bin/env bash
# The Debian packages as an operator installs them: built from the debug
# binaries the suite already built, installed on this machine (CI's is
# thrown away after; a developer's gets them removed and purged at the
# end), the unit checked by systemd-analyze, the service started by systemd
# where systemd runs (else its ExecStart run as the unit would), an
# unmodified program run through pvgpu-run against it, then purged.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "skipped: installing packages needs root"
  exit 0
fi
out=$(mktemp -d)
started=""
cleanup() {
  [ -n "$started" ] && kill "$started" 2> /dev/null || true
  if [ -d /run/systemd/system ]; then systemctl stop pvgpu-backend.service 2> /dev/null || true; fi
  rm -rf /etc/systemd/system/pvgpu-backend.service.d
  dpkg --purge pvgpu-guest pvgpu-backend > /dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
bash packaging/build-debs.sh debug "$out" > /dev/null
export DEBIAN_FRONTEND=noninteractive
dpkg -i "$out"/pvgpu-backend_*.deb "$out"/pvgpu-guest_*.deb > /dev/null
echo "installed: $(dpkg-query -W -f '${Package} ${Version}, ' pvgpu-backend pvgpu-guest)"
getent passwd pvgpu > /dev/null || { echo "the pvgpu user was not made" >&2; exit 1; }
ldconfig -p | grep -q '/usr/lib/pvgpu/libcuda.so.1' || { echo "libcuda.so.1 is not in the loader's cache" >&2; exit 1; }
systemd-analyze verify /lib/systemd/system/pvgpu-backend.service
echo "unit verified by systemd-analyze"

# The host test double: the machine has no GPU. Options on the command
# line win over /etc/pvgpu/backend.toml.
if [ -d /run/systemd/system ]; then
  mkdir -p /etc/systemd/system/pvgpu-backend.service.d
  printf '[Service]\nExecStart=\nExecStart=/usr/bin/pvgpu-backend --config /etc/pvgpu/backend.toml --executor host\n' \
    > /etc/systemd/system/pvgpu-backend.service.d/test.conf
  systemctl daemon-reload
  systemctl restart pvgpu-backend.service
  echo "started by systemd"
else
  exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/pvgpu-backend.service)
  mkdir -p /run/pvgpu /var/lib/pvgpu
  chmod 0700 /var/lib/pvgpu
  RUST_LOG=warn $exec_start --executor host &
  started=$!
  echo "no systemd here: started the unit's ExecStart ($exec_start --executor host)"
fi
for _ in $(seq 100); do pvgpu-ctl --control unix:/run/pvgpu/control.sock sessions > /dev/null 2>&1 && break; sleep 0.1; done

# An unmodified program: Python calling the driver API through ctypes,
# holding a session while pvgpu-ctl lists it.
PVGPU_BACKEND=local:/run/pvgpu/pvgpu.sock pvgpu-run python3 - <<'PY'
import ctypes, subprocess
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit"
n = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value >= 1, n.value
name = ctypes.create_string_buffer(128)
assert cuda.cuDeviceGetName(name, 128, 0) == 0
path = subprocess.run(["sh", "-c", "grep libcuda /proc/%d/maps | head -1" % __import__("os").getpid()], capture_output=True, text=True).stdout.split()[-1]
assert path.startswith("/usr/lib/pvgpu/"), path
listed = subprocess.run(["pvgpu-ctl", "--control", "unix:/run/pvgpu/control.sock", "sessions"], capture_output=True, text=True, check=True).stdout
assert "local" in listed, listed
print("program through pvgpu-run: %d device(s), %s, driver library %s" % (n.value, name.value.decode(), path))
print(listed.strip())
PY
cleanup
trap - EXIT
getent passwd pvgpu > /dev/null && { echo "purge left the pvgpu user" >&2; exit 1; }
[ ! -e /usr/lib/pvgpu/libcuda.so.1 ] || { echo "purge left the library" >&2; exit 1; }
echo "packages: PASS"
