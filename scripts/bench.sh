#!/usr/bin/env bash
# The benchmark: a release server against a fresh database, loads against the API's hot
# paths and pgbench running the same SQL, scale, agent-step, memory and bundle figures.
# Prints one report (Markdown tables). `--quick` shortens each load.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_postgres
ensure_pgbench
ensure_wrk
if [ ! -f frontend/dist/pkg/frontend_bg.wasm ]; then
    ensure_wasm_toolchain
    build_frontend release
fi

step "cargo build --release -p tests --bins"
cargo build --release -p tests --bins

step "running the benchmark (a few minutes)"
exec "$(_target_dir)/release/bench" "$@"
