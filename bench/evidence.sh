#!/usr/bin/env bash
# Re-measures every figure of README and docs/performance.md that a small machine can measure,
# side by side with PgBouncer 1.25.2, EVIDENCE_RUNS runs each, and keeps every raw output:
#   1. bench/run.sh: the pgbench scenarios (tps, latency, CPU per transaction and per login, RSS
#      per idle client, connection-storm peak RSS), direct / PgBouncer / Sluice / Sluice 1 worker /
#      Sluice without packing / the floor forwarders, EVIDENCE_RUNS interleaved repeats;
#   2. bench/takeover.sh: an upgrade under load, EVIDENCE_RUNS times, and as many baselines without
#      a takeover;
#   3. bench/netem/run.sh (root only: a network namespace): 1,000 clients across a 1 ms link,
#      EVIDENCE_RUNS repeats;
# then summary.md: for each figure, the median and the range (min-max) over all runs.
#
#   bench/evidence.sh                                   # the full run (see bench/README.md for its length)
#   EVIDENCE_RUNS=1 EVIDENCE_DURATION=2 EVIDENCE_SMOKE=1 SLUICE_BIN=target/debug/sluice \
#     BENCH_OUT=/tmp/evidence-smoke bench/evidence.sh   # does it work (minutes; figures mean nothing)
#
# Knobs: EVIDENCE_RUNS (5), EVIDENCE_DURATION (10 s per pgbench run), EVIDENCE_TAKEOVER_SECONDS (30),
# EVIDENCE_NETEM_DURATION (15), PGBOUNCER_BIN (../shared/anchors/pgbouncer-1.25.2), SLUICE_BIN
# (else a release build), BENCH_OUT (else bench/results/<YYYY-MM-DD>-evidence). EVIDENCE_SMOKE=1
# shrinks the client counts (idle 200, storm and 1000-client scenarios left out) and builds nothing.
# Run it on a quiet machine: anything else on the cores moves the figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/bench/lib/results.sh"

runs=${EVIDENCE_RUNS:-5}
secs=${EVIDENCE_DURATION:-10}
smoke=${EVIDENCE_SMOKE:-}
bench_pgbouncer || exit 1
if [ -z "${SLUICE_BIN:-}" ]; then
    [ -n "$smoke" ] && { echo "EVIDENCE_SMOKE=1 builds nothing: set SLUICE_BIN" >&2; exit 1; }
    echo "==> scripts/build-release.sh (the run command's build), cargo build --release -p delay-relay" >&2
    SLUICE_BIN=$("$root/scripts/build-release.sh" | tail -n1)
    cargo build --release -p delay-relay >&2
fi
SLUICE_BIN=$(readlink -f "$SLUICE_BIN")
export SLUICE_BIN
BENCH_COMMAND="bench/evidence.sh (EVIDENCE_RUNS=$runs EVIDENCE_DURATION=$secs EVIDENCE_SMOKE=$smoke)"
bench_results_init evidence
out=$BENCH_OUT
t0=$(date +%s)
log() { echo "==> $(date -u +%H:%M:%S) $*" | tee -a "$out/progress.txt" >&2; }

# 1. The pgbench scenarios.
log "bench/run.sh: $runs repeat(s) of ${secs} s"
bench_env=(BENCH_OUT="$out/bench" BENCH_REPEATS="$runs" BENCH_DURATION="$secs")
if [ -n "$smoke" ]; then
    bench_env+=(BENCH_NO_BUILD=1 BENCH_IDLE_CLIENTS=200 BENCH_IDLE_BATCH=50
        BENCH_TARGETS=direct,pgbouncer,sluice,sluice_w1
        BENCH_SCENARIOS=select_c10,select_c100,connect_select1_c20,connect_md5_select1_c20,tpcb_c50,select_extended_c50,select_prepared_c50,select_two_apps_c50,select_tls_c50,connect_tls_md5_select1_c20,big_rows_c4,idle_clients)
fi
env "${bench_env[@]}" bench/run.sh > "$out/bench.log" 2>&1 || log "bench/run.sh failed (exit $?): see bench.log"

# 2. An upgrade under load, and the same run without it.
tsecs=${EVIDENCE_TAKEOVER_SECONDS:-30}
[ -n "$smoke" ] && tsecs=6
for i in $(seq 1 "$runs"); do
    for at in $((tsecs / 2)) none; do
        name=$([ "$at" = none ] && echo baseline || echo takeover)
        log "bench/takeover.sh $name, run $i of $runs"
        BENCH_OUT="$out/takeover/$name-r$i" BENCH_SECONDS=$tsecs TAKEOVER_AT=$at bench/takeover.sh \
            > "$out/takeover-$name-r$i.log" 2>&1 || log "takeover $name r$i failed: see takeover-$name-r$i.log"
    done
done

# 3. Latency across a delayed link (needs root for the network namespace).
if [ "$(id -u)" = 0 ]; then
    log "bench/netem/run.sh: $runs repeat(s)"
    netem_env=(BENCH_OUT="$out/netem" BENCH_REPEATS="$runs" BENCH_DURATION="${EVIDENCE_NETEM_DURATION:-15}")
    [ -n "$smoke" ] && netem_env+=(BENCH_DURATION=3 BENCH_CLIENTS=100 BENCH_THREADS=2)
    if [ -n "$smoke" ] || [ -n "${BENCH_NO_BUILD:-}" ]; then
        netem_env+=(BENCH_NO_BUILD=1 RELAY_BIN="${RELAY_BIN:-$root/target/debug/delay-relay}")
    fi
    env "${netem_env[@]}" bench/netem/run.sh > "$out/netem.log" 2>&1 || log "netem failed (exit $?): see netem.log"
else
    log "netem skipped: not root"
fi

log "summary"
python3 "$root/bench/evidence_summary.py" "$out" > "$out/summary.md"
log "done in $(( ($(date +%s) - t0) / 60 )) min: $out/summary.md"
cat "$out/summary.md"
