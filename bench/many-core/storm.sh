#!/bin/bash
# bench/login_storm.py's method on the many-core machine, from the devbench bundle (no Python there):
# for PgBouncer 1.25.2 (one process) and Sluice (default workers; STORM_TARGETS may add sluice-wN
# for `workers = N`, and sluice-old for .devb/sluice-old), each fronting the bundle's
# PostgreSQL with auth_type = md5 and bench_user's SCRAM secret in the userlist (clients log in
# with SCRAM), transaction pooling, pool 20:
#   1. `pgbench -S -c 50 -j 8` alone for T seconds: latency p50/p99 (pgbench --log);
#   2. the same while a storm of STORM_LOGINS SCRAM logins runs (`pgbench -C -f select1`,
#      STORM_CONCURRENCY at a time), started one second in: p50/p99 of the -S transactions that
#      ended inside the storm's window, and the window's length;
#   3. the same with the storm over TLS (PGSSLMODE=require);
#   4. pooler CPU per login: `pgbench -C -c 20 -f select1` for T seconds as bench_user (SCRAM) and
#      bench_md5 (md5), after STORM_SETTLE (5) quiet seconds: the pooler's CPU time over the run
#      divided by the logins made;
#   5. with STORM_RATES (e.g. "2000 5000 10000"): step 4's md5 run again at each of these login
#      rates (`pgbench -R`), so that the poolers are compared at the same rate, not only flat out.
# STORM_STEPS (default "select cpu") picks steps 1-3 (select) and 4-5 (cpu).
# Here (once): openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=localhost \
#   -keyout .devb/tls/pooler.key -out .devb/tls/pooler.crt   (git-ignored; the bench's own key)
# There: OUT=... bash .devb/storm.sh   (DEVB_SRC: the unpacked bundle, else .devb/bundle.tar.xz)
# Output: $OUT/storm.tsv (one row per pooler and measurement), $OUT/storm-r<round>/ (pgbench's and
# the poolers' output) and $OUT/threads-r<round>.txt: per thread of the pooler over each step-4 run,
# its CPU ticks and its sleeps (voluntary context switches: waits for an event), and per login.
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUTD=${OUT:-/tmp/stormout}; mkdir -p "$OUTD"
T=${STORM_SECS:-8}; LOGINS=${STORM_LOGINS:-2000}; CONC=${STORM_CONCURRENCY:-50}
W=/tmp/storm-run; rm -rf $W; mkdir -p $W
if [ -n "${DEVB_SRC:-}" ]; then cp -a "$DEVB_SRC"/root "$DEVB_SRC"/data $W/; else tar -xJf "$D/bundle.tar.xz" -C $W || exit 1; fi
R=$W/root; LDSO=$R/libs/ld-linux-x86-64.so.2; PGB=$R/usr/lib/postgresql/15/bin
run() { "$LDSO" --library-path "$R/libs" "$@"; }
ulimit -n $(ulimit -Hn)
mkdir -p $W/tls; cp $D/tls/pooler.key $D/tls/pooler.crt $W/tls/ || { echo "no .devb/tls: see the header"; exit 1; }
chown -R 65534:65534 $W; chmod 700 $W/data; chmod 600 $W/tls/pooler.key
AS=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
command -v setpriv >/dev/null || AS=(runuser -u nobody --)
# A PostgreSQL of an earlier step may still be shutting down on the same port.
for i in $(seq 1 40); do run $PGB/psql -h 127.0.0.1 -p 55432 -U postgres -Atc 'select 1' >/dev/null 2>&1 || break; sleep 0.25; done
PIDS=(); trap 'for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null; done; sleep 2' EXIT
"${AS[@]}" "$LDSO" --library-path "$R/libs" $PGB/postgres -D $W/data -c max_connections=400 > $W/pg.log 2>&1 &
PIDS+=($!)
for i in $(seq 1 60); do run $PGB/psql -h 127.0.0.1 -p 55432 -U postgres -Atc 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
run $PGB/psql -h 127.0.0.1 -p 55432 -U postgres -qc 'CREATE ROLE bench_user LOGIN' -c 'CREATE ROLE bench_md5 LOGIN' \
  -c 'GRANT pg_read_all_data TO bench_user, bench_md5' postgres || { tail $W/pg.log; exit 1; }
echo 'SELECT 1;' > $W/select1.sql
# The bench's own password (bench/bench.py): bench_pass for bench_user, bench_md5_pass for bench_md5.
cat > $W/userlist.txt <<'EOF'
"bench_user" "SCRAM-SHA-256$4096:c2x1aWNlLWJlbmNoLXNhbHQ=$JUSl5xz7bVrpd+GlLEgUb+7N/3xNYeJSHaLyCpi6P6A=:vACAN6G0kJq/AHwEHlNhahiocp+kcTlL7IdhGEkovZM="
"bench_md5" "md5fc93d6de846ac3f1811c961423cacb53"
EOF
chown 65534 $W/userlist.txt $W/select1.sql
cat > $W/pooler.ini <<EOF
[databases]
postgres = host=127.0.0.1 port=55432 dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 19533
unix_socket_dir =
auth_type = md5
auth_file = $W/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 10000
logfile =
pidfile =
log_connections = 0
log_disconnections = 0
client_tls_sslmode = allow
client_tls_key_file = $W/tls/pooler.key
client_tls_cert_file = $W/tls/pooler.crt
EOF
chown 65534 $W/pooler.ini
cpu_of() { set -- $(cut -d')' -f2 /proc/$1/stat); echo $((${12} + ${13})); }
hz=$(getconf CLK_TCK)
TSV=$OUTD/storm.tsv
[ -f $TSV ] || printf 'round\ttarget\tmeasure\tp50_ms\tp99_ms\ttransactions\tstorm_s\tlogins\tfailed\tcpu_us_per_login\n' > $TSV
now() { date +%s.%N; }
# p50/p99 (ms) and count of the -S transactions in pgbench --log files $1.* that ended in [$2,$3]
pcts() { cat "$1".* 2>/dev/null | awk -v a=$2 -v b=$3 'NF>=6 && $3 ~ /^[0-9]+$/ { e=$5+$6/1e6; if (e>=a && e<=b) print $3 }' \
  | sort -n | awk '{v[NR]=$1} END { if (NR==0) {print "NA\tNA\t0"; exit}
      i50=int((NR*50+99)/100); i99=int((NR*99+99)/100); printf "%.3f\t%.3f\t%d\n", v[i50]/1000, v[i99]/1000, NR }'; rm -f "$1".*; }
select_run() { # $1 tag, $2 storm (none|scram|tls); prints p50 p99 count storm_s logins failed
  local tag=$1 storm=$2 pre=$W/lat-$1
  PGPASSWORD=bench_pass PGSSLMODE=disable run $PGB/pgbench -n -h 127.0.0.1 -p 19533 -U bench_user -S -c 50 -j 8 \
    -T $T --log --log-prefix=$pre postgres > $W/$tag.sel.txt 2>&1 & local sp=$!
  local t0 t1 out logins="" failed="" ss=""
  if [ $storm = none ]; then wait $sp; t0=0; t1=9999999999
  else
    sleep 1; t0=$(now)
    out=$(PGPASSWORD=bench_pass PGSSLMODE=$([ $storm = tls ] && echo require || echo disable) PGCONNECT_TIMEOUT=15 \
      run $PGB/pgbench -n -h 127.0.0.1 -p 19533 -U bench_user -C -f $W/select1.sql -c $CONC -j 8 -t $((LOGINS / CONC)) postgres 2>&1)
    t1=$(now); wait $sp
    echo "$out" > $W/$tag.storm.txt
    logins=$(echo "$out" | awk '/number of transactions actually processed/{split($6,a,"/"); print a[1]; exit}')
    failed=$(echo "$out" | awk '/number of failed/{print $5; exit}')
    ss=$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.2f", b-a}')
    awk -v a=$t0 -v b=$t1 -v t=$T 'BEGIN{ if (b-a > t-1) print "  (the storm outlasted the -S run)" }'
  fi
  printf '%s\t%s\t%s\t%s\n' "$(pcts $pre $t0 $t1)" "$ss" "$logins" "$failed"
}
# One line per thread of pid $1: tid, name, CPU ticks (user + system), voluntary and involuntary
# context switches (a voluntary one is a sleep: the thread waited for an event and was woken).
threads_of() { for t in /proc/$1/task/*; do
  printf '%s %s %s %s\n' "${t##*/}" "$(tr ' ' _ < $t/comm)" "$(cut -d')' -f2 $t/stat | awk '{print $12 + $13}')" \
    "$(awk '/^voluntary_ctxt/{v=$2} /^nonvoluntary_ctxt/{n=$2} END{print v, n}' $t/status)"; done 2>/dev/null; }
# Per thread over a run: ticks, wake-ups (voluntary switches) and wake-ups per login ($3 logins).
thread_deltas() { awk -v n=$3 'NR==FNR {c[$1]=$3; v[$1]=$4; i[$1]=$5; next}
  { dc=$3-c[$1]; dv=$4-v[$1]; di=$5-i[$1]; tc+=dc; tv+=dv
    if (dc > 0 || dv > 0) printf "%-8s %-18s ticks %6d  sleeps %8d  involuntary %6d  sleeps/login %.3f\n", $1, $2, dc, dv, di, (n>0 ? dv/n : 0) }
  END { printf "all threads: ticks %d, sleeps %d, sleeps per login %.3f (%d logins)\n", tc, tv, (n>0 ? tv/n : 0), n }' "$1" "$2"; }
cpu_run() { # $1 user, $2 password, $3 pid, $4 login rate (none: flat out); prints logins and µs of pooler CPU per login
  local rate=() c0; [ -n "${4:-}" ] && rate=(-R $4); c0=$(cpu_of $3); threads_of $3 > $W/threads0
  local out; out=$(PGPASSWORD=$2 PGSSLMODE=disable run $PGB/pgbench -n -h 127.0.0.1 -p 19533 -U $1 -C -f $W/select1.sql \
    -c 20 -j 4 -T $T "${rate[@]}" postgres 2>&1); local c1; c1=$(cpu_of $3); threads_of $3 > $W/threads1
  local n; n=$(echo "$out" | awk '/number of transactions actually processed/{split($6,a,"/"); print a[1]; exit}')
  { echo "== $CPU_TAG: per thread over pgbench -C -c 20 -T $T ${rate[*]} as $1"; thread_deltas $W/threads0 $W/threads1 ${n:-0}; } >> $W/threads.log
  printf '%s\t%s\n' "$n" "$(awk -v a=$c0 -v b=$c1 -v hz=$hz -v n=${n:-0} 'BEGIN{ if (n>0) printf "%.0f",(b-a)/hz*1e6/n; else print "NA"}')"
}
for target in ${STORM_TARGETS:-pgbouncer sluice}; do
  # sluice-wN: Sluice with `workers = N` (sluice: the default, one per CPU); sluice-old: the binary
  # .devb/sluice-old (an earlier or differently built Sluice, as in run.sh), default workers;
  # sluice-old-wN: that binary with `workers = N`
  ini=$W/pooler.ini
  case $target in pgbouncer) BIN=$R/pgbouncer;; sluice|sluice-w*) BIN=$R/sluice;;
    sluice-old|sluice-old-w*) BIN=$W/sluice-old; cp "$D/sluice-old" $BIN && chmod 755 $BIN || { echo "no $D/sluice-old"; continue; };; esac
  case $target in sluice-w*|sluice-old-w*)
    ini=$W/$target.ini; { cat $W/pooler.ini; printf '[sluice]\nworkers = %s\n' ${target##*-w}; } > $ini; chown 65534 $ini;; esac
  "${AS[@]}" "$LDSO" --library-path "$R/libs" $BIN $ini > $W/storm-$target.log 2>&1 &
  p=$!; PIDS+=($p)
  for i in $(seq 1 50); do PGPASSWORD=bench_pass run $PGB/psql "host=127.0.0.1 port=19533 user=bench_user dbname=postgres sslmode=disable" -Atc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  case " ${STORM_STEPS:-select cpu} " in *" select "*) ms="none scram tls";; *) ms="";; esac
  for m in $ms; do
    r=$(select_run $target-$m $m); echo "$r" | grep '^  ('; r=$(echo "$r" | grep -v '^  (')
    IFS=$'\t' read p50 p99 n ss logins failed <<< "$r"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n' "${ROUND:-1}" $target "select-S-c50 storm=$m" $p50 $p99 $n "$ss" "$logins" "$failed" | tee -a $TSV
  done
  # The CPU runs start after STORM_SETTLE quiet seconds (default 5): Sluice's worker packing
  # gathers its clients onto fewer workers after 3 calm seconds, so a run started straight after the
  # storms measured the gathering, not the steady state (PgBouncer waits the same).
  case " ${STORM_STEPS:-select cpu} " in *" cpu "*)
  sleep ${STORM_SETTLE:-5}
  # The rate runs (lowest first) come before the flat-out md5 run: a worker spread that flat-out
  # load causes would last into a following low-rate run for the 3 calm seconds gathering waits.
  for u in "bench_user bench_pass scram" $(for r in ${STORM_RATES:-}; do echo "bench_md5/bench_md5_pass/md5/$r"; done) \
           "bench_md5 bench_md5_pass md5"; do set -- ${u//\// }
    IFS=$'\t' read n us <<< "$(CPU_TAG="round ${ROUND:-1} $target $3${4:+ at $4/s}" cpu_run $1 $2 $p ${4:-})"
    printf '%s\t%s\t%s\t\t\t\t\t%s\t\t%s\n' "${ROUND:-1}" $target "cpu per $3 login${4:+ at $4/s} (pgbench -C -c 20${4:+ -R $4})" $n $us | tee -a $TSV
  done;; esac
  kill -TERM $p; for i in $(seq 1 50); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; kill -9 $p 2>/dev/null
  mkdir -p $OUTD/storm-r${ROUND:-1}; cp $W/*.txt $W/storm-$target.log $OUTD/storm-r${ROUND:-1}/ 2>/dev/null; rm -f $W/*.sel.txt $W/*.storm.txt
done
# Beside the archive (device.sh packs the storm-r* folders): what each thread did per login.
cp $W/threads.log $OUTD/threads-r${ROUND:-1}.txt 2>/dev/null
