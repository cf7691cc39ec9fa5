#!/bin/bash
cd /tmp/lx
S=/work/main/bench/results/2026-11-27-login-instructions/callgrind-login.sh
for r in 1 2; do
  bash $S pgbouncer-r$r /tmp/lx/pgbouncer /tmp/lx/p1.ini postgres
  bash $S before-b38085d-r$r /tmp/lx/sluice.new2 /tmp/lx/s1.ini
  bash $S after-34f274f-r$r /tmp/lx/sluice.t1 /tmp/lx/s1.ini
done
bash /tmp/lx/cgtx.sh tx-pgbouncer /tmp/lx/pgbouncer /tmp/lx/p1.ini postgres
bash /tmp/lx/cgtx.sh tx-after-34f274f /tmp/lx/sluice.t1 /tmp/lx/s1.ini
# note: run-all.sh calls /tmp/lx/cgtx.sh, committed here as callgrind-tx.sh
