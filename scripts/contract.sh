#!/usr/bin/env bash
# The API contract test: Schemathesis, driven by the server's own /api/openapi.json,
# against a live server with dev sign-in on loopback and a database of its own. Every
# check is on, in every phase (examples, coverage, fuzzing, stateful); any finding fails.
#
# Usage: scripts/contract.sh [SERVER_BINARY]
#   SERVER_BINARY  default: the debug toolgate-e2e that `cargo test` builds (the same
#                  program as toolgate), so this script never builds anything.
# Environment
#   DATABASE_URL                admin URL; the test creates and drops toolgate_contract on it
#   CONTRACT_MAX_EXAMPLES       test cases per operation and phase (default 40)
#   CONTRACT_MAX_SECONDS        time budget of the whole Schemathesis run (default 300)
#   CONTRACT_SEED               Schemathesis seed (default: a fixed one, so the test command
#                               checks the same cases every run; `random` explores new ones)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

binary="${1:-$(_target_dir)/debug/toolgate-e2e}"
[ -x "$binary" ] || die "$binary is missing: build it with \`cargo test --workspace --no-run\`"

[ -n "${DATABASE_URL:-}" ] || ensure_postgres
ensure_schemathesis

data_dir="${TOOLGATE_DATA_DIR:-.toolgate}"
mkdir -p "$data_dir"
work="$(mktemp -d)"
admin="$(_url_admin "$DATABASE_URL")"
query=""
case "$admin" in *\?*) query="?${admin#*\?}" ;; esac
db_url="${admin%/postgres*}/toolgate_contract$query"
server_pid=""

drop_database() {
    PGCONNECT_TIMEOUT=5 psql -w -X -q -d "$admin" \
        -c 'DROP DATABASE IF EXISTS toolgate_contract WITH (FORCE)' >/dev/null
}

cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    drop_database || true
    rm -rf "$work"
}
trap cleanup EXIT

step "starting the server for the contract test"
drop_database
PGCONNECT_TIMEOUT=5 psql -w -X -q -d "$admin" -c 'CREATE DATABASE toolgate_contract' >/dev/null
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
# The rate limit is raised so the fuzzer reaches the handlers instead of spending its
# cases on 429s; the documented 429 is still what a real limit answers.
env -i PATH="$PATH" HOME="${HOME:-/tmp}" \
    DATABASE_URL="$db_url" \
    TOOLGATE_BIND="127.0.0.1:$port" \
    TOOLGATE_DATA_DIR="$work" \
    TOOLGATE_DEV_AUTH=1 \
    TOOLGATE_RATE_PER_MINUTE=1000000 \
    TOOLGATE_RATE_BURST=100000 \
    TOOLGATE_LOG="${TOOLGATE_LOG:-warn}" \
    "$binary" >"$work/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 1 100); do
    if curl -fsS "$base/readyz" >/dev/null 2>&1; then
        break
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; die "the server exited"; }
    sleep 0.2
done
curl -fsS "$base/readyz" >/dev/null || { cat "$work/server.log" >&2; die "the server is not ready"; }

token="$(curl -fsS -H 'Content-Type: application/json' -d '{"user_id": "contract-test"}' \
    "$base/api/dev/token" | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')"

# Python before 3.11.8 keeps the ast module's recursion depth in shared state, and
# Hypothesis parses lambdas from several worker threads at once: now and then the run
# dies with "SystemError: AST constructor recursion depth mismatch" (CPython issue
# 106905) without the API having done anything wrong. One worker there.
workers=2
if ! "$(dirname "$SCHEMATHESIS")/python" -c 'import sys; sys.exit(sys.version_info < (3, 11, 8))'; then
    workers=1
    note "one Schemathesis worker: $("$(dirname "$SCHEMATHESIS")/python" --version) has the ast threading bug fixed in 3.11.8"
fi

step "schemathesis run (all checks; examples, coverage, fuzzing, stateful)"
args=(
    run "$base/api/openapi.json"
    --url "$base"
    --header "Authorization: Bearer $token"
    --checks all
    --phases examples,coverage,fuzzing,stateful
    --max-examples "${CONTRACT_MAX_EXAMPLES:-40}"
    --max-time "${CONTRACT_MAX_SECONDS:-300}"
    --workers "$workers"
    # An open event stream never ends: it is read for this long, then judged.
    --request-timeout 3
    --generation-database none
    --report junit
    --report-dir "$data_dir/contract-report"
    --no-color
)
seed="${CONTRACT_SEED:-20261123}"
if [ "$seed" != random ]; then
    args+=(--seed "$seed")
fi
status=0
# The hooks excuse one documented answer (see the file); everything else is a finding.
SCHEMATHESIS_HOOKS="$TOOLGATE_ROOT/tests/contract/hooks.py" "$SCHEMATHESIS" "${args[@]}" || status=$?
if [ "$status" -ne 0 ]; then
    note "server log (last 50 lines):"
    tail -n 50 "$work/server.log" >&2
    die "the contract test found problems (report in $data_dir/contract-report)"
fi
note "no findings"
