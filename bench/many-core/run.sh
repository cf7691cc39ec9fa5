#!/bin/bash
# The 16-core comparison of docs/performance.md in one call, on the many-core machine. Here:
#   ../shared/devbench/make-bundle.sh target/release/sluice        # writes .devb/ (git-ignored)
#   cp bench/many-core/*.sh .devb/; cp <earlier sluice, stripped> .devb/sluice-old
# there (from the directory holding .devb):  SECS=8 bash .devb/run.sh   (~3 minutes)
# Rows: PgBouncer x1 and Sluice (1 worker, default, earlier build, 8 and 4 workers without packing)
# at a pool of 20; 8 so_reuseport PgBouncers at 10 each; Sluice (default, earlier, 8 workers) at 80.
set -u
D=$(cd "$(dirname "$0")" && pwd)
nproc; mkdir -p /tmp/src && tar -xJf $D/bundle.tar.xz -C /tmp/src || exit 1
cp $D/sluice-old /tmp/sluice-old; chmod 755 /tmp/sluice-old
export DEVB_SRC=/tmp/src DEVB_SECS=${SECS:-10} DEVB_SKIP_DIRECT=1
A=$OUT; : > $A/all.tsv
r() { local name=$1; shift; echo "== run $name $*"; env OUT=/tmp/o-$name "$@" bash $D/devbench-views.sh > /dev/null 2>&1
  cat /tmp/o-$name/log.txt >> $A/all.log
  for f in /tmp/o-$name/sl*.log; do [ -f $f ] && { echo "--- $f"; grep -E 'workers:|WARN|ERROR|panic' $f | tail -40; } >> $A/all.log; done
  grep -v '^target' /tmp/o-$name/results.tsv | tee -a $A/all.tsv; }
NP="DEVB_SLUICE_EXTRA=worker_spread_percent = 0"
r p20 DEVB_POOL=20 DEVB_TARGETS="pgb:1 sl:1 sl:0"
r p20before DEVB_POOL=20 SLUICE_BIN=/tmp/sluice-old LBL=-before DEVB_TARGETS="sl:0"
r p20np DEVB_POOL=20 LBL=-nopack "$NP" DEVB_TARGETS="sl:8 sl:4"
r p10 DEVB_POOL=10 DEVB_TARGETS="pgb:8"
r p80 DEVB_POOL=80 DEVB_TARGETS="sl:0"
r p80before DEVB_POOL=80 SLUICE_BIN=/tmp/sluice-old LBL=-before DEVB_TARGETS="sl:0"
r p80np DEVB_POOL=80 LBL=-nopack "$NP" DEVB_TARGETS="sl:8"
echo "== all"; cat $A/all.tsv
