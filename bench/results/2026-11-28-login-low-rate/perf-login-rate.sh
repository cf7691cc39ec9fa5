#!/bin/bash
# pfr.sh TAG BIN INI RATE [user]: CPU per md5 login at a fixed login rate, and a perf cpu-clock profile
tag=$1; bin=$2; ini=$3; rate=$4; as=$5; export SLUICE_ALLOW_ROOT=1 PGPASSWORD=benchpw PGSSLMODE=disable
pre=(); [ -n "$as" ] && pre=(runuser -u $as --)
"${pre[@]}" $bin $ini > /tmp/lx/pf.$tag.out 2>&1 & sleep 2; pid=$(pgrep -n -f "$bin $ini")
pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 8 -j 2 -T 2 -C -f /tmp/lx/s1.sql bench >/dev/null 2>&1; sleep 4
snap() { awk '{print $14+$15}' /proc/$pid/stat; cat /proc/$pid/task/*/status | awk '/^voluntary/{s+=$2} END{print s}'; }
a=($(snap))
perf record -F 4999 -o /tmp/lx/perf.$tag.data -p $pid -- sleep 8 >/dev/null 2>&1 &
pp=$!
out=$(pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 8 -j 2 -T 8 -R $rate -C -f /tmp/lx/s1.sql bench 2>&1 | grep "actually processed" | grep -o "[0-9]*$")
b=($(snap)); wait $pp
echo "$tag logins $out ticks $((b[0]-a[0])) us/login $(( (b[0]-a[0])*10000000/out/1000 )) sleeps/login $(echo "scale=3; (${b[1]}-${a[1]})/$out" | bc)"
kill -INT $pid; sleep 1
