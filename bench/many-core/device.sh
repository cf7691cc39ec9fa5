#!/bin/bash
# One call on the many-core machine: ROUNDS (default 2) rounds of run.sh's table rows (QUICK=1) and
# of storm.sh, interleaved, so that a figure is a range over rounds. Here:
#   ../shared/devbench/make-bundle.sh target/release/sluice; cp bench/many-core/*.sh .devb/
#   mkdir .devb/tls; openssl req -x509 ... (storm.sh's header)
# There: GIT_COMMIT=<commit> SECS=8 bash .devb/device.sh   (about 3.5 minutes a round at SECS=8)
# Copy $OUT to bench/results/<YYYY-MM-DD>-many-core/ (unpack raw.tar.xz there) and commit it with
# the figures.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT"
for k in $(seq 1 "${ROUNDS:-2}"); do
  ROUND=$k QUICK=1 SECS=${SECS:-8} bash "$D/run.sh" 2>&1 | tail -n 12
  ROUND=$k DEVB_SRC=/tmp/src STORM_SECS=${SECS:-8} bash "$D/storm.sh" 2>&1
done
# The device tool returns a limited number of files: every folder of raw outputs goes in one archive.
(cd "$OUT" && dirs=$(ls -d o-* storm-r* 2>/dev/null) && [ -n "$dirs" ] && tar -cJf raw.tar.xz $dirs && rm -rf $dirs)
echo "== many-core rows (round first)"; cat "$OUT/all.tsv"; echo "== storm rows"; cat "$OUT/storm.tsv"
