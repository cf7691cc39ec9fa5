#!/bin/bash
# Kept as run (2026-11-27, the /tmp/lx set-up of callgrind-login.sh; run from /tmp/lx): per-thread user and
# system CPU (/proc/<pid>/task/*/stat, in 10 ms ticks) and context switches per md5 login over a 6 s
# `pgbench -C -c 8`. Default workers (2, packing), transaction pooling, pool 20.
# thr.sh INI BIN: per-thread CPU (utime+stime ticks) and context switches over a pgbench -C md5 run
ini=$1; bin=$2; export SLUICE_ALLOW_ROOT=1
if [[ $bin == *pgbouncer* ]]; then runuser -u postgres -- $bin $ini 2>/dev/null & else $bin $ini 2>/dev/null & fi
sleep 1.5; pid=$(pgrep -f "$bin $ini" | tail -1)
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 4 -j 2 -T 2 -f s1.sql bench >/dev/null 2>&1
snap() { for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm | tr ' ' _) $(awk '{print $14, $15}' $t/stat) $(grep -E '^(non)?voluntary_ctxt' $t/status | awk '{print $2}' | tr '\n' ' ')"; done; }
snap > /tmp/lx/thr.a
n=$(PGSSLMODE=disable PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -C -c 8 -j 2 -T 6 -f s1.sql bench 2>&1 | awk '/actually processed/{print $6}')
snap > /tmp/lx/thr.b
echo "logins=$n"
join /tmp/lx/thr.a /tmp/lx/thr.b | awk -v n=$n '{u=$8-$3; s=$9-$4; v=$10-$5; nv=$11-$6; if (u+s+v+nv>0) printf "%-16s user %6.1f us  sys %6.1f us  vol_cs %5.2f  invol_cs %5.2f per login\n", $2, u*10000/n, s*10000/n, v/n, nv/n}'
kill $pid; sleep 0.5
