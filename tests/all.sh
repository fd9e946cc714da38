#!/usr/bin/env bash
# The whole test suite, as CI runs it (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }

step "format and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings

step "unit, property, CLI and end-to-end tests (embedded backend, one thread per session)"
cargo test --workspace

step "end-to-end suite again, every session in its own worker process"
PVGPU_TEST_ISOLATION=process cargo test -p pvgpu-tests --test e2e

step "loom model of the ring's index protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p pvgpu-ring --test loom --release

step "all tests passed"
