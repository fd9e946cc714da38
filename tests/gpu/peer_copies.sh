#!/usr/bin/env bash
# Copies between two backends of one program, from backend to backend
# (each backend lists the other with --peer) against through the program
# (no --peer), on one GPU or two: backend A serves the first GPU over the
# local transport, backend B the last over TCP on loopback; with one GPU
# both serve it, and the program sees it twice. Runs
# tests/gpu/peer_bandwidth.cu (copies of 1 to 256 MiB between the
# devices, digests and rates) natively and both ways through pvgpu, and
# tests/runtime/two_backends.cu and tests/gpu/two_backends.py through
# pvgpu both ways (natively too where there are two GPUs).
#
#   tests/gpu/peer_copies.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds release builds of pvgpu-backend and libpvgpu_cuda.so.
# OUT_DIR receives peer_copies.txt and each run's output. Without a GPU:
# EXECUTOR=host NATIVE=0 NVCC=target/cuda-toolkit/bin/nvcc
# NVCC_ARGS=-Ltarget/cuda-toolkit/lib (the host executor's kernels are
# not the programs', so only what the copies carry is checked).
. "$(dirname "$0")/start.sh"
r=$out/peer_copies.txt
executor=${EXECUTOR:-cuda}
native=${NATIVE:-1}
nvcc=${NVCC:-nvcc}
if [ "$executor" = cuda ]; then
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >> "$r"
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  arch=(-gencode "arch=compute_90,code=[sm_90,compute_90]")
else
  gpus=1 arch=()
fi
last=$((gpus - 1))
for p in peer_bandwidth:tests/gpu/peer_bandwidth.cu two_backends:tests/runtime/two_backends.cu; do
  # shellcheck disable=SC2086
  "$nvcc" -O2 "${arch[@]}" ${NVCC_ARGS:-} -o "$w/${p%%:*}" "$root/${p#*:}" || echo "nvcc ${p#*:} failed" >> "$r"
done
head -c 32 /dev/urandom | base64 > "$w/key"; chmod 600 "$w/key"
port=$((20000 + RANDOM % 10000))
strip_logs() { grep -v -E '^time|directly|INFO|WARN|^devices:' "$1"; }
run_all() { # peers (0|1)
  local peers=$1 pa=() pb=()
  if [ "$peers" = 1 ]; then
    pa=(--peer "name=b,control=unix:$w/b-ctl.sock,address=tcp:127.0.0.1:$port")
    pb=(--peer "name=a,control=unix:$w/a-ctl.sock,address=local:$w/a.sock")
  fi
  rm -f "$w"/*.sock
  CUDA_VISIBLE_DEVICES=0 "$bin/pvgpu-backend" --listen "local:$w/a.sock" --executor "$executor" --control "unix:$w/a-ctl.sock" \
    --tcp-key "$w/key" --image-cache off "${pa[@]}" > "$out/backend-a-$peers.log" 2>&1 &
  local a=$!
  CUDA_VISIBLE_DEVICES=$last "$bin/pvgpu-backend" --listen "tcp:127.0.0.1:$port" --executor "$executor" --control "unix:$w/b-ctl.sock" \
    --tcp-key "$w/key" --image-cache off "${pb[@]}" > "$out/backend-b-$peers.log" 2>&1 &
  local b=$!
  for _ in $(seq 200); do [ -S "$w/a.sock" ] && [ -S "$w/b-ctl.sock" ] && break; sleep 0.1; done
  sleep 1
  local progs=("peer_bandwidth" "two_backends 2")
  [ "$executor" = cuda ] && progs+=("python3 $root/tests/gpu/two_backends.py")
  for prog in "${progs[@]}"; do
    local name=${prog%% *}; name=${name##*/}; [ "$name" = python3 ] && name=two_backends_py
    local cmd=$prog; [ "${prog:0:7}" != python3 ] && cmd="$w/$prog"
    PVGPU_LOG=info PVGPU_BACKEND="local:$w/a.sock,tcp:127.0.0.1:$port" PVGPU_TCP_KEY="$w/key" LD_LIBRARY_PATH="$w/lib" \
      $cmd > "$out/$name-peers$peers.txt" 2>&1
    echo "$name, peers=$peers: exit $?, $(grep -c 'passes through the program' "$out/$name-peers$peers.txt") notes of copies through the program; $(tail -1 "$out/$name-peers$peers.txt")" >> "$r"
  done
  kill "$a" "$b"; wait 2>/dev/null
}
[ "$native" = 1 ] && "$w/peer_bandwidth" > "$out/peer_bandwidth-native.txt" 2>&1
if [ "$native" = 1 ] && [ "$gpus" -ge 2 ]; then
  "$w/two_backends" 2 > "$out/two_backends-native.txt" 2>&1
  python3 "$root/tests/gpu/two_backends.py" > "$out/two_backends_py-native.txt" 2>&1
fi
run_all 0
run_all 1
for name in peer_bandwidth two_backends two_backends_py; do
  [ -f "$out/$name-peers0.txt" ] || continue
  ref=$out/$name-native.txt; [ -f "$ref" ] || ref=$out/$name-peers0.txt
  for peers in 0 1; do
    f=$out/$name-peers$peers.txt
    [ "$f" = "$ref" ] && continue
    if diff <(strip_logs "$ref") <(strip_logs "$f") > "$w/diff"; then
      echo "$name, peers=$peers: same output as $(basename "$ref" .txt)" >> "$r"
    else
      echo "$name, peers=$peers: DIFFERENT from $(basename "$ref" .txt):" >> "$r"; head -10 "$w/diff" >> "$r"
    fi
  done
done
for f in "$out"/peer_bandwidth-*.txt "$out"/two_backends*.txt; do
  echo "$(basename "$f" .txt):" >> "$r"; grep -E '^time' "$f" | sed 's/^/  /' >> "$r"
done
