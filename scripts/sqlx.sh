#!/usr/bin/env bash
# Compile-time-checked SQL. Every query of the server is a `sqlx::query!`-family macro,
# checked against the schema when it compiles; the statements' descriptions are kept in
# backend/.sqlx so the backend builds with no database (SQLX_OFFLINE=true, set in
# .cargo/config.toml).
#
# Usage: scripts/sqlx.sh check     fail when backend/.sqlx does not match the queries and
#                                  the migrations (what the test command runs)
#        scripts/sqlx.sh prepare   rewrite backend/.sqlx after changing a query or a migration
#
# Both apply the migrations to a scratch database, toolgate_sqlx, on the Postgres that
# ensure_postgres finds (DATABASE_URL's server when set), and drop it afterwards.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

mode="${1:-check}"
case "$mode" in
    check | prepare) ;;
    *) die "usage: scripts/sqlx.sh check|prepare" ;;
esac

ensure_postgres
ensure_sqlx_cli

admin="$(_url_admin "$DATABASE_URL")"
query=""
case "$admin" in *\?*) query="?${admin#*\?}" ;; esac
scratch="${admin%/postgres*}/toolgate_sqlx$query"

drop_scratch() {
    PGCONNECT_TIMEOUT=5 psql -w -X -q -d "$admin" \
        -c 'DROP DATABASE IF EXISTS toolgate_sqlx WITH (FORCE)' >/dev/null
}
trap 'drop_scratch || true' EXIT

step "applying the migrations to a scratch database (toolgate_sqlx)"
drop_scratch
PGCONNECT_TIMEOUT=5 psql -w -X -q -d "$admin" -c 'CREATE DATABASE toolgate_sqlx' >/dev/null
cargo sqlx migrate run --source migrations --database-url "$scratch" >&2

cd backend
if [ "$mode" = check ]; then
    step "cargo sqlx prepare --check (backend/.sqlx matches every query)"
    DATABASE_URL="$scratch" cargo sqlx prepare --check
    note "backend/.sqlx is up to date"
else
    step "cargo sqlx prepare (rewriting backend/.sqlx)"
    DATABASE_URL="$scratch" cargo sqlx prepare
    note "backend/.sqlx rewritten; commit it with the change"
fi
