#!/usr/bin/env bash
# Everything CI checks, in order. Extra arguments go to `cargo test`,
# e.g. scripts/test.sh -p tests -- --nocapture
#
# DATABASE_URL is the admin URL: the tests create (and drop) their own databases on it.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_wasm_toolchain
ensure_chromium
ensure_postgres

# The browser tests serve frontend/dist.
build_frontend release

step "cargo build -p protocol --target wasm32-unknown-unknown"
cargo build -p protocol --target wasm32-unknown-unknown

step "cargo fmt --all --check"
cargo fmt --all --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace $*"
cargo test --workspace "$@"

step "all checks passed"
