#!/usr/bin/env bash
# PgBouncer's own pytest suite (the counted files, and its other files reported apart) against a Sluice binary, as the test command runs it.
#
#   scripts/pgbouncer-suite.sh [BINARY]        # default target/debug/sluice
#
# The suite and its runner live in ../shared/anchors/pgbouncer-suite/ (PgBouncer's code, never copied
# here). A case that fails is retried once on its own (a failure under load on 2 cores); the retry is
# reported. The run fails when a case outside tests/data/pgbouncer_suite_deliberate.txt still fails,
# when a listed case is not explained in docs/compat.md, or when fewer cases ran than the counted files
# hold (a suite that collected nothing must not pass). Prints passed / (counted - deliberate).
#
# Environment: SLUICE_SUITE_DIR (where run.sh is; default ../shared/anchors/pgbouncer-suite),
# SLUICE_ALLOW_MISSING_TOOLS=1 (a developer's explicit opt-out when the suite is not there; loud).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)

log() { printf '==> pgbouncer-suite: %s\n' "$*" >&2; }

BIN=${1:-target/debug/sluice}
SUITE_DIR=${SLUICE_SUITE_DIR:-$ROOT/../shared/anchors/pgbouncer-suite}
DELIBERATE=$ROOT/tests/data/pgbouncer_suite_deliberate.txt
# The counted files hold 236 cases without online_restart/takeover (228 run, 8 skipped by the suite
# itself); fewer means the collection broke.
MIN_CASES=${SLUICE_SUITE_MIN_CASES:-220}
FILES=(test_operations test_admin test_limits test_timeouts test_cancel test_copy test_prepared
       test_misc test_no_user test_no_database test_auth)
# The suite's other files, run too (with TLS on: SUITE_TLS=yes, as PgBouncer built with OpenSSL)
# and reported apart from the figure: they need TLS, replication, peering or host lists, which
# the anchors' count leaves out. test_auth's TLS case runs with them switched on as well.
EXTRA=(test_ssl test_ssl_eof test_replication test_peering test_load_balance_hosts)
MIN_EXTRA=${SLUICE_SUITE_MIN_EXTRA:-38}
export SUITE_TLS=yes

if [ ! -x "$SUITE_DIR/run.sh" ]; then
    if [ "${SLUICE_ALLOW_MISSING_TOOLS:-0}" = 1 ]; then
        log "!!!!!!!! NOT RUN: $SUITE_DIR/run.sh is missing and SLUICE_ALLOW_MISSING_TOOLS=1 !!!!!!!!"
        exit 0
    fi
    log "FAILED: PgBouncer's suite not found at $SUITE_DIR (set SLUICE_SUITE_DIR, or SLUICE_ALLOW_MISSING_TOOLS=1 to opt out locally)"
    exit 1
fi
[ -x "$BIN" ] || { log "FAILED: not an executable: $BIN"; exit 1; }

# Every listed case must be explained (name and reason) in docs/compat.md.
listed=(); deliberate=()
while read -r kind id rest; do
    case $kind in
        ''|'#'*) continue ;;
        deliberate) deliberate+=("$id") ;;
        reference) ;;
        *) log "FAILED: $DELIBERATE: unknown kind '$kind'"; exit 1 ;;
    esac
    listed+=("$id")
done < "$DELIBERATE"
status=0
for id in "${listed[@]}"; do
    name=${id##*::}
    grep -q -- "$name" docs/compat.md || { log "FAILED: listed case $id is not explained in docs/compat.md"; status=1; }
done
[ "${#deliberate[@]}" -le 10 ] || { log "FAILED: ${#deliberate[@]} deliberate cases listed (at most 10)"; status=1; }

# run.sh runs the suite as user postgres when root; the cache must be writable by that user.
CACHE=${SUITE_CACHE:-${TMPDIR:-/tmp}/sluice-pgbouncer-suite}
export SUITE_CACHE=$CACHE
TESTS=$CACHE/src/test   # where run.sh extracts the suite
JUNIT=$CACHE/junit.xml
RETRY_JUNIT=$CACHE/junit-retry.xml

# The suite's utils.py chdirs into test/ on import, so under xdist the workers resolve relative
# paths from there: give absolute paths.
args=(-n 2 -k "not online_restart and not takeover" --junitxml="$JUNIT")
for f in "${FILES[@]}" "${EXTRA[@]}"; do args+=("$TESTS/$f.py"); done

# Two of test_misc's cases start socat forwarders that outlive pytest and keep their ports: stop
# them when this script ends (only socat of that exact form, owned by the user the suite ran as).
suite_user=$([ "$(id -u)" = 0 ] && echo postgres || id -un)
trap 'pkill -u "$suite_user" -f "^socat tcp-listen:[0-9]+,reuseaddr,fork tcp:localhost:[0-9]+$" 2>/dev/null || true' EXIT

rm -f "$JUNIT" "$RETRY_JUNIT"
mkdir -p "$ROOT/target"
log "running the counted files and the others against $BIN (about 6 minutes on 2 cores)"
started=$(date +%s)
"$SUITE_DIR/run.sh" "$BIN" "${args[@]}" > "$ROOT/target/pgbouncer-suite.log" 2>&1
rc=$?
log "pytest exit status $rc after $(( $(date +%s) - started )) s; full output: target/pgbouncer-suite.log"
[ -s "$JUNIT" ] || { tail -n 40 "$ROOT/target/pgbouncer-suite.log" >&2; log "FAILED: no junit report"; exit 1; }

# outcomes FILE -> lines "nodeid outcome" (passed / failed / skipped)
outcomes() {
    python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
seen = {}
for tc in ET.parse(sys.argv[1]).iter("testcase"):
    path = tc.get("classname", "").replace(".", "/")
    nodeid = f"{path}.py::{tc.get('name')}"
    kinds = {child.tag for child in tc}
    if "failure" in kinds or "error" in kinds:
        out = "failed"
    elif "skipped" in kinds:
        out = "skipped"
    else:
        out = "passed"
    # a teardown error is reported as a second entry of the same case: the worse one counts
    if seen.get(nodeid) != "failed":
        seen[nodeid] = out
for k, v in seen.items():
    print(k, v)
PY
}

mapfile -t first < <(outcomes "$JUNIT")
declare -A result
for l in "${first[@]}"; do result[${l% *}]=${l##* }; done
failed=()
for k in "${!result[@]}"; do [ "${result[$k]}" = failed ] && failed+=("$k"); done

is_listed() { local x; for x in "${listed[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

to_retry=()
for k in "${failed[@]}"; do is_listed "$k" || to_retry+=("$k"); done
retried_ok=()
# Retries are for a case that failed under load, not for a broken build: more than 10 is not load.
if [ ${#to_retry[@]} -gt 10 ]; then
    log "${#to_retry[@]} cases failed: not retried"
elif [ ${#to_retry[@]} -gt 0 ]; then
    log "retrying ${#to_retry[@]} failed case(s) once, one at a time: ${to_retry[*]}"
    "$SUITE_DIR/run.sh" "$BIN" --junitxml="$RETRY_JUNIT" "${to_retry[@]}" \
        > "$ROOT/target/pgbouncer-suite-retry.log" 2>&1
    if [ -s "$RETRY_JUNIT" ]; then
        mapfile -t second < <(outcomes "$RETRY_JUNIT")
        for l in "${second[@]}"; do
            [ "${l##* }" = passed ] && { retried_ok+=("${l% *}"); result[${l% *}]=passed; }
        done
    fi
fi

is_deliberate() { local x; for x in "${deliberate[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

is_extra() { local f; for f in "${EXTRA[@]}"; do [ "${1%%::*}" = "test/$f.py" ] && return 0; done; return 1; }

counted=0; passed=0; skipped=0; unexpected=(); expected_failed=(); listed_passed=()
x_ran=0; x_passed=0; x_skipped=0; x_deliberate=0; counted_deliberate=0
for k in "${!result[@]}"; do
    if is_extra "$k"; then
        case ${result[$k]} in
            skipped) x_skipped=$((x_skipped + 1)); continue ;;
            passed) x_passed=$((x_passed + 1)); is_listed "$k" && listed_passed+=("$k") ;;
            failed) if is_listed "$k"; then expected_failed+=("$k"); else unexpected+=("$k"); fi ;;
        esac
        is_deliberate "$k" && x_deliberate=$((x_deliberate + 1))
        x_ran=$((x_ran + 1))
        continue
    fi
    case ${result[$k]} in
        skipped) skipped=$((skipped + 1)); continue ;;
        passed) passed=$((passed + 1)); is_listed "$k" && listed_passed+=("$k") ;;
        failed) if is_listed "$k"; then expected_failed+=("$k"); else unexpected+=("$k"); fi ;;
    esac
    is_deliberate "$k" && counted_deliberate=$((counted_deliberate + 1))
    counted=$((counted + 1))
done
denominator=$((counted - counted_deliberate))
pct=$(python3 -c "print(f'{100 * $passed / max($denominator, 1):.1f}')")

echo "PgBouncer suite: $passed passed of $counted counted ($skipped skipped by the suite); $counted_deliberate deliberate, $(( ${#listed[@]} - ${#deliberate[@]} )) failing on PgBouncer 1.25.2 too"
echo "PgBouncer suite: passed / (counted - deliberate) = $passed / $denominator = $pct %"
echo "PgBouncer suite, the files the figure does not count (${EXTRA[*]}): $x_passed passed of $x_ran ($x_skipped skipped by the suite), $x_deliberate deliberate"
for k in "${retried_ok[@]}"; do echo "PgBouncer suite: RETRIED: $k failed once, passed on its retry (see target/pgbouncer-suite.log)"; done
for k in "${expected_failed[@]}"; do
    if is_deliberate "$k"; then echo "PgBouncer suite: deliberate: $k (docs/compat.md)"
    else echo "PgBouncer suite: fails on PgBouncer 1.25.2 too: $k (docs/compat.md)"; fi
done
for k in "${listed_passed[@]}"; do echo "PgBouncer suite: NOTE: $k is listed but passed; take it off the list"; done
for k in "${unexpected[@]}"; do echo "PgBouncer suite: FAILED: $k"; done

total=$((counted + skipped))
if [ "$total" -lt "$MIN_CASES" ]; then
    log "FAILED: only $total cases ran (at least $MIN_CASES expected): the suite did not collect"
    status=1
fi
if [ $((x_ran + x_skipped)) -lt "$MIN_EXTRA" ]; then
    log "FAILED: only $((x_ran + x_skipped)) cases of the other files ran (at least $MIN_EXTRA expected)"
    status=1
fi
if [ ${#unexpected[@]} -gt 0 ]; then
    grep -E '^(FAILED|ERROR) ' "$ROOT/target/pgbouncer-suite.log" >&2
    log "FAILED: ${#unexpected[@]} case(s) outside the deliberate list"
    status=1
fi
exit "$status"
