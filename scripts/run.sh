#!/usr/bin/env bash
# Set up everything toolgate needs and run it locally:
#   wasm toolchain, PostgreSQL (DATABASE_URL), the browser bundle, the release server.
# Any variable you set yourself (DATABASE_URL, TOOLGATE_BIND, ...) wins over the defaults.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_wasm_toolchain
ensure_postgres
build_frontend release

step "cargo build --release -p backend"
cargo build --release -p backend

export TOOLGATE_DEV_AUTH="${TOOLGATE_DEV_AUTH:-1}"
export TOOLGATE_BIND="${TOOLGATE_BIND:-127.0.0.1:3000}"
export TOOLGATE_TOOLS="${TOOLGATE_TOOLS:-tools.example.toml}"
export TOOLGATE_WEB_DIR="${TOOLGATE_WEB_DIR:-frontend/dist}"
export TOOLGATE_DATA_DIR="${TOOLGATE_DATA_DIR:-.toolgate}"
mkdir -p "$TOOLGATE_DATA_DIR"

# Address to open in a browser: a wildcard bind is reachable through loopback.
open_addr="$TOOLGATE_BIND"
case "$open_addr" in
    0.0.0.0:*) open_addr="127.0.0.1:${open_addr#0.0.0.0:}" ;;
    "[::]:"*) open_addr="[::1]:${open_addr#\[::\]:}" ;;
esac

# Demo mode: sample databases and a QuickBooks stand-in, so the example tools work
# offline with no accounts.
export TOOLGATE_DEMO="${TOOLGATE_DEMO:-1}"
export QUICKBOOKS_BASE_URL="${QUICKBOOKS_BASE_URL:-http://$open_addr/demo/quickbooks}"
export QUICKBOOKS_ACCESS_TOKEN="${QUICKBOOKS_ACCESS_TOKEN:-demo-token}"
TOOLGATE_DEMO_SQL_PRODUCTION_URL="${TOOLGATE_DEMO_SQL_PRODUCTION_URL:-$(demo_reader_url "$DATABASE_URL" production)}"
TOOLGATE_DEMO_SQL_STAGING_URL="${TOOLGATE_DEMO_SQL_STAGING_URL:-$(demo_reader_url "$DATABASE_URL" staging)}"
TOOLGATE_DEMO_SQL_DEVELOPMENT_URL="${TOOLGATE_DEMO_SQL_DEVELOPMENT_URL:-$(demo_reader_url "$DATABASE_URL" development)}"
export TOOLGATE_DEMO_SQL_PRODUCTION_URL TOOLGATE_DEMO_SQL_STAGING_URL TOOLGATE_DEMO_SQL_DEVELOPMENT_URL

bin="$(_target_dir)/release/toolgate"
echo "toolgate: open http://$open_addr (offline model, dev sign-in)" >&2
exec "$bin"
