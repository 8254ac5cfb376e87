#!/usr/bin/env bash
# The benchmark: a release server against a fresh database, loads against the API's hot
# paths and pgbench running the same SQL, scale, agent-step, memory and bundle figures,
# then the context replay (a long scripted conversation through the server and a mock
# model: request sizes against the whole history, and what each request kept).
# Prints one report (Markdown tables). `--quick` shortens each load; `--context` runs
# only the context replay, `--step` only the agent step (its time and its transactions),
# `--reads` only the two hot reads against pgbench, the two taking turns for three rounds.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

context_only=0
step_only=0
reads_only=0
bench_args=()
for arg in "$@"; do
    case "$arg" in
        --context) context_only=1 ;;
        --step) step_only=1; bench_args+=("$arg") ;;
        --reads) reads_only=1; bench_args+=("$arg") ;;
        *) bench_args+=("$arg") ;;
    esac
done

ensure_postgres
if [ "$context_only" = 0 ] && [ "$step_only" = 0 ]; then
    ensure_pgbench
    ensure_wrk
    if [ ! -f frontend/dist/pkg/frontend_bg.wasm ]; then
        ensure_wasm_toolchain
        build_frontend release
    fi
fi

step "cargo build --release -p tests --bins"
cargo build --release -p tests --bins
bin="$(_target_dir)/release"

if [ "$context_only" = 0 ]; then
    step "running the benchmark (a few minutes)"
    "$bin/bench" ${bench_args[@]+"${bench_args[@]}"}
fi
if [ "$step_only" = 1 ] || [ "$reads_only" = 1 ]; then
    exit 0
fi
step "replaying a long conversation (under a minute)"
exec "$bin/context-replay"
