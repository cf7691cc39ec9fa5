#!/bin/bash
# Two clients through a pooler on 127.0.0.1:$1 (pool of 1, transaction mode): A inserts, B inserts,
# A reads lastval() and currval().
port=$1; label=$2
export PGPASSWORD=benchpw PGSSLMODE=disable
psql -h 127.0.0.1 -p 25492 -U bench -d bench -qc "DROP TABLE IF EXISTS seq_demo; CREATE TABLE seq_demo(id serial PRIMARY KEY, who text)"
rm -f a b; mkfifo a b
psql -h 127.0.0.1 -p $port -U bench -d bench -At < a > a.out 2>&1 &
psql -h 127.0.0.1 -p $port -U bench -d bench -At < b > b.out 2>&1 &
exec 3>a 4>b
step() { echo "$2" >&$1; sleep 0.4; }
step 3 "INSERT INTO seq_demo(who) VALUES ('A') RETURNING id;"
step 4 "INSERT INTO seq_demo(who) VALUES ('B') RETURNING id;"
step 3 "SELECT 'A lastval() = ' || lastval();"
step 3 "SELECT 'A currval() = ' || currval('seq_demo_id_seq');"
exec 3>&- 4>&-; sleep 0.5
echo "== $label"; echo "-- A:"; cat a.out; echo "-- B:"; cat b.out
