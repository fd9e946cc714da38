#!/usr/bin/env bash
# Failed device assertions, natively and through pvgpu (one backend, local
# and TCP): tests/runtime/device_assert.cu (built here with nvcc) and a
# PyTorch index out of bounds on the GPU. Their standard output, and the
# assertion lines of their standard error (what the driver writes), must
# be the same.
#
#   tests/gpu/device_assert.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds release builds of pvgpu-backend, libpvgpu_cuda.so and
# libpvgpu_nvml.so. OUT_DIR receives device_assert.txt.
. "$(dirname "$0")/start.sh"
r=$out/device_assert.txt
nvcc -O2 -gencode arch=compute_90,code=[sm_90,compute_90] -o "$w/device_assert" "$root/tests/runtime/device_assert.cu" || echo "nvcc failed" >> "$r"
cat > "$w/index.py" <<'PY'
import torch
x = torch.zeros(3, device="cuda")
i = torch.tensor([5], device="cuda")
try:
    y = x[i]
    torch.cuda.synchronize()
    print("no error")
except RuntimeError as e:
    print("RuntimeError:", str(e).splitlines()[0])
PY
head -c 32 /dev/urandom | base64 > "$w/key"; chmod 600 "$w/key"
port=$((20000 + RANDOM % 10000))
"$bin/pvgpu-backend" --listen "local:$w/b.sock" --listen "tcp:127.0.0.1:$port" --executor cuda --control "unix:$w/ctl.sock" \
  --tcp-key "$w/key" > "$out/backend.log" 2>&1 &
b=$!
for _ in $(seq 200); do [ -S "$w/b.sock" ] && break; sleep 0.1; done
sleep 1
run() { # name, where (native|local|tcp), command...
  local name=$1 where=$2; shift 2
  case $where in
    native) "$@" > "$w/$name-$where.out" 2> "$w/$name-$where.err" ;;
    local) PVGPU_BACKEND="local:$w/b.sock" LD_LIBRARY_PATH="$w/lib" "$@" > "$w/$name-$where.out" 2> "$w/$name-$where.err" ;;
    tcp) PVGPU_BACKEND="tcp:127.0.0.1:$port" PVGPU_TCP_KEY="$w/key" LD_LIBRARY_PATH="$w/lib" "$@" > "$w/$name-$where.out" 2> "$w/$name-$where.err" ;;
  esac
  echo "$name $where: exit $?" >> "$r"
}
for where in native local tcp; do
  run program "$where" "$w/device_assert"
  run torch "$where" python3 "$w/index.py"
done
kill "$b"; wait 2>/dev/null
for name in program torch; do
  echo "$name, native standard output:" >> "$r"; sed 's/^/  /' "$w/$name-native.out" >> "$r"
  echo "$name, native assertion lines of standard error:" >> "$r"; grep Assertion "$w/$name-native.err" | head -3 | sed 's/^/  /' >> "$r"
  for where in local tcp; do
    if diff "$w/$name-native.out" "$w/$name-$where.out" > /dev/null && diff <(grep Assertion "$w/$name-native.err") <(grep Assertion "$w/$name-$where.err") > /dev/null; then
      echo "$name $where: same standard output and assertion lines as native ($(grep -c Assertion "$w/$name-$where.err") lines)" >> "$r"
    else
      echo "$name $where: DIFFERENT; standard output:" >> "$r"; sed 's/^/  /' "$w/$name-$where.out" >> "$r"
      echo "  standard error:" >> "$r"; head -5 "$w/$name-$where.err" | sed 's/^/  /' >> "$r"
    fi
  done
done
