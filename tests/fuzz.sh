#!/usr/bin/env bash
# Coverage-guided fuzzing of everything pvgpu parses from a peer, as CI runs
# it (tests/all.sh calls this): builds every target of fuzz/ once, then runs
# each for a bounded time on a copy of its committed corpus, and fails on
# any finding (a panic, a sanitizer report, a leak, a timeout, running out
# of memory).
#
#   bash tests/fuzz.sh                        # 30 s per target
#   PVGPU_FUZZ_SECONDS=300 bash tests/fuzz.sh # longer
#   PVGPU_FUZZ_TARGETS="ring_consumer" bash tests/fuzz.sh
#
# Toolchain: the machine's stable Rust. cargo-fuzz passes unstable flags to
# rustc (-Zsanitizer=address; the coverage instrumentation itself is
# stable -C flags), which a stable compiler accepts with RUSTC_BOOTSTRAP=1;
# stable's rust-std ships the AddressSanitizer runtime for
# x86_64-unknown-linux-gnu, so the targets run under ASan. libFuzzer's C++
# part is compiled by libfuzzer-sys's build script (g++). No nightly is
# needed. Builds go to fuzz/target (the fuzz crate is its own workspace).
#
# A finding leaves its input in fuzz/artifacts/<target>/ (ignored by git);
# reproduce it with `cargo fuzz run <target> fuzz/artifacts/<target>/<file>`
# (RUSTC_BOOTSTRAP=1 on stable). The committed corpus is never written:
# what the runs find goes to a temporary copy.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${PVGPU_FUZZ_SECONDS:-20}
targets=(${PVGPU_FUZZ_TARGETS:-request_decoder ring_consumer module_image local_handshake xenstore_reply tcp_opening tcp_stream snapshot_file})
cargo_fuzz=0.13.2

# Longest input per target: a request with a modest tail; a program of ring
# operations; the committed test kernels (a 20 KiB cubin and fatbin) with
# room to grow; a hello and its fd choices; a XenStore session's replies;
# a snapshot of a small session.
declare -A max_len=([request_decoder]=8192 [ring_consumer]=4096 [module_image]=65536 [local_handshake]=512 [xenstore_reply]=8192 [tcp_opening]=512 [tcp_stream]=16384 [snapshot_file]=8192)

if ! cargo fuzz --version 2>/dev/null | grep -q " $cargo_fuzz\$"; then
  cargo install cargo-fuzz --locked --version "$cargo_fuzz"
fi
export RUSTC_BOOTSTRAP=1

start=$SECONDS
# Release, with debug assertions and overflow checks, under ASan; 16
# codegen units (cargo-fuzz defaults to 1) build the large dependencies
# (cudarc, through the backend) in parallel even with one cargo job.
cargo fuzz build --release --debug-assertions --codegen-units 16
echo "built in $((SECONDS - start)) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  cp -r "fuzz/corpus/$t" "$work/$t"
  log="$work/$t.log"
  # -timeout: an input that runs 10 s is a hang; -rss_limit_mb: and also
  # the largest single allocation libFuzzer lets through.
  if cargo fuzz run --release --debug-assertions --codegen-units 16 "$t" "$work/$t" -- \
    -max_total_time="$seconds" -max_len="${max_len[$t]}" -rss_limit_mb=2560 -timeout=10 \
    -print_final_stats=1 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  printf '%-16s %s: %s executions in %s s, %s, corpus %s inputs\n' "$t" "$status" "${execs:-?}" "$seconds" "${cov:-cov: ?}" \
    "$(find "$work/$t" -type f | wc -l)"
  if [ "$status" != ok ]; then
    tail -n 60 "$log" >&2
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found something in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzzing: no findings ($((SECONDS - start)) s in all)"
