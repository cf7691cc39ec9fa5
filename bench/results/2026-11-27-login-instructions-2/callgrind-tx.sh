#!/bin/bash
# Kept as run (2026-11-27, the /tmp/lx set-up of ../2026-11-27-login-instructions/callgrind-login.sh;
# the database holds pgbench -i -s 1 tables). A record of the method, not a maintained script.
# cgtx.sh TAG BIN INI : callgrind user instructions per -S transaction (c10, 30,000 tx after warm-up)
tag=$1; bin=$2; ini=$3; export SLUICE_ALLOW_ROOT=1
out=/tmp/lx/cgtx.out.$tag; rm -f $out*
pre=(); ctl=(callgrind_control)
[ -n "$4" ] && pre=(runuser -u $4 --) && ctl=(runuser -u $4 -- callgrind_control)
("${pre[@]}" valgrind --tool=callgrind --callgrind-out-file=$out $bin $ini > /tmp/lx/cgtx.$tag.log 2>&1 &); sleep 6
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 10 -j 2 -t 100 -S bench >/dev/null 2>&1
"${ctl[@]}" -z >/dev/null 2>&1
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 10 -j 2 -t 3000 -S bench 2>&1 | grep "actually processed"
"${ctl[@]}" -d >/dev/null 2>&1; sleep 1; pkill -9 -f "callgrind-out-file=$out "; sleep 2
echo "$tag: $(grep -h summary $out.1 | awk '{printf "%d user instructions per tx (%d in all)", $2/30000, $2}')"
