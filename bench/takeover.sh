#!/usr/bin/env bash
# An upgrade under load, by hand: a private PostgreSQL, Sluice in transaction mode (pool 20),
# pgbench -c 50 -T 30 (TPC-B-like, scale 10) through it, and `sluice -R` taking over after 15 s.
# Prints pgbench's summary, its failed transactions and aborted clients, and the tps before and
# after the takeover (from -P 1). Everything lives in a temp dir removed at exit.
#   bench/takeover.sh                         # target/release/sluice, else target/debug/sluice
#   SLUICE_BIN=/path/to/sluice TAKEOVER_AT=10 BENCH_SECONDS=20 bench/takeover.sh
#   TAKEOVER_AT=none bench/takeover.sh        # the same run without a takeover (the baseline)
# Raw outputs (pgbench's stdout and -P 1 progress, both poolers' logs, the summary, machine.txt)
# are kept in bench/results/<YYYY-MM-DD>-takeover/ (BENCH_OUT).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib/results.sh"
bin=${SLUICE_BIN:-}
if [ -z "$bin" ]; then
    for b in "${CARGO_TARGET_DIR:-$root/target}/release/sluice" "${CARGO_TARGET_DIR:-$root/target}/debug/sluice"; do
        [ -x "$b" ] && { bin=$b; break; }
    done
fi
[ -x "$bin" ] || { echo "no sluice binary (cargo build --release -p sluice, or SLUICE_BIN)" >&2; exit 1; }
SLUICE_BIN=$bin
BENCH_COMMAND="bench/takeover.sh (BENCH_SECONDS=${BENCH_SECONDS:-30} TAKEOVER_AT=${TAKEOVER_AT:-15} SLUICE_BIN=$bin)"
bench_results_init takeover
secs=${BENCH_SECONDS:-30}
at=${TAKEOVER_AT:-15}
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d /tmp/sluice-takeover-bench.XXXXXX)
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pgport=$(free_port)
port=$(free_port)
cleanup() {
    jobs -p | xargs -r kill 2>/dev/null || true
    for f in bench.out bench.err old.log new.log; do [ -f "$work/$f" ] && cp "$work/$f" "$BENCH_OUT/"; done
    [ -f "$work/new.pid" ] && kill "$(cat "$work/new.pid")" 2>/dev/null || true
    as_pg "$pgbin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/pg" "$work/pgsock"
[ "$(id -u)" = 0 ] && chown postgres "$work/pg" "$work/pgsock"
as_pg "$pgbin/initdb" -D "$work/pg" -A trust -U postgres >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg/log" -w -o \
    "-p $pgport -k $work/pgsock -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" \
    start >/dev/null
"$pgbin/pgbench" -q -i -s 10 -h 127.0.0.1 -p "$pgport" -U postgres postgres >/dev/null 2>&1
printf '"postgres" ""\n' >"$work/userlist.txt"
cat >"$work/sluice.ini" <<EOF
[databases]
postgres = host=127.0.0.1 port=$pgport dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $work
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 200
log_connections = 0
log_disconnections = 0
EOF
export SLUICE_ALLOW_ROOT=1
"$bin" "$work/sluice.ini" >"$work/old.log" 2>&1 &
old=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
"$pgbin/pgbench" -c 50 -j 2 -T "$secs" -P 1 -h 127.0.0.1 -p "$port" -U postgres postgres \
    >"$work/bench.out" 2>"$work/bench.err" &
bench=$!
if [ "$at" != none ]; then
    sleep "$at"
    "$bin" -R "$work/sluice.ini" >"$work/new.log" 2>&1 &
    echo $! >"$work/new.pid"
else
    at=$((secs / 2))
    : >"$work/new.log"
fi
rc=0
wait "$bench" || rc=$?
old_exit=running
if ! kill -0 "$old" 2>/dev/null; then old_exit="exited ($(wait "$old"; echo $?))"; fi
exec > >(tee "$BENCH_OUT/summary.txt")
echo "== sluice: $bin"
grep -E "^(number of|tps|latency average)" "$work/bench.out" || true
echo "pgbench exit status: $rc"
echo "aborted clients: $(grep -c 'aborted' "$work/bench.err" || true)"
awk -v at="$at" '/^progress:/ { t = $2 + 0; tps = $4 + 0;
        if (t <= at) { b += tps; nb++ } else if (t > at + 1) { a += tps; na++ }
        if (t > at && t <= at + 1) around = tps }
    END { printf "tps before the takeover %.0f, in its second %.0f, after %.0f\n",
        nb ? b / nb : 0, around, na ? a / na : 0 }' "$work/bench.err"
echo "old process: $old_exit"
{ grep -E "takeover" "$work/old.log" "$work/new.log" || true; } | sed 's/^/  /'
