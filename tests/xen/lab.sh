#!/usr/bin/env bash
# pvgpu Xen test lab: boot a real Xen 4.17 (Debian bookworm packages) with a PV
# Dom0 under QEMU, let Dom0 start a PV DomU, run the caller's programs in each
# domain, collect the output, and stop by itself in bounded time.
#
# Usage (as root, Debian bookworm):
#   LAB_DOM0_DIR=dir0 LAB_DOMU_DIR=dirU tests/xen/lab.sh
#
# See tests/xen/README.md for the full interface. In short:
#   LAB_DOM0_DIR   copied to /lab in Dom0; /lab/run.sh is run by Dom0's init
#   LAB_DOMU_DIR   copied to /lab in the DomU; /lab/run.sh is run by its init
#   LAB_TIMEOUT    hard limit for QEMU in seconds (600)
#   LAB_MEM        QEMU memory in MiB (2048)
#   LAB_DOM0_MEM   Dom0 memory in MiB (1024)
#   LAB_DOMU_MEM   DomU memory in MiB (256)
#   SKIP_APT=1     do not apt-get install the host tools
# Output: tests/xen/build/serial.log (whole serial console), build/times.txt.
# Exit status: 0 = Dom0's run.sh exited 0; 1 = it exited non-zero (or timed
# out inside the guest); 2 = the lab itself failed (no Xen banner, Dom0 crash,
# QEMU timeout, no result line); 3 = bad inputs or host setup failed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
B=$HERE/build
T0=$(date +%s%N)
elapsed() { echo $(( ($(date +%s%N) - ${1:-$T0}) / 1000000 )) | awk '{printf "%.1f", $1/1000}'; }
log() { echo "[lab +$(elapsed)s] $*"; }
die() { echo "[lab] ERROR: $*" >&2; exit 3; }

# ------------------------------------------------------------------ inputs
LAB_DOM0_DIR=${LAB_DOM0_DIR:-}
LAB_DOMU_DIR=${LAB_DOMU_DIR:-}
LAB_TIMEOUT=${LAB_TIMEOUT:-600}
LAB_MEM=${LAB_MEM:-2048}
LAB_DOM0_MEM=${LAB_DOM0_MEM:-1024}
LAB_DOMU_MEM=${LAB_DOMU_MEM:-256}
LAB_DOMU_VCPUS=${LAB_DOMU_VCPUS:-1}
LAB_SMP=${LAB_SMP:-2}
LAB_ACCEL=${LAB_ACCEL:-tcg}
LAB_DOM0_IP=${LAB_DOM0_IP:-10.10.0.1}
LAB_DOMU_IP=${LAB_DOMU_IP:-10.10.0.2}
LAB_NET_PREFIX=${LAB_NET_PREFIX:-24}
LAB_DOM0_MODULES=${LAB_DOM0_MODULES:-}
LAB_DOMU_MODULES=${LAB_DOMU_MODULES:-}
LAB_DOM0_BINS=${LAB_DOM0_BINS:-}
LAB_DOMU_BINS=${LAB_DOMU_BINS:-}
LAB_XEN_ARGS=${LAB_XEN_ARGS:-}
LAB_DOM0_KARGS=${LAB_DOM0_KARGS:-}
LAB_DOMU_KARGS=${LAB_DOMU_KARGS:-}
LAB_STREAM=${LAB_STREAM:-0}
LAB_DEBUG=${LAB_DEBUG:-0}
LAB_BANNER_TIMEOUT=${LAB_BANNER_TIMEOUT:-60}
case $LAB_ACCEL in
  tcg) LAB_CPU=${LAB_CPU:-max,-smap} ;;   # TCG's SMAP emulation crashes PV Dom0
  kvm) LAB_CPU=${LAB_CPU:-host} ;;
  *) die "LAB_ACCEL must be tcg or kvm" ;;
esac
# Dom0's init kills run.sh after this many seconds, so that it still prints
# the DomU console and the result before QEMU's hard limit.
if [ -z "${LAB_RUN_TIMEOUT:-}" ]; then
  if [ "$LAB_TIMEOUT" -ge 180 ]; then LAB_RUN_TIMEOUT=$((LAB_TIMEOUT - 90)); else LAB_RUN_TIMEOUT=$((LAB_TIMEOUT / 2)); fi
fi
for v in LAB_TIMEOUT LAB_MEM LAB_DOM0_MEM LAB_DOMU_MEM LAB_DOMU_VCPUS LAB_SMP LAB_RUN_TIMEOUT LAB_NET_PREFIX LAB_BANNER_TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number (got '${!v}')"
done
[ "$LAB_MEM" -ge $((LAB_DOM0_MEM + LAB_DOMU_MEM + 96)) ] ||
  die "LAB_MEM=$LAB_MEM MiB is too small for Dom0 ($LAB_DOM0_MEM) + DomU ($LAB_DOMU_MEM) + Xen"
for d in "$LAB_DOM0_DIR" "$LAB_DOMU_DIR"; do
  [ -z "$d" ] || [ -d "$d" ] || die "not a directory: $d"
done
[ -n "$LAB_DOM0_DIR" ] || log "warning: LAB_DOM0_DIR unset; Dom0 has no /lab/run.sh and the result will be FAIL"
[ "$(id -u)" = 0 ] || die "run as root"

mkdir -p "$B"
# one lab at a time: the images, the cache and serial.log live in one build dir
exec 9>"$B/.lock"
if ! flock -n 9; then
  log "another lab.sh holds $B/.lock; waiting (at most $((LAB_TIMEOUT + 120)) s)"
  flock -w $((LAB_TIMEOUT + 120)) 9 || die "timed out waiting for $B/.lock"
fi

# --------------------------------------------------------- 1. host packages
if [ "${SKIP_APT:-0}" != 1 ]; then
  log "apt-get install host tools"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends \
    qemu-system-x86 busybox-static cpio kmod iproute2 bash gzip xz-utils >/dev/null ||
    die "apt-get install failed"
fi
for t in qemu-system-x86_64 cpio depmod modprobe gzip; do
  command -v "$t" >/dev/null || die "$t not found (run without SKIP_APT=1)"
done
BUSYBOX=/bin/busybox
[ -x $BUSYBOX ] && $BUSYBOX --list | grep -qx ping || die "busybox-static not installed"

# ------------------------------------ 2. Xen + tools + kernel (extracted debs)
XENVER=4.17
KVER=${LAB_KVER:-}
if [ -z "$KVER" ]; then
  KVER=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-\(.*\)$/\1/p' | head -1 || true)
fi
if [ -z "$KVER" ]; then   # no apt lists: take what was extracted before
  KVER=$(ls "$B"/xroot/.done-* 2>/dev/null | head -1 | sed 's/.*\.done-//' || true)
fi
[ -n "$KVER" ] || die "cannot determine the kernel version (set LAB_KVER)"
X=$B/xroot
if [ ! -e "$X/.done-$KVER" ]; then
  log "download + extract debs (Xen $XENVER, tools, linux-image-$KVER) into $X"
  rm -rf "$B/debs" "$X"; mkdir -p "$B/debs" "$X"
  (cd "$B/debs" && apt-get download -q \
      xen-hypervisor-$XENVER-amd64 xen-utils-$XENVER xen-utils-common xenstore-utils \
      libxenmisc$XENVER libxenstore4 libxencall1 libxenevtchn1 libxenforeignmemory1 \
      libxengnttab1 libxentoollog1 libxentoolcore1 libxendevicemodel1 libxenhypfs1 \
      libyajl2 linux-image-$KVER 2>&1 | grep -v -e unsandboxed -e '^Get:' || true)
  for p in xen-hypervisor-$XENVER-amd64 xen-utils-$XENVER xenstore-utils linux-image-$KVER; do
    ls "$B"/debs/${p}_*.deb >/dev/null 2>&1 || die "apt-get download of $p failed"
  done
  for d in "$B"/debs/*.deb; do dpkg-deb -x "$d" "$X"; done
  depmod -b "$X" "$KVER"
  rm -rf "$B/debs"
  touch "$X/.done-$KVER"
fi
XEN_GZ=$(ls "$X"/boot/xen-$XENVER*-amd64.gz 2>/dev/null | head -1)
[ -n "$XEN_GZ" ] || die "no Xen hypervisor in $X/boot"
VMLINUZ=$X/boot/vmlinuz-$KVER
[ -e "$VMLINUZ" ] || die "no kernel $VMLINUZ"
XENBIN=/usr/lib/xen-$XENVER/bin
# where ldd finds the extracted Xen libraries (only for ldd: QEMU must not see them)
XLIBS="$X/usr/lib/x86_64-linux-gnu:$X/lib/x86_64-linux-gnu"

# ----------------------------------------------------- image building helpers
# copy the shared libraries an ELF file needs into <root> (host or xroot libs)
copy_libs() {  # root file
  local root=$1 f=$2 out lib dest
  out=$(LD_LIBRARY_PATH=$XLIBS ldd "$f" 2>&1) || return 0          # static or not an executable: nothing to do
  if grep -q "not found" <<<"$out"; then
    die "missing shared libraries for $f:
$(grep 'not found' <<<"$out")"
  fi
  for lib in $(grep -oE '/[^ ]+' <<<"$out"); do
    dest=${lib#"$X"}
    [ -e "$root$dest" ] || install -D -m755 "$lib" "$root$dest"
  done
}
is_elf() { [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
copy_bin() {  # root src [dest]
  local root=$1 src=$2 dest=${3:-$2}
  [ -e "$src" ] || die "no such file: $src"
  install -D -m755 "$src" "$root${dest#"$X"}"
  copy_libs "$root" "$src"
}
copy_user_dir() {  # root dir -> <root>/lab, plus the libraries of its ELF files
  local root=$1 dir=$2 f
  mkdir -p "$root/lab"
  [ -n "$dir" ] || return 0
  cp -a "$dir/." "$root/lab/"
  while IFS= read -r -d '' f; do
    if is_elf "$f"; then copy_libs "$root" "$f"; fi
  done < <(find "$root/lab" -type f -print0)
}
copy_host_bins() {  # root "paths..."
  local root=$1 b
  for b in $2; do copy_bin "$root" "$(command -v "$b" || echo "$b")"; done
}
# kernel modules and their dependencies, in load order, listed in /etc/lab/modules
copy_modules() {  # root modules...
  local root=$1 m line path dest
  shift
  mkdir -p "$root/etc/lab"
  : > "$root/etc/lab/modules"
  for m in "$@"; do
    modprobe -d "$X" -S "$KVER" --show-depends "$m" >"$B/.moddeps" 2>&1 ||
      die "kernel module $m: $(cat "$B/.moddeps")"
    while read -r line; do
      case $line in
        insmod\ *) path=${line#insmod }; path=${path%% *} ;;
        *) continue ;;                      # builtin
      esac
      dest=${path#"$X"}
      case $dest in *.xz) dest=${dest%.xz} ;; *.zst) dest=${dest%.zst} ;; esac
      grep -qxF "$dest" "$root/etc/lab/modules" && continue
      mkdir -p "$(dirname "$root$dest")"
      case $path in
        *.xz) xz -dc "$path" > "$root$dest" ;;
        *.zst) zstd -qdc "$path" > "$root$dest" ;;
        *) cp "$path" "$root$dest" ;;
      esac
      echo "$dest" >> "$root/etc/lab/modules"
    done < "$B/.moddeps"
  done
}
base_root() {  # dir
  rm -rf "$1"
  mkdir -p "$1"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,etc/lab,root,var,lab}
  cp $BUSYBOX "$1/bin/busybox"
  ln -s busybox "$1/bin/sh"
  echo "root:x:0:0:root:/root:/bin/sh" > "$1/etc/passwd"
  echo "root:x:0:" > "$1/etc/group"
  install -m644 "$HERE/guest/lib.sh" "$1/etc/lab/lib.sh"
  # glibc dlopen()s libgcc_s for pthread_cancel / unwinding
  install -D -m644 /lib/x86_64-linux-gnu/libgcc_s.so.1 "$1/lib/x86_64-linux-gnu/libgcc_s.so.1"
}
xenstore_tools() {  # root
  copy_bin "$1" "$X/usr/bin/xenstore" /usr/bin/xenstore
  local t
  for t in read write ls list exists rm chmod watch; do ln -sf xenstore "$1/usr/bin/xenstore-$t"; done
}
lab_env() {  # role -> shell lines sourced by the init scripts
  cat <<EOF
LAB_ROLE=$1
LAB_DOM0_IP=$LAB_DOM0_IP
LAB_DOMU_IP=$LAB_DOMU_IP
LAB_NET_PREFIX=$LAB_NET_PREFIX
LAB_BRIDGE=xenbr0
LAB_DOMU_NAME=domu
LAB_DOMU_CFG=/etc/xen/domu.cfg
LAB_RUN_TIMEOUT=$LAB_RUN_TIMEOUT
LAB_DEBUG=$LAB_DEBUG
EOF
}
mkcpio() {  # dir out.gz
  (cd "$1" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) > "$2"
}

# ------------------------------------------------------------ 3. DomU image
log "build DomU initramfs"
R=$B/domu-root
base_root "$R"
xenstore_tools "$R"
copy_modules "$R" xen-evtchn xen-gntalloc xen-netfront $LAB_DOMU_MODULES
copy_host_bins "$R" "$LAB_DOMU_BINS"
copy_user_dir "$R" "$LAB_DOMU_DIR"
lab_env domu > "$R/etc/lab/env"
install -m755 "$HERE/guest/domu-init.sh" "$R/init"
mkcpio "$R" "$B/domu.cpio.gz"

# ------------------------------------------------------------- 4. Dom0 image
log "build Dom0 initramfs"
R=$B/dom0-root
base_root "$R"
for b in xl xenstored xenconsoled xen-init-dom0 xenconsole libxl-save-helper; do copy_bin "$R" "$X$XENBIN/$b" "$XENBIN/$b"; done
xenstore_tools "$R"
# the hotplug scripts (vif-bridge) want bash, and prefer a full iproute2
copy_bin "$R" /bin/bash /bin/bash
copy_bin "$R" /usr/sbin/ip /usr/sbin/ip
mkdir -p "$R/etc/xen"
cp -r "$X/etc/xen/scripts" "$X/etc/xen/xl.conf" "$R/etc/xen/"
copy_modules "$R" xen-evtchn xen-gntdev xen-gntalloc xen-privcmd xenfs xen-netback bridge $LAB_DOM0_MODULES
copy_host_bins "$R" "$LAB_DOM0_BINS"
copy_user_dir "$R" "$LAB_DOM0_DIR"
# The DomU gets the kernel as a plain ELF: libxc's xz decompression of the
# bzImage costs ~5 s of Dom0 CPU under TCG on every xl create.
if [ ! -s "$B/vmlinux-$KVER" ]; then
  off=$(LC_ALL=C grep -abo -m1 -P '\xfd7zXZ\x00' "$VMLINUZ" | head -1 | cut -d: -f1 || true)
  rm -f "$B/vmlinux.tmp"
  # xz complains about the data after the stream: only the output matters
  [ -z "$off" ] || { tail -c +$((off + 1)) "$VMLINUZ" | xz -dcq > "$B/vmlinux.tmp" 2>/dev/null || true; }
  if [ -s "$B/vmlinux.tmp" ] && is_elf "$B/vmlinux.tmp"; then
    mv "$B/vmlinux.tmp" "$B/vmlinux-$KVER"
  else
    rm -f "$B/vmlinux.tmp"; log "warning: could not extract vmlinux from $VMLINUZ; the DomU boots the bzImage"
  fi
fi
if [ -s "$B/vmlinux-$KVER" ]; then
  install -D -m644 "$B/vmlinux-$KVER" "$R/boot/vmlinuz"
else
  install -D -m644 "$VMLINUZ" "$R/boot/vmlinuz"
fi
install -D -m644 "$B/domu.cpio.gz" "$R/boot/domu.cpio.gz"
cat > "$R/etc/xen/domu.cfg" <<EOF
# PV DomU of the pvgpu Xen lab (generated by tests/xen/lab.sh)
name    = "domu"
type    = "pv"
kernel  = "/boot/vmlinuz"
ramdisk = "/boot/domu.cpio.gz"
extra   = "console=hvc0 rdinit=/init loglevel=4 $LAB_DOMU_KARGS"
memory  = $LAB_DOMU_MEM
vcpus   = $LAB_DOMU_VCPUS
vif     = [ "mac=00:16:3e:0a:0a:02,bridge=xenbr0" ]
on_poweroff = "destroy"
on_reboot   = "destroy"
on_crash    = "destroy"
EOF
lab_env dom0 > "$R/etc/lab/env"
install -m755 "$HERE/guest/dom0-init.sh" "$R/init"
mkcpio "$R" "$B/dom0.cpio.gz"
zcat "$XEN_GZ" > "$B/xen"      # QEMU's multiboot loader wants the plain ELF
cp "$VMLINUZ" "$B/vmlinuz"
log "images: xen $(du -h "$B/xen" | cut -f1), kernel $KVER $(du -h "$B/vmlinuz" | cut -f1), dom0.cpio.gz $(du -h "$B/dom0.cpio.gz" | cut -f1), domu.cpio.gz $(du -h "$B/domu.cpio.gz" | cut -f1)"

# ------------------------------------------------------------------- 5. boot
LOG=$B/serial.log
TIMES=$B/times.txt
: > "$LOG"; : > "$TIMES"
XEN_CMDLINE="console=com1 com1=115200,8n1 loglvl=all guest_loglvl=all console_timestamps=boot"
XEN_CMDLINE+=" dom0_mem=${LAB_DOM0_MEM}M,max:${LAB_DOM0_MEM}M dom0_max_vcpus=$LAB_SMP $LAB_XEN_ARGS"
DOM0_CMDLINE="console=hvc0 earlyprintk=xen rdinit=/init loglevel=4 $LAB_DOM0_KARGS"
QARGS=(-nodefaults -machine q35 -accel "$LAB_ACCEL" -cpu "$LAB_CPU" -m "$LAB_MEM" -smp "$LAB_SMP"
       -display none -monitor none -serial "file:$LOG" -no-reboot
       -kernel "$B/xen" -append "$XEN_CMDLINE"
       -initrd "$B/vmlinuz $DOM0_CMDLINE,$B/dom0.cpio.gz")
printf '%q ' qemu-system-x86_64 "${QARGS[@]}" > "$B/qemu-cmd.txt"; echo >> "$B/qemu-cmd.txt"
log "boot: qemu -accel $LAB_ACCEL -cpu $LAB_CPU -m $LAB_MEM -smp $LAB_SMP (serial -> $LOG, limit ${LAB_TIMEOUT}s, run.sh limit ${LAB_RUN_TIMEOUT}s)"

QPID= TPID=
cleanup() {
  [ -n "$TPID" ] && kill "$TPID" 2>/dev/null || true
  [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null && kill -9 "$QPID" 2>/dev/null || true
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

TQ=$(date +%s%N)
qemu-system-x86_64 "${QARGS[@]}" 2> "$B/qemu-stderr.txt" &
QPID=$!
if [ "$LAB_STREAM" = 1 ]; then tail -n +1 -F "$LOG" 2>/dev/null > >(tr -d '\r') & TPID=$!; fi

# milestones: pattern|name (seconds since QEMU start go to times.txt)
MARKERS=("Xen version|Xen banner"
         "LAB: dom0 init up|Dom0 init up"
         "LAB: dom0 ready|Dom0 services + network ready"
         "LAB: run.sh start|Dom0 run.sh started"
         "LAB: run.sh exited|Dom0 run.sh exited"
         "LAB: RESULT|result line"
         "LAB: DONE|Dom0 done")
declare -A SEEN=()
REASON= DONE_AT=
stop_qemu() {  # reason
  REASON=$1
  log "$1; stopping QEMU (pid $QPID)"
  kill "$QPID" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$QPID" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$QPID" 2>/dev/null || true
}
scan_markers() {  # ms since QEMU start
  local m pat
  for m in "${MARKERS[@]}"; do
    pat=${m%%|*}
    [ -n "${SEEN[$pat]:-}" ] && continue
    if grep -qaF "$pat" "$LOG"; then
      SEEN[$pat]=1
      printf '%6.1f s  %s\n' "$(awk -v m="$1" 'BEGIN{print m/1000}')" "${m#*|}" | tee -a "$TIMES"
    fi
  done
}
while kill -0 "$QPID" 2>/dev/null; do
  ms=$(( ($(date +%s%N) - TQ) / 1000000 ))
  scan_markers "$ms"
  if [ -n "${SEEN[LAB: DONE]:-}" ]; then
    [ -n "$DONE_AT" ] || DONE_AT=$ms
    if [ $((ms - DONE_AT)) -gt 20000 ]; then stop_qemu "Dom0 done but QEMU still running after 20 s"; break; fi
  fi
  if [ -z "${SEEN[Xen version]:-}" ] && [ "$ms" -gt $((LAB_BANNER_TIMEOUT * 1000)) ]; then
    stop_qemu "no Xen banner after ${LAB_BANNER_TIMEOUT} s"; break
  fi
  if grep -qaE '\(XEN\) .*(Hardware Dom0 crashed|Panic on CPU|Domain 0 crashed)|Kernel panic - not syncing' "$LOG" &&
     [ -z "${SEEN[LAB: run.sh exited]:-}" ]; then
    sleep 1; stop_qemu "Xen or Dom0 crashed"; break
  fi
  if grep -qa "internal error" "$B/qemu-stderr.txt" 2>/dev/null; then
    stop_qemu "QEMU: $(head -c 200 "$B/qemu-stderr.txt" | tr '\n' ' ')"; break
  fi
  if [ "$ms" -gt $((LAB_TIMEOUT * 1000)) ]; then stop_qemu "TIMEOUT after ${LAB_TIMEOUT} s"; break; fi
  sleep 0.5
done
set +e; wait "$QPID"; QRC=$?; set -e
QPID=
scan_markers $(( ($(date +%s%N) - TQ) / 1000000 ))
QEMU_S=$(elapsed "$TQ")
printf '%6.1f s  QEMU exited (status %s)\n' "$QEMU_S" "$QRC" | tee -a "$TIMES"
if [ -n "$TPID" ]; then sleep 0.5; kill "$TPID" 2>/dev/null || true; TPID=; fi

# ----------------------------------------------------------------- 6. result
RESULT_LINE=$(grep -aoE 'LAB: RESULT (PASS|FAIL rc=[0-9a-z]+)' "$LOG" | tail -1 || true)
if [ "$RESULT_LINE" = "LAB: RESULT PASS" ]; then
  RC=0
elif [ -n "$RESULT_LINE" ]; then
  RC=1
else
  RC=2; REASON=${REASON:-"QEMU exited without a result line"}
fi

echo "================================ lab summary ================================"
grep -aE '^LAB: |^LAB-DOMU: |\(XEN\) .*(Hardware Dom0|Panic|FATAL)|Kernel panic' "$LOG" | tr -d '\r' | cut -c1-160 || true
if [ "$RC" != 0 ]; then
  echo "----- last 40 lines of the serial log -----"
  tail -n 40 "$LOG" | tr -d '\r' | cut -c1-200
  if [ -s "$B/qemu-stderr.txt" ]; then
    echo "----- QEMU stderr -----"
    head -n 20 "$B/qemu-stderr.txt"
  fi
fi
echo "----- times (seconds since QEMU start) -----"
cat "$TIMES"
echo "serial log:    $LOG"
echo "QEMU:          $QEMU_S s ($LAB_ACCEL, -cpu $LAB_CPU, $LAB_SMP vCPUs, host has $(nproc) CPUs)"
echo "total lab.sh:  $(elapsed) s"
case $RC in
  0) echo "LAB PASS" ;;
  1) echo "LAB FAIL: Dom0 run.sh: ${RESULT_LINE#LAB: RESULT }" ;;
  *) echo "LAB ERROR: $REASON" ;;
esac
exit $RC
