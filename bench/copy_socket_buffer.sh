#!/usr/bin/env bash
# COPY through a small tcp_socket_buffer, side by side: a private PostgreSQL, PgBouncer
# (PGBOUNCER_BIN, by default 1.25.2) and Sluice with the same pgbouncer.ini
# (tcp_socket_buffer = COPY_SOCKET_BUFFER, default 4096, the value of PgBouncer's own test
# suite), and optionally an earlier Sluice (SLUICE_BEFORE_BIN). Each run times, per target and
# in turn, a `\copy ... from` of a ~11 MB file and a `\copy ... to /dev/null` of the same rows, by
# psql over TCP and over the Unix socket (the client leg: TCP tuned by the setting or not; the
# server leg is TCP either way).
#   bench/copy_socket_buffer.sh                       # target/release/sluice, 5 runs
#   SLUICE_BIN=... SLUICE_BEFORE_BIN=... COPY_RUNS=5 COPY_SOCKET_BUFFER=4096 bench/copy_socket_buffer.sh
# Raw outputs (times.tsv: target, leg, direction, run, seconds; summary.txt; the poolers' logs;
# machine.txt) go to bench/results/<YYYY-MM-DD>-copy-socket-buffer/ (BENCH_OUT).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib/results.sh"
bench_pgbouncer
bin=${SLUICE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/sluice}
[ -x "$bin" ] || { echo "no sluice binary at $bin (cargo build --release -p sluice, or SLUICE_BIN)" >&2; exit 1; }
SLUICE_BIN=$(readlink -f "$bin")
before=${SLUICE_BEFORE_BIN:+$(readlink -f "$SLUICE_BEFORE_BIN")}
runs=${COPY_RUNS:-5}
sockbuf=${COPY_SOCKET_BUFFER:-4096}
BENCH_COMMAND="bench/copy_socket_buffer.sh (COPY_RUNS=$runs COPY_SOCKET_BUFFER=$sockbuf SLUICE_BIN=$SLUICE_BIN SLUICE_BEFORE_BIN=${before:-})"
bench_results_init copy-socket-buffer
echo "pgbouncer_bin: $PGBOUNCER_BIN ($("$PGBOUNCER_BIN" --version | head -1))" >>"$BENCH_OUT/machine.txt"
[ -n "$before" ] && echo "sluice_before_bin: $before ($(sha256sum "$before" | cut -c1-16))" >>"$BENCH_OUT/machine.txt"
pgbin=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d /tmp/sluice-copy-bench.XXXXXX)
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cleanup() {
    jobs -p | xargs -r kill 2>/dev/null || true
    for f in "$work"/*/*.log "$work"/*/*.out; do [ -f "$f" ] && cp "$f" "$BENCH_OUT/"; done
    [ -f "$work/pgbouncer/pid" ] && kill "$(cat "$work/pgbouncer/pid")" 2>/dev/null || true
    as_pg "$pgbin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
pgport=$(free_port)
mkdir -p "$work/pg" "$work/pgsock"
[ "$(id -u)" = 0 ] && chown postgres "$work/pg" "$work/pgsock"
as_pg "$pgbin/initdb" -D "$work/pg" -A trust -U postgres >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg/log" -w -o \
    "-p $pgport -k $work/pgsock -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
psql -qX -h 127.0.0.1 -p "$pgport" -U postgres -c "CREATE TABLE rows (id int, t text)"
python3 -c "
import sys
with open('$work/rows.tsv', 'w') as f:
    for i in range(400000):
        f.write(f'{i}\tsome text payload number {i}\n')"
printf '"postgres" ""\n' >"$work/userlist.txt"

# start NAME BINARY: a pooler on a free port with its own socket directory; sets port_NAME.
start() {
    local name=$1 binary=$2 port
    port=$(free_port)
    mkdir -p "$work/$name"
    cat >"$work/$name/pgbouncer.ini" <<EOF
[databases]
postgres = host=127.0.0.1 port=$pgport dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $work/$name
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = transaction
tcp_socket_buffer = $sockbuf
pidfile = $work/$name/pid
logfile = $work/$name/$name.log
EOF
    chmod -R a+rwX "$work/$name"
    if [ "$name" = pgbouncer ]; then
        as_pg "$binary" -d "$work/$name/pgbouncer.ini"
    else
        SLUICE_ALLOW_ROOT=1 "$binary" "$work/$name/pgbouncer.ini" >"$work/$name/$name.out" 2>&1 &
    fi
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    eval "port_$name=$port"
}
targets="pgbouncer sluice"
start pgbouncer "$PGBOUNCER_BIN"
start sluice "$SLUICE_BIN"
if [ -n "$before" ]; then start sluice_before "$before"; targets="$targets sluice_before"; fi

# Wall time of one psql run, seconds.
timed() {
    local t0 t1
    t0=$(date +%s.%N)
    psql -qX -v ON_ERROR_STOP=1 "$@" >/dev/null || { echo "psql $* failed" >&2; return 1; }
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.3f}')"
}
printf 'target\tleg\tdirection\trun\tseconds\n' >"$BENCH_OUT/times.tsv"
for run in $(seq "$runs"); do
    for t in $targets; do
        port=$(eval echo "\$port_$t")
        for leg in tcp unix; do
            host=127.0.0.1
            [ $leg = unix ] && host=$work/$t
            conn=(-h "$host" -p "$port" -U postgres postgres)
            s=$(timed "${conn[@]}" -c "TRUNCATE rows" -c "\\copy rows from $work/rows.tsv") || exit 1
            printf '%s\t%s\tfrom\t%s\t%s\n' "$t" $leg "$run" "$s" >>"$BENCH_OUT/times.tsv"
            s=$(timed "${conn[@]}" -c "\\copy rows to /dev/null") || exit 1
            printf '%s\t%s\tto\t%s\t%s\n' "$t" $leg "$run" "$s" >>"$BENCH_OUT/times.tsv"
        done
    done
done
python3 - "$BENCH_OUT/times.tsv" <<'EOF' | tee "$BENCH_OUT/summary.txt"
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
by = collections.defaultdict(list)
for target, leg, direction, _, secs in rows:
    by[(target, leg, direction)].append(float(secs))
print(f"{'target':<14} {'client leg':<10} {'copy':<5} {'median s':>9} {'min-max s':>14} n")
for (target, leg, direction), v in sorted(by.items()):
    print(f"{target:<14} {leg:<10} {direction:<5} {statistics.median(v):>9.3f} "
          f"{min(v):>6.3f}-{max(v):<7.3f} {len(v)}")
EOF
