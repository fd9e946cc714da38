#!/usr/bin/env bash
# On a machine with two GPUs: one program, two backends (docs/operations.md,
# "Several backends for one program"). Backend A serves GPU 0 over the
# local transport, backend B GPU 1 over TCP; the program's
# PVGPU_BACKEND lists both. Runs tests/runtime/two_backends.cu (built here
# with nvcc) and tests/gpu/two_backends.py (PyTorch on cuda:0 and cuda:1,
# with copies between them) and tests/gpu/peer_bandwidth.cu (copies of 1
# to 256 MiB between the devices, timed) natively and through pvgpu, and
# compares their outputs; the timings they print are reported beside.
# With PEERS=1 each backend lists the other (--peer), so copies between
# them go from backend to backend; with PEERS=0 they pass through the
# program.
#
#   MEMORY=placed|driver PEERS=0|1 tests/gpu/two_backends.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds release builds of pvgpu-backend and libpvgpu_cuda.so.
# OUT_DIR receives two_backends.txt.
. "$(dirname "$0")/start.sh"
r=$out/two_backends.txt
memory=${MEMORY:-placed}
peers=${PEERS:-0}
mode="$memory, peers=$peers"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >> "$r"
nvcc -O2 -gencode arch=compute_90,code=[sm_90,compute_90] -o "$w/two_backends" "$root/tests/runtime/two_backends.cu" || echo "nvcc failed" >> "$r"
nvcc -O2 -gencode arch=compute_90,code=[sm_90,compute_90] -o "$w/peer_bandwidth" "$root/tests/gpu/peer_bandwidth.cu" || echo "nvcc failed" >> "$r"
head -c 32 /dev/urandom | base64 > "$w/key"; chmod 600 "$w/key"
port=$((20000 + RANDOM % 10000))
start() { # name, GPU, listen address, the other backend's --peer (PEERS=1)
  local peer=()
  [ "$peers" = 1 ] && peer=(--peer "$4")
  CUDA_VISIBLE_DEVICES=$2 "$bin/pvgpu-backend" --listen "$3" --executor cuda --device-memory "$memory" \
    --control "unix:$w/$1-ctl.sock" --tcp-key "$w/key" --image-cache off "${peer[@]}" > "$out/backend-$1-$memory-$peers.log" 2>&1 &
  echo $!
}
a=$(start a 0 "local:$w/a.sock" "name=b,control=unix:$w/b-ctl.sock,address=tcp:127.0.0.1:$port")
b=$(start b 1 "tcp:127.0.0.1:$port" "name=a,control=unix:$w/a-ctl.sock,address=local:$w/a.sock")
for _ in $(seq 200); do [ -S "$w/a.sock" ] && [ -S "$w/b-ctl.sock" ] && break; sleep 0.1; done
sleep 1
through() {
  PVGPU_LOG=info PVGPU_BACKEND="local:$w/a.sock,tcp:127.0.0.1:$port" PVGPU_TCP_KEY="$w/key" LD_LIBRARY_PATH="$w/lib" "$@"
}
compare() { # name, native output, pvgpu output (timing lines start with "time"; the library's log lines are left out)
  if diff <(grep -v -E '^time|directly|INFO|WARN' "$2") <(grep -v -E '^time|directly|INFO|WARN' "$3") > "$w/diff" 2>&1; then
    echo "$1 ($mode): same output as native" >> "$r"
  else
    echo "$1 ($mode): DIFFERENT from native:" >> "$r"; head -20 "$w/diff" >> "$r"
  fi
  { echo "  native:"; grep -E '^time|directly' "$2" | sed 's/^/    /'; echo "  pvgpu:"; grep -E '^time|directly' "$3" | sed 's/^/    /'; } >> "$r"
}
"$w/two_backends" 2 > "$w/n1.txt" 2>&1
through "$w/two_backends" 2 > "$w/p1.txt" 2>&1
tail -3 "$w/p1.txt" | sed 's/^/  last lines: /' >> "$r"
compare two_backends.cu "$w/n1.txt" "$w/p1.txt"
python3 "$root/tests/gpu/two_backends.py" > "$w/n2.txt" 2>&1
through python3 "$root/tests/gpu/two_backends.py" > "$w/p2.txt" 2>&1
tail -3 "$w/p2.txt" | sed 's/^/  last lines: /' >> "$r"
compare two_backends.py "$w/n2.txt" "$w/p2.txt"
"$w/peer_bandwidth" > "$w/n3.txt" 2>&1
through "$w/peer_bandwidth" > "$w/p3.txt" 2>&1
tail -1 "$w/p3.txt" | sed 's/^/  last line: /' >> "$r"
compare peer_bandwidth.cu "$w/n3.txt" "$w/p3.txt"
echo "  copies that passed through the program: $(cat "$w"/p*.txt | grep -c 'passes through the program')" >> "$r"
kill "$a" "$b"; wait 2>/dev/null
for f in n1 p1 n2 p2 n3 p3; do cp "$w/$f.txt" "$out/$f-$memory-$peers.txt" 2>/dev/null; done
