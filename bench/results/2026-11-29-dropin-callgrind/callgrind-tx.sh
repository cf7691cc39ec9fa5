#!/bin/bash
# cgtx.sh TAG BIN INI : callgrind user instructions per -S transaction (c10, 30,000 tx after warm-up)
tag=$1; bin=$2; ini=$3; export SLUICE_ALLOW_ROOT=1
out=/tmp/lx/cgtx.out.$tag; rm -f $out*
pre=(); ctl=(callgrind_control)
[ -n "$4" ] && pre=(runuser -u $4 --) && ctl=(runuser -u $4 -- callgrind_control)
("${pre[@]}" valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=$out $bin $ini > /tmp/lx/cgtx.$tag.log 2>&1 &); sleep 6
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 10 -j 2 -t 100 -S bench >/dev/null 2>&1
"${ctl[@]}" -z >/dev/null 2>&1
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 10 -j 2 -t 3000 -S bench 2>&1 | grep "actually processed"
"${ctl[@]}" -d >/dev/null 2>&1; sleep 1; pkill -9 -f "callgrind-out-file=$out "; sleep 2
echo "$tag: $(grep -h summary $out.1 | awk "{for(i=2;i<=NF;i++) printf \"%.0f \", \$i/30000}")"
