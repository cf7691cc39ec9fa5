#!/bin/bash
# The many-core kit's devbench.sh (../shared/devbench/) with two additions: SLUICE_BIN/LBL run
# another Sluice binary under its own label, and each Sluice row prints SHOW WORKERS and SHOW POOLS
# two thirds into the run and SHOW CROSS_WORKER after it (admin_users = postgres); `dm:W` runs
# pg_doorman 3.10.7 with W worker threads, as the kit's devbench.sh does.
# Multi-core scaling bench on a 16-core box: PgBouncer (1 process, 4 so_reuseport processes)
# vs Sluice at 1/2/4/8/16 workers, pgbench through each, same PostgreSQL. Self-contained bundle.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTD=${OUT:-/tmp/devout}; mkdir -p "$OUTD"
W=/tmp/devb-run; rm -rf $W; mkdir -p $W
exec > >(tee "$OUTD/log.txt") 2>&1
echo "== host"; nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2; cat /etc/os-release 2>/dev/null | head -2; id
if [ -n "${DEVB_SRC:-}" ]; then cp -a "$DEVB_SRC"/root "$DEVB_SRC"/data $W/; else tar -xJf "$HERE/bundle.tar.xz" -C $W || { echo "extract failed"; exit 1; }; fi
R=$W/root; LDSO=$R/libs/ld-linux-x86-64.so.2
run() { "$LDSO" --library-path "$R/libs" "$@"; }
PGB=$R/usr/lib/postgresql/15/bin
ulimit -n $(ulimit -Hn); echo "nofile $(ulimit -n)"
chown -R 65534:65534 $W; chmod 700 $W/data
AS=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
command -v setpriv >/dev/null || AS=(runuser -u nobody --)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; sleep 1; }
trap cleanup EXIT
"${AS[@]}" "$LDSO" --library-path "$R/libs" $PGB/postgres -D $W/data -c max_connections=400 > $W/pg.log 2>&1 &
PIDS+=($!)
for i in $(seq 1 60); do run $PGB/psql -h 127.0.0.1 -p 55432 -U postgres -Atc 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
run $PGB/psql -h 127.0.0.1 -p 55432 -U postgres -Atc 'select version()' || { tail -20 $W/pg.log; exit 1; }
echo ';' > $W/empty.sql

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8; exit}' /proc/stat; }
cpu_of() { local t=0; for p in "$@"; do set -- $(cut -d')' -f2 /proc/$p/stat); t=$((t + ${12} + ${13})); done; echo $t; }

render() { # $1 file, $2 pool size, $3 extra [pgbouncer] lines, $4 extra tail section
cat > "$1" <<EOF
[databases]
postgres = host=127.0.0.1 port=55432 dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 19532
unix_socket_dir =
auth_type = trust
auth_file = $W/userlist.txt
pool_mode = transaction
default_pool_size = $2
max_client_conn = 10000
max_db_connections = 0
logfile =
log_connections = 0
log_disconnections = 0
$3
$4
EOF
}
echo '"postgres" ""' > $W/userlist.txt; chown 65534 $W/userlist.txt

RESULTS=$OUTD/results.tsv
printf 'target\tscript\tclients\tthreads\ttps\tlat_ms\tfailed\tpooler_cpu_s\tpooler_cores\tpooler_us_per_tx\tmachine_cores\n' > $RESULTS

bench() { # $1 label, $2 script(-S|empty), $3 clients, $4 threads, $5 secs, pids...
  local label=$1 scr=$2 c=$3 j=$4 T=$5; shift 5
  local sarg; if [ "$scr" = empty ]; then sarg="-f $W/empty.sql"; else sarg="-S"; fi
  local c0; c0=$(cpu_of "$@"); local m0; m0=$(busy_jiffies)
  local out; out=$(run $PGB/pgbench -h 127.0.0.1 -p 19532 -U postgres -n $sarg -c $c -j $j -T $T -P 5 postgres 2>&1)
  local c1; c1=$(cpu_of "$@"); local m1; m1=$(busy_jiffies)
  local tps lat failed
  tps=$(echo "$out" | awk '/^tps = /{print $3; exit}')
  lat=$(echo "$out" | awk '/latency average/{print $4; exit}')
  failed=$(echo "$out" | awk '/number of failed/{print $5; exit}')
  local hz; hz=$(getconf CLK_TCK)
  local cpu; cpu=$(awk -v a=$c0 -v b=$c1 -v hz=$hz 'BEGIN{printf "%.1f",(b-a)/hz}')
  local cores; cores=$(awk -v s=$cpu -v t=$T 'BEGIN{printf "%.2f",s/t}')
  local us; us=$(awk -v s=$cpu -v tps=$tps -v t=$T 'BEGIN{ if (tps>0) printf "%.1f",s*1e6/(tps*t); else print "NA"}')
  local mc; mc=$(awk -v a=$m0 -v b=$m1 -v hz=$hz -v t=$T 'BEGIN{printf "%.1f",(b-a)/hz/t}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$scr" $c $j "$tps" "$lat" "${failed:-0}" "$cpu" "$cores" "$us" "$mc" | tee -a $RESULTS
  # pgbench's whole output, raw, beside the table (pgbench/<label>-<script>-c<clients>.txt).
  mkdir -p "$OUTD/pgbench"; echo "$out" > "$OUTD/pgbench/$label-$scr-c$c.txt"
  echo "$out" | grep -E 'aborted|error|ERROR' | head -3
}
waitport() { for i in $(seq 1 50); do run $PGB/psql -h 127.0.0.1 -p 19532 -U postgres -Atc 'select 1' postgres >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "pooler did not come up"; return 1; }
stop() { for p in "$@"; do kill -INT "$p" 2>/dev/null; done; for p in "$@"; do for i in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done; kill -9 "$p" 2>/dev/null; done; sleep 0.5; }

T=${DEVB_SECS:-15}
SCEN=${DEVB_SCEN:-"empty:1000:8 select:1000:8"}

# ---- PgBouncer, one process
run_pgbouncer() { # $1 nproc
  local n=$1 pids=()
  for k in $(seq 1 $n); do
    render $W/pgb$k.ini ${DEVB_POOL:-20} "so_reuseport = 1
pidfile =" ""
    chown 65534 $W/pgb$k.ini
    "${AS[@]}" "$LDSO" --library-path "$R/libs" $R/pgbouncer $W/pgb$k.ini > $W/pgb$k.log 2>&1 &
    pids+=($!); PIDS+=($!)
  done
  waitport || { tail -5 $W/pgb1.log; return; }
  for s in $SCEN; do IFS=: read scr c j <<< "$s"
    bench "pgbouncer-x$n-p${DEVB_POOL:-20}" $scr $c $j $T "${pids[@]}"; done
  stop "${pids[@]}"
}
run_sluice() { # $1 workers (0 = auto)
  local w=$1
  render $W/sl.ini ${DEVB_POOL:-20} "admin_users = postgres" "[sluice]
workers = $w
${DEVB_SLUICE_EXTRA:-}"
  chown 65534 $W/sl.ini
  "${AS[@]}" "$LDSO" --library-path "$R/libs" ${SLUICE_BIN:-$R/sluice} $W/sl.ini > $W/sl$w.log 2>&1 &
  local p=$!; PIDS+=($p)
  waitport || { tail -5 $W/sl$w.log; return; }
  for s in $SCEN; do IFS=: read scr c j <<< "$s"
    ( sleep $((T*2/3)); run $PGB/psql -h 127.0.0.1 -p 19532 -U postgres -c 'SHOW WORKERS' -c 'SHOW POOLS' pgbouncer 2>&1 | head -40 ) & local sp=$!
    bench "sluice${LBL:-}-w$w-p${DEVB_POOL:-20}" $scr $c $j $T $p; wait $sp
    run $PGB/psql -h 127.0.0.1 -p 19532 -U postgres -c 'SHOW CROSS_WORKER' pgbouncer 2>&1 | head -30; done
  echo "threads (utime+stime ticks) of sluice-w$w:"; for t in /proc/$p/task/*; do echo -n "$(cut -d')' -f2 $t/stat | awk '{print $12+$13}') "; done; echo
  stop $p
}
# direct reference (max 300 clients)
echo "== direct"
[ -n "${DEVB_SKIP_DIRECT:-}" ] || for s in ${DEVB_DIRECT:-"empty:300:8 select:300:8"}; do IFS=: read scr c j <<< "$s"
  m0=$(busy_jiffies)
  out=$(run $PGB/pgbench -h 127.0.0.1 -p 55432 -U postgres -n $([ $scr = empty ] && echo "-f $W/empty.sql" || echo -S) -c $c -j $j -T $T postgres 2>&1)
  mc=$(awk -v a=$m0 -v b=$(busy_jiffies) -v hz=$(getconf CLK_TCK) -v t=$T 'BEGIN{printf "%.1f",(b-a)/hz/t}')
  printf 'direct\t%s\t%s\t%s\t%s\t\t\t\t\t\t%s\n' $scr $c $j "$(echo "$out" | awk '/^tps = /{print $3; exit}')" "$mc" | tee -a $RESULTS
done
# ---- pg_doorman, W tokio worker threads (>= 1), configured like the PgBouncer processes above
run_doorman() { # $1 workers
  local w=$1 D=$W/dm$1
  [ -x $R/pg_doorman ] || { echo "no pg_doorman in the bundle"; return; }
  mkdir -p $D
  # pooler_check_query: pg_doorman answers a simple query that is exactly this text itself (default
  # ";", which is what the `empty` script sends); set it to a text no benchmark sends.
  printf '%s\n' '[general]' 'host = "127.0.0.1"' 'port = 19532' 'max_connections = 10000' \
    "worker_threads = $w" 'log_client_connections = false' 'log_client_disconnections = false' \
    'pooler_check_query = "/* not used by the benchmark */ SELECT 1"' \
    'pg_hba = { content = "host all all 127.0.0.1/32 trust" }' 'tls_mode = "disable"' \
    'server_tls_mode = "disable"' 'admin_username = "admin"' 'admin_password = "admin"' '' \
    '[pools.postgres]' 'server_host = "127.0.0.1"' 'server_port = 55432' 'server_database = "postgres"' \
    'pool_mode = "transaction"' '' '[pools.postgres.users.0]' 'username = "postgres"' \
    'password = "md5e8a48653851e28c69d0506508fb27fc5"' "pool_size = ${DEVB_POOL:-20}" > $D/pg_doorman.toml
  chown -R 65534 $D
  "${AS[@]}" "$LDSO" --library-path "$R/libs" $R/pg_doorman $D/pg_doorman.toml -l warn > $W/pg_doorman-$w.log 2>&1 &
  local p=$!; PIDS+=($p)
  waitport || { tail -5 $W/pg_doorman-$w.log; kill -TERM $p; return; }
  for s in $SCEN; do IFS=: read scr c j <<< "$s"
    bench "pg_doorman-w$w" $scr $c $j $T $p; done
  # SIGTERM: without a TTY, SIGINT starts pg_doorman's binary upgrade (a new process keeps the port)
  kill -TERM $p; for i in $(seq 1 50); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; kill -9 $p 2>/dev/null; sleep 0.5
}
TARGETS=${DEVB_TARGETS:-"pgb:1 sl:1 sl:2 sl:4 sl:8 sl:0 pgb:4"}
for spec in $TARGETS; do
  IFS=: read kind n <<< "$spec"
  echo "== $kind $n"
  case $kind in pgb) run_pgbouncer $n;; sl) run_sluice $n;; dm) run_doorman $n;; *) echo "unknown target $spec";; esac
done
cp $W/*.log "$OUTD/" 2>/dev/null
echo "== done"; cat $RESULTS
