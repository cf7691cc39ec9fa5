#!/bin/bash
# One call on the many-core machine: ROUNDS (default 2) rounds of run.sh's table rows (QUICK=1) and
# of storm.sh, interleaved, so that a figure is a range over rounds. Here:
#   ../shared/devbench/make-bundle.sh "$(scripts/build-release.sh | tail -n1)"; cp bench/many-core/*.sh .devb/
#   mkdir .devb/tls; openssl req -x509 ... (storm.sh's header)
# There: GIT_COMMIT=<commit> SECS=8 bash .devb/device.sh   (about 3.5 minutes a round at SECS=8)
# Copy $OUT to bench/results/<YYYY-MM-DD>-many-core/ (unpack raw.tar.xz there) and commit it with
# the figures.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT"
# PARTS (default "scaling storm") picks the parts: "storm" alone measures logins only (about 1
# minute per STORM_TARGETS entry a round).
PARTS=${PARTS:-scaling storm}
. "$D/machine.sh"
for k in $(seq 1 "${ROUNDS:-2}"); do
  case " $PARTS " in *" scaling "*) ROUND=$k QUICK=1 SECS=${SECS:-8} bash "$D/run.sh" 2>&1 | tail -n 12;; esac
  case " $PARTS " in *" storm "*) ROUND=$k DEVB_SRC=/tmp/src STORM_SECS=${SECS:-8} bash "$D/storm.sh" 2>&1;; esac
done
# The device tool returns a limited number of files: every folder of raw outputs goes in one archive.
# (ls fails when either pattern matches nothing, as o-* does with PARTS=storm: its status is no test.)
(cd "$OUT" && dirs=$(ls -d o-* storm-r* 2>/dev/null); [ -n "$dirs" ] && tar -cJf raw.tar.xz $dirs && rm -rf $dirs)
echo "== many-core rows (round first)"; cat "$OUT/all.tsv" 2>/dev/null; echo "== storm rows"; cat "$OUT/storm.tsv"; grep -h "^==\|^all threads" "$OUT"/threads-r*.txt 2>/dev/null
