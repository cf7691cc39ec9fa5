#!/bin/bash
# The 16-core comparison of docs/performance.md in one call, on the many-core machine. Here:
#   ../shared/devbench/make-bundle.sh "$(scripts/build-release.sh | tail -n1)"   # writes .devb/ (git-ignored)
#   cp bench/many-core/*.sh .devb/; cp <earlier sluice, stripped> .devb/sluice-old
# there (from the directory holding .devb):  SECS=8 bash .devb/run.sh   (~3 minutes; QUICK=1: the
# table's rows only; ROUND=k labels a repeated run, and all.tsv gathers every round)
# Rows: PgBouncer 1.25.2 x1, pg_doorman 3.10.7 (8 worker threads) and Sluice (1 worker, default,
# earlier build, 8 and 4 workers without packing) at a pool of 20; 8 so_reuseport PgBouncers at 10
# each; pg_doorman (8 workers) and Sluice (default, earlier, 8 workers) at 80. The bundle takes
# PgBouncer 1.25.2 and pg_doorman 3.10.7 from ../shared/anchors (make-bundle.sh says which it packed).
# Raw outputs in $OUT: machine.txt (host, CPU, kernel, the commit, versions), all.tsv, all.log and
# every pgbench output (o-<run>/pgbench/); copy $OUT to bench/results/<YYYY-MM-DD>-many-core/ and
# commit it with the figures (GIT_COMMIT: the commit the sluice binary was built from).
set -u
D=$(cd "$(dirname "$0")" && pwd)
. "$D/machine.sh"
OLD=""; [ -x $D/sluice-old ] && { cp $D/sluice-old /tmp/sluice-old; chmod 755 /tmp/sluice-old; OLD=1; }
export DEVB_SRC=/tmp/src DEVB_SECS=${SECS:-10} DEVB_SKIP_DIRECT=1
A=$OUT; touch $A/all.tsv
r() { local name=$1-r${ROUND:-1}; shift; echo "== run $name $*"; env OUT=/tmp/o-$name "$@" bash $D/devbench-views.sh > /dev/null 2>&1
  cat /tmp/o-$name/log.txt >> $A/all.log
  mkdir -p $A/o-$name; cp -r /tmp/o-$name/pgbench /tmp/o-$name/results.tsv $A/o-$name/ 2>/dev/null
  for f in /tmp/o-$name/sl*.log; do [ -f $f ] && { echo "--- $f"; grep -E 'workers:|WARN|ERROR|panic' $f | tail -40; } >> $A/all.log; done
  grep -v '^target' /tmp/o-$name/results.tsv | sed "s/^/${ROUND:-1}\t/" | tee -a $A/all.tsv; }
NP="DEVB_SLUICE_EXTRA=worker_spread_percent = 0"
if [ -n "${QUICK:-}" ]; then  # the rows of docs/performance.md's table only (about 2 minutes at SECS=8)
  r p20 DEVB_POOL=20 DEVB_TARGETS="pgb:1 dm:8 sl:1 sl:0"
  r p10 DEVB_POOL=10 DEVB_TARGETS="pgb:8"
  r p80 DEVB_POOL=80 DEVB_TARGETS="dm:8 sl:0"
else
  r p20 DEVB_POOL=20 DEVB_TARGETS="pgb:1 dm:8 sl:1 sl:0"
  [ -n "$OLD" ] && r p20before DEVB_POOL=20 SLUICE_BIN=/tmp/sluice-old LBL=-before DEVB_TARGETS="sl:0"
  r p20np DEVB_POOL=20 LBL=-nopack "$NP" DEVB_TARGETS="sl:8 sl:4"
  r p10 DEVB_POOL=10 DEVB_TARGETS="pgb:8"
  r p80 DEVB_POOL=80 DEVB_TARGETS="dm:8 sl:0"
  [ -n "$OLD" ] && r p80before DEVB_POOL=80 SLUICE_BIN=/tmp/sluice-old LBL=-before DEVB_TARGETS="sl:0"
  r p80np DEVB_POOL=80 LBL=-nopack "$NP" DEVB_TARGETS="sl:8"
fi
echo "== all (first column: the round)"; cat $A/all.tsv
