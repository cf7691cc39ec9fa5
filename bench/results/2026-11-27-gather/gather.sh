#!/bin/bash
# trans.sh NAME BIN: 16 workers all active (spread 0), reload to packing (75), then a -C run of
# SECS s right after: the pooler's CPU per login over the run (the 16-core bench's transient).
name=$1; bin=$2; secs=${SECS:-9}
mk() { sed -e "s#^logfile = .*#logfile = /tmp/lx/$name.log#" -e '/^\[sluice\]/,$d' w1.ini > $name.ini; printf "[sluice]\nworkers = 16\nworker_spread_percent = $1\n" >> $name.ini; chmod 644 $name.ini; }
mk 0
$bin $name.ini 2>/dev/null & pid=$!
sleep 1.5
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -c 20 -j 2 -T 3 -f s1.sql bench >/dev/null 2>&1
mk 75; kill -HUP $pid; sleep 0.2
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
out=$(PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U bench -n -C -c 8 -j 2 ${RATE:+-R $RATE} -T $secs -f s1.sql bench 2>&1)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
tx=$(echo "$out" | awk '/number of transactions actually processed/{print $6}')
echo "$name rate=${RATE:-max} tx=$tx cpu_us_per_login=$(python3 -c "print(round(($t1-$t0)*10000/$tx,1))") $(grep -o 'workers: [0-9]* of 16 active' /tmp/lx/$name.log | tr '\n' ' ')"
kill $pid; sleep 0.5
