#!/usr/bin/env bash
# THE run command.
#   scripts/run.sh config.ini   build release (scripts/build-release.sh) and run `sluice config.ini`
#   scripts/run.sh              demo: a throwaway PostgreSQL cluster (unless one is reachable at
#                               PGHOST/PGPORT, default localhost:5432) + sluice on 127.0.0.1:6432.
# SLUICE_BIN=/path/to/sluice skips the release build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ -n "${SLUICE_BIN:-}" ]; then
    BIN=$SLUICE_BIN                       # use a prebuilt binary, skip the build
else
    BIN=$("$root/scripts/build-release.sh" | tail -n1)
fi

if [ $# -ge 1 ]; then
    exec "$BIN" "$@"
fi

log() { printf '==> %s\n' "$*" >&2; }

pg_bindir() {
    local d
    if command -v pg_config >/dev/null 2>&1; then
        d=$(pg_config --bindir 2>/dev/null || true)
        if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
    fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ]; then echo "$d"; return; fi
    done
    echo "PostgreSQL server binaries not found (apt-get install postgresql)" >&2
    exit 1
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

PGHOST_=${PGHOST:-localhost}
PGPORT_=${PGPORT:-5432}
if port_busy 6432; then
    echo "127.0.0.1:6432 is already in use" >&2
    exit 1
fi

tmp=$(mktemp -d /tmp/sluice-demo.XXXXXX)
chmod 755 "$tmp"
PG_STARTED=""
BIN_DIR=""
AS_PG=()

cleanup() {
    trap - EXIT INT TERM
    if [ -n "${SLUICE_PID:-}" ]; then kill "$SLUICE_PID" 2>/dev/null || true; wait "$SLUICE_PID" 2>/dev/null || true; fi
    if [ -n "$PG_STARTED" ]; then
        "${AS_PG[@]}" "$BIN_DIR/pg_ctl" -D "$tmp/data" stop -m fast >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h "$PGHOST_" -p "$PGPORT_"; then
    # Use the running server: create role/db demo there if we are allowed to.
    log "using PostgreSQL at $PGHOST_:$PGPORT_"
    PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h "$PGHOST_" -p "$PGPORT_" -U "${PGUSER:-postgres}" -d postgres)
    if ! "${PSQL[@]}" -c "SELECT 1" >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        PSQL=(runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$PGPORT_" -d postgres)
    fi
    SQL_HOST=$PGHOST_
    SQL_PORT=$PGPORT_
else
    BIN_DIR=$(pg_bindir)
    if [ "$(id -u)" = 0 ]; then AS_PG=(runuser -u postgres --); fi
    SQL_PORT=55432
    while port_busy "$SQL_PORT"; do SQL_PORT=$((SQL_PORT + 1)); done
    SQL_HOST=127.0.0.1
    mkdir "$tmp/data" "$tmp/sock"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$tmp/data" "$tmp/sock"
    log "initdb throwaway cluster in $tmp/data (port $SQL_PORT)"
    "${AS_PG[@]}" "$BIN_DIR/initdb" -D "$tmp/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
    cat >>"$tmp/data/postgresql.conf" <<CONF
port = $SQL_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp/sock'
password_encryption = 'scram-sha-256'
CONF
    cat >"$tmp/data/pg_hba.conf" <<HBA
local all all               trust
host  all all 127.0.0.1/32  scram-sha-256
HBA
    if ! "${AS_PG[@]}" "$BIN_DIR/pg_ctl" -D "$tmp/data" -l "$tmp/data/postgres.log" -w start >/dev/null; then
        cat "$tmp/data/postgres.log" >&2
        exit 1
    fi
    PG_STARTED=1
    PSQL=("$BIN_DIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$tmp/sock" -p "$SQL_PORT" -U postgres -d postgres)
fi

"${PSQL[@]}" <<'SQL'
SET password_encryption = 'scram-sha-256';
SELECT 'CREATE ROLE demo LOGIN' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'demo') \gexec
ALTER ROLE demo LOGIN PASSWORD 'demo';
SELECT 'CREATE DATABASE demo OWNER demo' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'demo') \gexec
SQL
secret=$("${PSQL[@]}" -A -t -c "SELECT rolpassword FROM pg_authid WHERE rolname = 'demo'")

printf '"demo" "%s"\n' "$secret" >"$tmp/userlist.txt"
cat >"$tmp/pgbouncer.ini" <<INI
[databases]
demo = host=$SQL_HOST port=$SQL_PORT dbname=demo

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
unix_socket_dir = $tmp
auth_type = scram-sha-256
auth_file = $tmp/userlist.txt
admin_users = demo
stats_users = demo
pool_mode = transaction
default_pool_size = 20
max_client_conn = 1000
INI

log "config: $tmp/pgbouncer.ini"
echo
echo "Connect with:"
echo "  psql \"host=127.0.0.1 port=6432 dbname=demo user=demo password=demo\""
echo "Ctrl-C stops sluice and the cluster."
echo
# Sluice refuses to run as root as PgBouncer does; this throwaway demo (its files in a root-owned
# temp dir) is the confined case SLUICE_ALLOW_ROOT is for.
SLUICE_ALLOW_ROOT=1 "$BIN" "$tmp/pgbouncer.ini" &
SLUICE_PID=$!
wait "$SLUICE_PID" || true
SLUICE_PID=""
