#!/usr/bin/env bash
# Builds the Debian packages from binaries cargo built:
#   pvgpu-backend  the backend service, pvgpu-ctl, the systemd unit, /etc/pvgpu/backend.toml
#   pvgpu-guest    the drop-in libcuda.so.1 and libnvidia-ml.so.1 in /usr/lib/pvgpu, pvgpu-run
# Usage: packaging/build-debs.sh [release|debug] [OUTDIR]
# (release: run `cargo build --release -p pvgpu-backend -p pvgpu-ctl -p pvgpu-libcuda -p pvgpu-nvml` first)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}
out=${2:-target/debian}
bin=target/$profile
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
for f in pvgpu-backend pvgpu-ctl libpvgpu_cuda.so libpvgpu_nvml.so; do
  [ -f "$bin/$f" ] || { echo "build-debs: $bin/$f is missing; build it first (see the top of this script)" >&2; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"

# The backend.
b=$stage/pvgpu-backend
install -D -m 0755 "$bin/pvgpu-backend" "$b/usr/bin/pvgpu-backend"
install -D -m 0755 "$bin/pvgpu-ctl" "$b/usr/bin/pvgpu-ctl"
install -D -m 0644 packaging/pvgpu-backend.service "$b/lib/systemd/system/pvgpu-backend.service"
install -D -m 0640 packaging/backend.toml "$b/etc/pvgpu/backend.toml"
for s in pvgpu-slurm-prolog pvgpu-slurm-taskprolog pvgpu-slurm-epilog; do install -D -m 0755 "packaging/slurm/$s" "$b/usr/lib/pvgpu/slurm/$s"; done
install -D -m 0644 packaging/slurm/slurm.env "$b/etc/pvgpu/slurm.env"
for d in operations.md architecture.md protocol.md; do install -D -m 0644 "docs/$d" "$b/usr/share/doc/pvgpu-backend/$d"; done
install -D -m 0644 LICENSE-MIT "$b/usr/share/doc/pvgpu-backend/copyright"
mkdir -p "$b/DEBIAN"
cat > "$b/DEBIAN/control" <<CTL
Package: pvgpu-backend
Version: $version
Architecture: $arch
Maintainer: pvgpu developers <pvgpu@localhost>
Section: admin
Priority: optional
Depends: adduser, libc6
Recommends: systemd
Description: paravirtual GPU backend: CUDA for Xen guests and remote programs
 Serves CUDA driver calls from pvgpu frontends (Xen guests' vgpu devices,
 local programs, TCP) on this host's NVIDIA GPUs, one worker process per
 session. pvgpu-ctl manages sessions, tenants, keys and checkpoints.
CTL
printf '%s\n' /etc/pvgpu/backend.toml /etc/pvgpu/slurm.env > "$b/DEBIAN/conffiles"
cat > "$b/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if ! getent passwd pvgpu > /dev/null; then
    adduser --system --group --no-create-home --home /nonexistent --quiet pvgpu
  fi
  # The workers open the GPU as pvgpu, and keep module images here.
  getent group video > /dev/null && adduser --quiet pvgpu video || true
  install -d -o pvgpu -g pvgpu -m 0700 /var/cache/pvgpu
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    systemctl enable pvgpu-backend.service > /dev/null || true
    systemctl restart pvgpu-backend.service || true
  fi
fi
SH
cat > "$b/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  systemctl stop pvgpu-backend.service || true
  systemctl disable pvgpu-backend.service > /dev/null || true
fi
SH
cat > "$b/DEBIAN/postrm" <<'SH'
#!/bin/sh
set -e
if [ "$1" = purge ]; then
  rm -rf /var/lib/pvgpu /var/cache/pvgpu
  getent passwd pvgpu > /dev/null && deluser --quiet --system pvgpu || true
fi
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
SH
chmod 0755 "$b/DEBIAN/postinst" "$b/DEBIAN/prerm" "$b/DEBIAN/postrm"
strip --strip-unneeded "$b/usr/bin/pvgpu-backend" "$b/usr/bin/pvgpu-ctl"
dpkg-deb --root-owner-group -Zxz --build "$b" "$out/pvgpu-backend_${version}_${arch}.deb" > /dev/null

# The guest side.
g=$stage/pvgpu-guest
install -D -m 0755 "$bin/libpvgpu_cuda.so" "$g/usr/lib/pvgpu/libcuda.so.1"
install -D -m 0755 "$bin/libpvgpu_nvml.so" "$g/usr/lib/pvgpu/libnvidia-ml.so.1"
ln -s libcuda.so.1 "$g/usr/lib/pvgpu/libcuda.so"
ln -s libnvidia-ml.so.1 "$g/usr/lib/pvgpu/libnvidia-ml.so"
install -D -m 0755 packaging/pvgpu-run "$g/usr/bin/pvgpu-run"
install -D -m 0644 packaging/guest.env "$g/etc/pvgpu/guest.env"
install -D -m 0644 /dev/null "$g/etc/ld.so.conf.d/pvgpu.conf"
echo /usr/lib/pvgpu > "$g/etc/ld.so.conf.d/pvgpu.conf"
install -D -m 0644 docs/compatibility.md "$g/usr/share/doc/pvgpu-guest/compatibility.md"
install -D -m 0644 LICENSE-MIT "$g/usr/share/doc/pvgpu-guest/copyright"
mkdir -p "$g/DEBIAN"
cat > "$g/DEBIAN/control" <<CTL
Package: pvgpu-guest
Version: $version
Architecture: $arch
Maintainer: pvgpu developers <pvgpu@localhost>
Section: libs
Priority: optional
Depends: libc6
Conflicts: libcuda1, libnvidia-ml1
Description: paravirtual GPU frontend: CUDA without a local GPU
 A drop-in libcuda.so.1 and libnvidia-ml.so.1 that send each call to a
 pvgpu backend (a Xen guest's vgpu device, a local socket, or TCP), so
 unmodified CUDA programs run; pvgpu-run starts a program with them.
CTL
printf '%s\n' /etc/pvgpu/guest.env > "$g/DEBIAN/conffiles"
printf '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then ldconfig; fi\n' > "$g/DEBIAN/postinst"
printf '#!/bin/sh\nset -e\nif [ "$1" = remove ] || [ "$1" = purge ]; then ldconfig; fi\n' > "$g/DEBIAN/postrm"
chmod 0755 "$g/DEBIAN/postinst" "$g/DEBIAN/postrm"
strip --strip-unneeded "$g/usr/lib/pvgpu/libcuda.so.1" "$g/usr/lib/pvgpu/libnvidia-ml.so.1"
dpkg-deb --root-owner-group -Zxz --build "$g" "$out/pvgpu-guest_${version}_${arch}.deb" > /dev/null
ls "$out"/*.deb
