#!/bin/bash
# User-space instructions per md5 login (valgrind --tool=callgrind), 1,000 logins of
# `pgbench -C -c 4 -t 250` (one SELECT 1 each), after a warm-up that made the pool's servers;
# the counters are zeroed after the warm-up and dumped after the logins.
#   callgrind-login.sh TAG BINARY INI [runuser-user]
# Kept as run (2026-11-27, /tmp/lx paths: a PostgreSQL 15 on 127.0.0.1:25492 with an md5 user
# `bench`; the INI: transaction pooling, pool 20, log_connections = 0, and for Sluice
# `workers = 1`). A record of the method, not a maintained script.
tag=$1; bin=$2; ini=$3; as=$4; export SLUICE_ALLOW_ROOT=1
out=/tmp/lx/cg.out.$tag; rm -f $out*
pre=(); ctl=(callgrind_control)
[ -n "$as" ] && pre=(runuser -u $as --) && ctl=(runuser -u $as -- callgrind_control)
("${pre[@]}" valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=$out $bin $ini > /tmp/lx/cg.$tag.log 2>&1 &); sleep 6
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 4 -j 2 -t 50 -f /tmp/lx/s1.sql bench >/dev/null 2>&1
"${ctl[@]}" -z >/dev/null 2>&1
PGSSLMODE=disable PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -C -c 4 -j 2 -t 250 -f /tmp/lx/s1.sql bench 2>&1 | grep "actually processed"
"${ctl[@]}" -d >/dev/null 2>&1; sleep 1; pkill -9 -f "callgrind-out-file=$out "; sleep 2
echo "$tag: $(grep -h summary $out.1)"
