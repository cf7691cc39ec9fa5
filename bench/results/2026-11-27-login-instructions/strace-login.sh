#!/bin/bash
# sc.sh NAME BIN EXTRA USER: syscalls per login (strace -c -f) over 400 logins
name=$1; bin=$2; extra=$3; user=$4
sed -e "s#^logfile = .*#logfile = /tmp/lx/$name.log#" -e '/^\[sluice\]/,$d' w1.ini > $name.ini; printf "$extra\n" >> $name.ini; chmod 644 $name.ini
if [[ $bin == *pgbouncer* ]]; then runuser -u postgres -- $bin $name.ini 2>/dev/null & else $bin $name.ini 2>/dev/null & fi
sleep 1.5; pid=$(pgrep -f "$bin $name.ini" | tail -1)
PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U $user -n -c 4 -j 2 -T 2 -f s1.sql bench >/dev/null 2>&1
timeout 60 strace -c -f -p $pid -o /tmp/lx/$name.strace &
sleep 1
PGSSLMODE=disable PGPASSWORD=benchpw pgbench -h 127.0.0.1 -p 25493 -U $user -n -C -c 4 -j 2 -t 100 -f s1.sql bench 2>&1 | grep "actually processed"
sleep 0.5; kill -INT %2 2>/dev/null; pkill -INT -f "strace -c -f -p $pid"; sleep 1
echo "== $name"; head -25 /tmp/lx/$name.strace
kill $pid; sleep 0.5
