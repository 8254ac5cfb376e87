# shellcheck shell=bash
# Helpers shared by scripts/run.sh and scripts/test.sh. Source this file; do not run it.
#
# Functions
#   repo_root                print the repository root (absolute path)
#   ensure_wasm_toolchain    wasm32-unknown-unknown target + the pinned wasm-bindgen and
#                              wasm-split CLIs
#   ensure_chromium          chromium + chromedriver (Debian packages)
#   ensure_postgres          find or start a Postgres, export DATABASE_URL, create its database:
#                              1. DATABASE_URL if set (it must answer pg_isready)
#                              2. a server on 127.0.0.1:5432 where user postgres logs in without
#                                 a password -> postgres://postgres@127.0.0.1:5432/toolgate
#                              3. a private cluster in $TOOLGATE_DATA_DIR/pgdata (trust auth,
#                                 127.0.0.1 only, first free port from 55432, started if stopped)
#   stop_private_postgres    stop that private cluster if it is running
#   build_frontend KIND      build the browser bundle into frontend/dist (KIND: release | dev)
#   ensure_schemathesis      the pinned Schemathesis (PyPI) in a venv under $TOOLGATE_DATA_DIR;
#                              exports SCHEMATHESIS
#   ensure_sqlx_cli          `cargo sqlx` at the version Cargo.lock pins (crates.io)
#
# Environment
#   DATABASE_URL               used as is when set (must answer pg_isready)
#   TOOLGATE_DATA_DIR          local state folder (default .toolgate, relative to the repo root);
#                              a private Postgres cluster lives in $TOOLGATE_DATA_DIR/pgdata
#   TOOLGATE_FORCE_PRIVATE_PG  =1: ignore DATABASE_URL and 127.0.0.1:5432 and always use the
#                              private cluster (meant for testing ensure_postgres itself)
#   WASM_BINDGEN_VERSION       override the wasm-bindgen version read from Cargo.lock
#   WASM_SPLIT_CLI_VERSION     override the pinned wasm-split CLI version
#   CARGO_TARGET_DIR           respected when looking for build output

# ---------------------------------------------------------------------------
# Basics

step() { printf '==> %s\n' "$*" >&2; }
note() { printf '    %s\n' "$*" >&2; }
die() {
    printf 'error: %s\n' "$*" >&2
    return 1
}

repo_root() {
    local here
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
    printf '%s\n' "$here"
}

TOOLGATE_ROOT="$(repo_root)"

# cargo installs binaries here; make sure they are found in this shell.
_add_cargo_bin_to_path() {
    local bin="${CARGO_HOME:-$HOME/.cargo}/bin"
    case ":$PATH:" in
        *":$bin:"*) ;;
        *) if [ -d "$bin" ]; then PATH="$bin:$PATH"; export PATH; fi ;;
    esac
}

_target_dir() {
    local dir="${CARGO_TARGET_DIR:-target}"
    case "$dir" in
        /*) printf '%s\n' "$dir" ;;
        *) printf '%s\n' "$TOOLGATE_ROOT/$dir" ;;
    esac
}

# Run a command as root: directly when root, through sudo when available.
_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        return 127
    fi
}

# apt_install PKG... — install Debian packages, or explain what to install.
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        die "apt-get not found; please install these packages yourself: $*"
        return 1
    fi
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
        die "not root and no sudo; please install these packages yourself: sudo apt-get install -y $*"
        return 1
    fi
    step "apt-get update"
    _as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 ||
        { die "apt-get update failed"; return 1; }
    step "apt-get install -y $*"
    _as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2 ||
        { die "apt-get install failed; please install: $*"; return 1; }
}

# ---------------------------------------------------------------------------
# Wasm toolchain

# Print the wasm-bindgen version the workspace is pinned to.
wasm_bindgen_version() {
    local v=""
    if [ -n "${WASM_BINDGEN_VERSION:-}" ]; then
        printf '%s\n' "$WASM_BINDGEN_VERSION"
        return 0
    fi
    if [ -f "$TOOLGATE_ROOT/Cargo.lock" ]; then
        v="$(awk '
            /^\[\[package\]\]/ { in_pkg = 0 }
            /^name = "wasm-bindgen"$/ { in_pkg = 1; next }
            in_pkg && /^version = / { gsub(/"/, "", $3); print $3; exit }
        ' "$TOOLGATE_ROOT/Cargo.lock")"
    fi
    if [ -z "$v" ]; then
        local f
        for f in "$TOOLGATE_ROOT/frontend/Cargo.toml" "$TOOLGATE_ROOT/Cargo.toml"; do
            [ -f "$f" ] || continue
            # wasm-bindgen = "=0.2.130"   or   wasm-bindgen = { version = "=0.2.130", ... }
            v="$(sed -n -E \
                -e 's/^[[:space:]]*wasm-bindgen[[:space:]]*=[[:space:]]*"=?([0-9][0-9.]*)".*/\1/p' \
                -e 's/^[[:space:]]*wasm-bindgen[[:space:]]*=[[:space:]]*\{.*version[[:space:]]*=[[:space:]]*"=?([0-9][0-9.]*)".*/\1/p' \
                "$f" | head -n 1)"
            [ -n "$v" ] && break
        done
    fi
    if [ -z "$v" ]; then
        die "cannot find the wasm-bindgen version in Cargo.lock or frontend/Cargo.toml (set WASM_BINDGEN_VERSION)"
        return 1
    fi
    printf '%s\n' "$v"
}

ensure_wasm_toolchain() {
    step "checking the wasm32-unknown-unknown target"
    if ! command -v rustup >/dev/null 2>&1; then
        die "rustup not found; install Rust from https://rustup.rs"
        return 1
    fi
    if rustup target list --installed | grep -qx 'wasm32-unknown-unknown'; then
        note "installed"
    else
        step "rustup target add wasm32-unknown-unknown"
        rustup target add wasm32-unknown-unknown >&2 || return 1
    fi
    _ensure_wasm_bindgen_cli || return 1
    ensure_wasm_split_cli
}

# The wasm-bindgen CLI at exactly the version of the wasm-bindgen crate in Cargo.lock.
_ensure_wasm_bindgen_cli() {
    _add_cargo_bin_to_path
    local want have=""
    want="$(wasm_bindgen_version)" || return 1
    step "checking wasm-bindgen CLI (want $want)"
    if command -v wasm-bindgen >/dev/null 2>&1; then
        have="$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')"
    fi
    if [ "$have" = "$want" ]; then
        note "wasm-bindgen $have found"
        return 0
    fi
    note "found: ${have:-none}"
    # No --locked: the CLI's own lock file names crates some registries lack.
    step "cargo install wasm-bindgen-cli --version $want (takes several minutes)"
    cargo install wasm-bindgen-cli --version "$want" >&2 || return 1
    _add_cargo_bin_to_path
    have="$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')"
    if [ "$have" != "$want" ]; then
        die "wasm-bindgen on PATH reports '${have:-nothing}', expected $want ($(command -v wasm-bindgen || echo 'not on PATH'))"
        return 1
    fi
}

# The splitter that moves the cards' code into a module of its own (frontend/src/cards.rs).
# Its 0.2 line reads the split points that Leptos's wasm_split_helpers 0.2 marks.
WASM_SPLIT_CLI_VERSION="${WASM_SPLIT_CLI_VERSION:-0.2.4}"

# ensure_wasm_split_cli: `wasm-split-cli` at the pinned version (crates.io, built here).
ensure_wasm_split_cli() {
    _add_cargo_bin_to_path
    local want="$WASM_SPLIT_CLI_VERSION"
    step "checking wasm-split-cli (want $want)"
    if command -v wasm-split-cli >/dev/null 2>&1 &&
        cargo install --list 2>/dev/null | grep -qxF "wasm_split_cli_support v$want:"; then
        note "wasm-split-cli $want found"
        return 0
    fi
    step "cargo install wasm_split_cli_support --version $want (takes a few minutes)"
    # --force: a binary of the same name from another crate (or version) is replaced.
    cargo install --locked --force wasm_split_cli_support --version "$want" \
        --features build-binary >&2 || return 1
    _add_cargo_bin_to_path
    command -v wasm-split-cli >/dev/null 2>&1 ||
        { die "wasm-split-cli is not on PATH after installing it"; return 1; }
}

# ---------------------------------------------------------------------------
# Browser

ensure_chromium() {
    step "checking chromium and chromedriver"
    if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
        note "$(chromium --version 2>/dev/null | head -n 1)"
        return 0
    fi
    apt_install chromium chromium-driver || return 1
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
        die "chromium/chromedriver still missing; please install the Debian packages chromium and chromium-driver"
        return 1
    fi
}

# ---------------------------------------------------------------------------
# Postgres

# Make psql and pg_isready available (PATH, then the server's bin folders, then apt).
_ensure_pg_client() {
    command -v psql >/dev/null 2>&1 && command -v pg_isready >/dev/null 2>&1 && return 0
    local d
    for d in $(_pg_bin_dirs); do
        if [ -x "$d/psql" ] && [ -x "$d/pg_isready" ]; then
            PATH="$PATH:$d"
            export PATH
            return 0
        fi
    done
    apt_install postgresql-client || return 1
}

# Candidate folders holding initdb + pg_ctl: PATH first, then /usr/lib/postgresql/*/bin, newest first.
_pg_bin_dirs() {
    local p
    if p="$(command -v pg_ctl 2>/dev/null)" && command -v initdb >/dev/null 2>&1; then
        dirname "$(readlink -f "$p")"
    fi
    local dirs=()
    for p in /usr/lib/postgresql/*/bin; do
        [ -x "$p/pg_ctl" ] && [ -x "$p/initdb" ] && dirs+=("$p")
    done
    if [ "${#dirs[@]}" -gt 0 ]; then
        printf '%s\n' "${dirs[@]}" | sort -t/ -k5,5 -V -r
    fi
}

# Major version printed by "<dir>/pg_ctl --version" (e.g. 15, or 9.6 for old releases).
_pg_major() {
    "$1/pg_ctl" --version 2>/dev/null | awk 'NR == 1 { print $3 }' | sed -E 's/^([0-9]+).*/\1/'
}

# Pick the bin folder to use; prefer one matching an existing cluster's PG_VERSION.
_pg_pick_bin_dir() {
    local pgdata="$1" want="" d first=""
    [ -f "$pgdata/PG_VERSION" ] && want="$(cat "$pgdata/PG_VERSION")"
    for d in $(_pg_bin_dirs); do
        [ -z "$first" ] && first="$d"
        if [ -z "$want" ] || [ "$(_pg_major "$d")" = "$want" ]; then
            printf '%s\n' "$d"
            return 0
        fi
    done
    if [ -n "$want" ] && [ -n "$first" ]; then
        die "the cluster in $pgdata is PostgreSQL $want but only $(_pg_major "$first") is installed; remove $pgdata or install PostgreSQL $want"
        return 1
    fi
    return 1
}

_port_in_use() {
    local port="$1"
    if command -v ss >/dev/null 2>&1; then
        if ss -ltnH "( sport = :$port )" 2>/dev/null | grep -q .; then
            return 0
        fi
    fi
    # Something accepting on loopback?
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        return 0
    fi
    return 1
}

_free_port() {
    local port
    for port in $(seq 55432 55531); do
        if ! _port_in_use "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    die "no free port found in 55432-55531"
    return 1
}

# Run a command as the unprivileged owner of the cluster (initdb refuses to run as root).
_PG_RUN_USER=""
_pg_run() {
    if [ -n "$_PG_RUN_USER" ]; then
        if command -v runuser >/dev/null 2>&1; then
            runuser -u "$_PG_RUN_USER" -- "$@"
        else
            local cmd
            cmd="$(printf '%q ' "$@")"
            su -s /bin/sh "$_PG_RUN_USER" -c "$cmd"
        fi
    else
        "$@"
    fi
}

# Write listen address, port and socket folder into the cluster's own config file.
_pg_write_conf() {
    local pgdata="$1" port="$2"
    local conf
    conf="$(printf "# Written by scripts/lib.sh on every start.\nlisten_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\n" \
        "$port" "${pgdata//\'/\'\'}")"
    printf '%s\n' "$conf" | _pg_run tee "$pgdata/toolgate.conf" >/dev/null
}

# Start (or reuse) the private cluster under $TOOLGATE_DATA_DIR/pgdata; print its port.
_pg_private_cluster() {
    local data="${TOOLGATE_DATA_DIR:-.toolgate}"
    case "$data" in
        /*) ;;
        *) data="$TOOLGATE_ROOT/$data" ;;
    esac
    local pgdata="$data/pgdata"
    local portfile="$pgdata/toolgate.port"
    local logfile="$pgdata/server.log"

    local bindir
    bindir="$(_pg_pick_bin_dir "$pgdata")" || {
        if [ -f "$pgdata/PG_VERSION" ]; then return 1; fi
        note "no initdb/pg_ctl found; installing the Debian postgresql package"
        apt_install postgresql || return 1
        bindir="$(_pg_pick_bin_dir "$pgdata")" ||
            { die "initdb/pg_ctl still not found; please install PostgreSQL server binaries"; return 1; }
    }
    note "using $bindir ($("$bindir/pg_ctl" --version))"

    mkdir -p "$pgdata" || return 1
    data="$(cd "$data" && pwd -P)"
    pgdata="$data/pgdata"
    portfile="$pgdata/toolgate.port"
    logfile="$pgdata/server.log"

    _PG_RUN_USER=""
    if [ "$(id -u)" -eq 0 ]; then
        if [ -f "$pgdata/PG_VERSION" ]; then
            _PG_RUN_USER="$(stat -c %U "$pgdata")"
        elif id postgres >/dev/null 2>&1; then
            _PG_RUN_USER=postgres
        else
            _PG_RUN_USER=nobody
        fi
        if [ "$_PG_RUN_USER" = root ]; then
            die "$pgdata belongs to root; PostgreSQL will not run as root (remove it or chown it to an unprivileged user)"
            return 1
        fi
        note "running as root: PostgreSQL runs as user '$_PG_RUN_USER'"
        chown "$_PG_RUN_USER" "$pgdata" || return 1
        chmod 700 "$pgdata" || return 1
        if ! _pg_run test -w "$pgdata"; then
            die "user '$_PG_RUN_USER' cannot reach $pgdata (a parent folder is not searchable); set TOOLGATE_DATA_DIR to a folder under a world-searchable path"
            return 1
        fi
    fi

    if [ ! -f "$pgdata/PG_VERSION" ]; then
        step "initdb $pgdata (trust auth, superuser postgres)"
        _pg_run "$bindir/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C >"$data/initdb.log" 2>&1 || {
            cat "$data/initdb.log" >&2
            die "initdb failed"
            return 1
        }
        rm -f "$data/initdb.log"
        printf "\ninclude_if_exists = 'toolgate.conf'\n" | _pg_run tee -a "$pgdata/postgresql.conf" >/dev/null || return 1
    fi

    local port=""
    [ -f "$portfile" ] && port="$(tr -dc '0-9' <"$portfile")"

    if _pg_run "$bindir/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
        if [ -n "$port" ] && pg_isready -q -h 127.0.0.1 -p "$port"; then
            note "private cluster already running on 127.0.0.1:$port"
            printf '%s\n' "$port"
            return 0
        fi
        note "private cluster running but not answering on port '${port:-?}'; restarting it"
        _pg_run "$bindir/pg_ctl" -D "$pgdata" -m fast -w stop >&2 || return 1
    fi

    if [ -z "$port" ] || _port_in_use "$port"; then
        [ -n "$port" ] && note "remembered port $port is taken now; choosing another"
        port="$(_free_port)" || return 1
    fi
    _pg_write_conf "$pgdata" "$port" || return 1
    printf '%s\n' "$port" | _pg_run tee "$portfile" >/dev/null || return 1

    step "starting private PostgreSQL on 127.0.0.1:$port (log: $logfile)"
    if ! _pg_run "$bindir/pg_ctl" -D "$pgdata" -l "$logfile" -w -t 60 start >/dev/null; then
        tail -n 20 "$logfile" >&2 2>/dev/null || true
        die "pg_ctl start failed (see $logfile)"
        return 1
    fi
    local i
    for i in $(seq 1 30); do
        pg_isready -q -h 127.0.0.1 -p "$port" && break
        [ "$i" -eq 30 ] && { die "PostgreSQL did not become ready on port $port"; return 1; }
        sleep 1
    done
    printf '%s\n' "$port"
}

# Stop the private cluster (if any) under $TOOLGATE_DATA_DIR/pgdata.
stop_private_postgres() {
    local data="${TOOLGATE_DATA_DIR:-.toolgate}"
    case "$data" in
        /*) ;;
        *) data="$TOOLGATE_ROOT/$data" ;;
    esac
    local pgdata="$data/pgdata" bindir
    [ -f "$pgdata/PG_VERSION" ] || return 0
    bindir="$(_pg_pick_bin_dir "$pgdata")" || return 1
    _PG_RUN_USER=""
    if [ "$(id -u)" -eq 0 ]; then _PG_RUN_USER="$(stat -c %U "$pgdata")"; fi
    if _pg_run "$bindir/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
        step "stopping private PostgreSQL in $pgdata"
        _pg_run "$bindir/pg_ctl" -D "$pgdata" -m fast -w stop >&2
    fi
}

# Database name in a postgres:// URL (empty when none).
_url_dbname() {
    local rest="${1#*://}"
    rest="${rest%%\?*}"
    rest="${rest%%#*}"
    case "$rest" in
        */*) printf '%s\n' "${rest#*/}" ;;
        *) printf '\n' ;;
    esac
}

# The same URL pointing at the maintenance database "postgres".
_url_admin() {
    local url="$1" scheme rest query=""
    scheme="${url%%://*}"
    rest="${url#*://}"
    case "$rest" in *\?*) query="?${rest#*\?}"; rest="${rest%%\?*}" ;; esac
    rest="${rest%%/*}"
    printf '%s://%s/postgres%s\n' "$scheme" "$rest" "$query"
}

# Can we log in to the server behind URL (maintenance db) without a password prompt?
_pg_can_login() {
    PGCONNECT_TIMEOUT=5 psql -w -X -q -d "$(_url_admin "$1")" -tAc 'SELECT 1' >/dev/null 2>&1
}

# Create the database named in URL unless it exists.
_pg_create_db() {
    local url="$1" db admin exists
    db="$(_url_dbname "$url")"
    if [ -z "$db" ] || [ "$db" = postgres ]; then
        return 0
    fi
    admin="$(_url_admin "$url")"
    exists="$(printf 'SELECT 1 FROM pg_database WHERE datname = :%s;\n' "'db'" |
        PGCONNECT_TIMEOUT=5 psql -w -X -q -tA -v ON_ERROR_STOP=1 -v db="$db" -d "$admin")" || {
        die "cannot connect to $admin to check for database '$db'"
        return 1
    }
    if [ "$exists" = 1 ]; then
        note "database '$db' exists"
        return 0
    fi
    step "creating database '$db'"
    printf 'CREATE DATABASE :%s;\n' '"db"' |
        PGCONNECT_TIMEOUT=5 psql -w -X -q -v ON_ERROR_STOP=1 -v db="$db" -d "$admin" >&2 || {
        die "CREATE DATABASE $db failed"
        return 1
    }
}

ensure_postgres() {
    step "looking for PostgreSQL"
    _ensure_pg_client || return 1
    local url=""

    if [ "${TOOLGATE_FORCE_PRIVATE_PG:-0}" = 1 ]; then
        note "TOOLGATE_FORCE_PRIVATE_PG=1: using the private cluster"
    elif [ -n "${DATABASE_URL:-}" ]; then
        note "DATABASE_URL is set"
        if ! pg_isready -q -d "$DATABASE_URL"; then
            die "DATABASE_URL is set but the server does not answer (pg_isready -d \"\$DATABASE_URL\")"
            return 1
        fi
        url="$DATABASE_URL"
    elif pg_isready -q -h 127.0.0.1 -p 5432; then
        local candidate="postgres://postgres@127.0.0.1:5432/toolgate"
        if _pg_can_login "$candidate"; then
            note "PostgreSQL answers on 127.0.0.1:5432"
            url="$candidate"
        else
            note "a server answers on 127.0.0.1:5432 but user postgres cannot log in without a password; using a private cluster (or set DATABASE_URL)"
        fi
    fi

    if [ -z "$url" ]; then
        local port
        port="$(_pg_private_cluster)" || return 1
        url="postgres://postgres@127.0.0.1:$port/toolgate"
    fi

    _pg_create_db "$url" || return 1
    DATABASE_URL="$url"
    export DATABASE_URL
    step "DATABASE_URL=$DATABASE_URL"
}

# ---------------------------------------------------------------------------
# Frontend bundle

# Print the path of a wasm-opt recent enough to use (binaryen >= 116), or fail.
_good_wasm_opt() {
    local cand ver
    for cand in "$(command -v wasm-opt 2>/dev/null)" "$TOOLGATE_ROOT/node_modules/.bin/wasm-opt"; do
        if [ -z "$cand" ] || [ ! -x "$cand" ]; then continue; fi
        ver="$("$cand" --version 2>/dev/null | sed -n -E 's/.*version[ _]([0-9]+).*/\1/p' | head -n 1)"
        if [ -n "$ver" ] && [ "$ver" -ge 116 ]; then
            printf '%s\n' "$cand"
            return 0
        fi
        # Older binaryen (e.g. Debian's 108) emits wasm that Chromium rejects.
        note "ignoring $cand (binaryen ${ver:-unknown} < 116)"
    done
    return 1
}

# _precompress_static DIR: a .gz beside each page file. zopfli (Debian's package) writes
# ordinary gzip about 4 % smaller than gzip -9, which every browser reads as is; without
# it, gzip -9.
_precompress_static() {
    local dir="$1" tool
    # Installed only where that needs no password; it is an optimisation, not a need.
    if ! command -v zopfli >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 &&
        { [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }; then
        apt_install zopfli || true
    fi
    if command -v zopfli >/dev/null 2>&1; then
        tool=(zopfli --gzip)
        step "zopfli the bundle (gzip format)"
    else
        tool=(gzip -9 -k -f)
        step "gzip -9 the bundle (install zopfli for files about 4 % smaller)"
    fi
    # `+`, not `\;`: find then fails when the compressor does, so the build stops
    # rather than leave a stale .gz to be served.
    find "$dir" -type f \( -name '*.wasm' -o -name '*.js' -o -name '*.css' -o -name '*.html' \) \
        -exec "${tool[@]}" {} + || return 1
}

# _wasm_opt_file OPT FILE: FILE through `wasm-opt -Oz` in place; kept as it is if that fails.
_wasm_opt_file() {
    local opt="$1" file="$2"
    step "wasm-opt -Oz $(basename "$file")"
    if "$opt" -Oz "$file" -o "$file.opt" 2>/dev/null ||
        "$opt" -Oz --enable-bulk-memory --enable-reference-types --enable-nontrapping-float-to-int \
            --enable-sign-ext --enable-mutable-globals --enable-multivalue "$file" -o "$file.opt"; then
        mv "$file.opt" "$file"
    else
        rm -f "$file.opt"
        note "wasm-opt failed; keeping $(basename "$file") unoptimised"
    fi
}

# _name_split_modules PKG: each split-off module (split_<name>.wasm, and chunk_<n>.wasm
# for code that several split-off modules share) gets its build in its name
# (split_cards.<hash>.wasm, the hash of the main module and itself), and the loader asks
# for that name. A page still open from an older build then cannot fetch a newer build's
# module, which would not fit the main module it runs; it gets an error it can show.
_name_split_modules() {
    local pkg="$1" module base hash named
    for module in "$pkg"/*.wasm; do
        base="$(basename "$module" .wasm)"
        [ "$base" = frontend_bg ] && continue
        hash="$(cat "$pkg/frontend_bg.wasm" "$module" | sha256sum | cut -c1-16)"
        [[ "$hash" =~ ^[0-9a-f]{16}$ ]] || { die "cannot hash $module (sha256sum)"; return 1; }
        named="$base.$hash.wasm"
        mv "$module" "$pkg/$named" || return 1
        sed -i "s#\./$base\.wasm\b#./$named#g" "$pkg/__wasm_split.js" || return 1
        grep -qF "./$named" "$pkg/__wasm_split.js" ||
            { die "__wasm_split.js does not load $base.wasm; cannot name it $named"; return 1; }
        note "$named"
    done
}

# _write_build_id DIST: DIST/build-id, a hash of every file of the bundle. The server
# tags each file with it, so browsers keep their copies only while the build is the same.
_write_build_id() {
    local dist="$1" id
    id="$(cd "$dist" && find . -type f ! -name '*.gz' ! -name build-id -print0 | LC_ALL=C sort -z |
        xargs -0 sha256sum | sha256sum | cut -c1-32)" || return 1
    [[ "$id" =~ ^[0-9a-f]{32}$ ]] || { die "cannot hash the bundle (sha256sum)"; return 1; }
    printf '%s\n' "$id" >"$dist/build-id"
    note "build $id"
}

build_frontend() {
    local kind="${1:-release}" profile_args=() profile_dir
    case "$kind" in
        release) profile_args=(--profile wasm-release); profile_dir="wasm-release" ;;
        dev | debug) profile_args=(); profile_dir=debug ;;
        *) die "build_frontend: unknown kind '$kind' (release | dev)"; return 1 ;;
    esac
    local root="$TOOLGATE_ROOT" target wasm dist split module
    target="$(_target_dir)"
    wasm="$target/wasm32-unknown-unknown/$profile_dir/frontend.wasm"
    split="$target/wasm-split/$profile_dir"
    dist="$root/frontend/dist"

    # Panic messages name source files; the folders crates sit in on the building
    # machine stay out of the bundle.
    local remap=() dir
    for dir in "${CARGO_HOME:-$HOME/.cargo}/registry/src" "${CARGO_HOME:-$HOME/.cargo}/git/checkouts"; do
        # A quote would end the TOML string; such a folder keeps its name.
        case "$dir" in *\'*) continue ;; esac
        remap+=("'--remap-path-prefix=$dir=deps'")
    done
    local config
    config="target.wasm32-unknown-unknown.rustflags=[$(IFS=,; printf '%s' "${remap[*]}")]"
    # RUSTFLAGS would replace the target's flags (.cargo/config.toml), which the split needs.
    if [ -n "${RUSTFLAGS:-}${CARGO_ENCODED_RUSTFLAGS:-}" ]; then
        note "ignoring RUSTFLAGS for the web chat: its flags are in .cargo/config.toml"
    fi

    step "cargo build -p frontend --target wasm32-unknown-unknown ${profile_args[*]}"
    (cd "$root" && env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS \
        cargo build -p frontend --target wasm32-unknown-unknown "${profile_args[@]}" \
        --config "$config") || return 1

    _add_cargo_bin_to_path
    # The cards' code (frontend/src/cards.rs) goes into a module of its own, which the
    # page fetches when it first shows a card: split_cards.wasm, and __wasm_split.js to
    # load it. What is left is the main module, which wasm-bindgen finishes.
    step "wasm-split-cli: the cards' code into a module of its own"
    rm -rf "$split"
    wasm-split-cli --target web --out-name frontend "$wasm" "$split" >&2 || return 1

    step "wasm-bindgen --target web -> frontend/dist/pkg"
    rm -rf "$dist/pkg"
    mkdir -p "$dist/pkg" || return 1
    # --keep-lld-exports: the split-off module reaches the main module's memory and
    # function table through them.
    wasm-bindgen --target web --no-typescript --keep-lld-exports --out-dir "$dist/pkg" \
        "$split/frontend.wasm" || return 1
    cp "$split/__wasm_split.js" "$dist/pkg/" || return 1
    for module in "$split"/*.wasm; do
        [ "$module" = "$split/frontend.wasm" ] || cp "$module" "$dist/pkg/" || return 1
    done

    local opt
    if [ "$kind" = release ] && ! _good_wasm_opt >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
        # npm's binaryen; never Debian's, whose wasm-opt breaks the bundle in Chromium.
        step "installing wasm-opt (npm binaryen@132) into node_modules"
        (cd "$root" && npm install --no-save --no-package-lock --no-audit --no-fund --loglevel=error binaryen@132) ||
            note "could not install binaryen; the bundle stays unoptimised"
    fi
    if [ "$kind" = release ] && opt="$(_good_wasm_opt)"; then
        note "$("$opt" --version | head -n 1)"
        for module in "$dist/pkg"/*.wasm; do
            _wasm_opt_file "$opt" "$module"
        done
    elif [ "$kind" = release ]; then
        note "no wasm-opt >= 116 on PATH; skipping size optimisation"
    fi
    _name_split_modules "$dist/pkg" || return 1

    step "copying static files to frontend/dist"
    # A .gz left from an earlier build would be served in place of the new file.
    rm -f "$dist"/*.gz
    cp "$root/frontend/index.html" "$root/frontend/loader.js" "$dist/" || return 1
    if [ -f "$root/frontend/style.css" ]; then
        cp "$root/frontend/style.css" "$dist/" || return 1
    fi
    _write_build_id "$dist" || return 1
    if [ "$kind" = release ]; then
        # Served as is to browsers that accept gzip, so nothing is compressed per request.
        _precompress_static "$dist" || return 1
    fi
    note "bundle: $(du -sh "$dist" | cut -f1) in frontend/dist"
}

# ---------------------------------------------------------------------------
# Demo mode

# demo_reader_url URL NAME: the same server and database as URL, logged in as the
# read-only login the demo creates for its sample database NAME (production,
# staging or development), which can read that one and nothing else.
demo_reader_url() {
    local url="$1" name="$2" scheme rest
    scheme="${url%%://*}"
    rest="${url#*://}"
    case "$rest" in
        *@*) rest="${rest#*@}" ;;
    esac
    printf '%s://toolgate_demo_%s:demo-reader@%s\n' "$scheme" "$name" "$rest"
}

# ---------------------------------------------------------------------------
# Benchmarks

# ensure_pgbench: exports PGBENCH, installing Debian's postgresql-contrib when no
# pgbench is found on PATH or beside the server binaries.
ensure_pgbench() {
    step "checking pgbench"
    local found="" dir
    if found="$(command -v pgbench 2>/dev/null)"; then
        :
    else
        found=""
        for dir in $(_pg_bin_dirs); do
            if [ -x "$dir/pgbench" ]; then
                found="$dir/pgbench"
                break
            fi
        done
    fi
    if [ -z "$found" ]; then
        note "installing postgresql-contrib (pgbench)"
        apt_install postgresql-contrib
        found="$(command -v pgbench 2>/dev/null || ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -n 1)"
    fi
    [ -n "$found" ] || die "pgbench not found; install postgresql-contrib"
    note "$found"
    PGBENCH="$found"
    export PGBENCH
}

# ensure_wrk: the HTTP load generator (Debian's wrk).
ensure_wrk() {
    step "checking wrk"
    if ! command -v wrk >/dev/null 2>&1; then
        note "installing wrk"
        apt_install wrk
    fi
    command -v wrk >/dev/null 2>&1 || die "wrk not found; install Debian's wrk package"
    note "$(command -v wrk)"
}

# ---------------------------------------------------------------------------
# API contract

# The Schemathesis release the contract test runs: pinned, so a new release cannot
# change what passes.
SCHEMATHESIS_VERSION="4.32.5"

# ensure_schemathesis: exports SCHEMATHESIS, the pinned Schemathesis from PyPI in a venv
# under the data folder.
ensure_schemathesis() {
    step "checking Schemathesis $SCHEMATHESIS_VERSION"
    local venv="${TOOLGATE_DATA_DIR:-.toolgate}/schemathesis-venv"
    local bin="$venv/bin/schemathesis"
    if [ ! -x "$bin" ] || ! "$bin" --version 2>/dev/null | grep -qF " $SCHEMATHESIS_VERSION"; then
        note "installing schemathesis==$SCHEMATHESIS_VERSION (PyPI) into $venv"
        if ! python3 -m venv "$venv" >/dev/null 2>&1; then
            apt_install python3-venv
            python3 -m venv "$venv"
        fi
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "schemathesis==$SCHEMATHESIS_VERSION"
    fi
    SCHEMATHESIS="$bin"
    export SCHEMATHESIS
    note "$("$bin" --version)"
}

# ---------------------------------------------------------------------------
# Compile-time-checked SQL

# ensure_sqlx_cli: `cargo sqlx` at the sqlx version Cargo.lock pins (Postgres only, no TLS),
# installed with cargo from crates.io.
ensure_sqlx_cli() {
    local want
    want="$(awk '/^name = "sqlx"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)"
    [ -n "$want" ] || die "sqlx is not in Cargo.lock"
    step "checking sqlx-cli $want"
    _add_cargo_bin_to_path
    if ! cargo sqlx --version 2>/dev/null | grep -qF " $want"; then
        note "cargo install sqlx-cli --version $want (Postgres only; takes several minutes)"
        cargo install sqlx-cli --version "$want" --locked --no-default-features \
            --features postgres >&2 || return 1
    fi
    note "$(cargo sqlx --version)"
}
