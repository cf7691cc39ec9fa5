#!/bin/bash
# stc.sh TAG BIN INI RATE [user]: syscall counts per md5 login at a fixed rate (strace -c)
tag=$1; bin=$2; ini=$3; rate=$4; as=$5; export SLUICE_ALLOW_ROOT=1 PGPASSWORD=benchpw PGSSLMODE=disable
pre=(); [ -n "$as" ] && pre=(runuser -u $as --)
"${pre[@]}" $bin $ini > /tmp/lx/st.$tag.out 2>&1 & sleep 2; pid=$(pgrep -n -f "$bin $ini")
pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 8 -j 2 -T 2 -C -f /tmp/lx/s1.sql bench >/dev/null 2>&1; sleep 2
strace -f -c -o /tmp/lx/stc.$tag.txt -p $pid & sp=$!; sleep 1
n=$(pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 8 -j 2 -T 6 -R $rate -C -f /tmp/lx/s1.sql bench 2>&1 | grep "actually processed" | grep -o "[0-9]*$")
kill -INT $sp; wait $sp 2>/dev/null; kill -INT $pid; sleep 1
echo "$tag: $n logins"; awk -v n=$n 'NR>2 && $NF!="total" && $4+0>0 {printf "  %-14s %6.2f calls/login  %5.2f errors/login\n", $NF, $4/n, ($5 ~ /^[0-9]+$/ ? $5/n : 0)}' /tmp/lx/stc.$tag.txt
