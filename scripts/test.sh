#!/usr/bin/env bash
# THE test command: installs what a fresh Debian needs (only when missing), builds the whole workspace,
# runs every test (unit + e2e), then a short fuzzing pass (scripts/fuzz.sh; SLUICE_SKIP_FUZZ=1 skips it).
# Optional SLUICE_TEST_FILTER=<name> is passed to `cargo test` (and skips fuzzing); extra arguments
# are passed to `cargo test` as well (e.g. `scripts/test.sh -- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUST_BACKTRACE=1

log() { printf '==> %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

have_pg_server() {
    local d
    if command -v pg_config >/dev/null 2>&1; then
        d=$(pg_config --bindir 2>/dev/null || true)
        [ -n "$d" ] && [ -x "$d/initdb" ] && return 0
    fi
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && return 0
    done
    return 1
}

missing=()
{ have_pg_server && command -v pgbench >/dev/null && command -v psql >/dev/null; } || missing+=(postgresql)
{ command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; } || missing+=(pgbouncer)
{ command -v cc >/dev/null && command -v make >/dev/null; } || missing+=(build-essential)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v curl >/dev/null || missing+=(curl)
# PgBouncer's own suite (scripts/pgbouncer-suite.sh): socat for two of its cases; the reference
# PgBouncer 1.25.2 binary needs libevent and OpenSSL 3.
command -v socat >/dev/null || missing+=(socat)
[ -e /usr/lib/x86_64-linux-gnu/libevent-2.1.so.7 ] || [ "$(uname -m)" != x86_64 ] || missing+=(libevent-2.1-7)
[ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
# Driver toolchains for the compat/ matrix (tests/tests/compat.rs; a missing one turns its cells SKIP).
{ command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' >/dev/null 2>&1; } || missing+=(python3 python3-venv)
{ command -v mvn >/dev/null && command -v javac >/dev/null; } || missing+=(maven default-jdk-headless)
command -v go >/dev/null || missing+=(golang-go)
{ command -v node >/dev/null && command -v npm >/dev/null; } || missing+=(nodejs npm)
# deploy/systemd/sluice.service is checked with systemd-analyze verify (tests/tests/deploy.rs).
command -v systemd-analyze >/dev/null || missing+=(systemd)
# docs/sluice.1 is rendered with groff -ww (tests/tests/manpage.rs).
command -v groff >/dev/null || missing+=(groff-base)
# deploy/container/Containerfile is built and run with buildah (tests/tests/container.rs).
command -v buildah >/dev/null || missing+=(buildah)
# The dashboard is loaded in a real headless browser (tests/tests/dashboard.rs).
{ command -v chromium >/dev/null || command -v chromium-browser >/dev/null; } || missing+=(chromium)

if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1; then
        log "installing: ${missing[*]}"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        log "WARNING: missing ${missing[*]} and no apt-get; continuing anyway"
    fi
fi

if ! command -v cargo >/dev/null 2>&1; then
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
    log "installing Rust via rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    . "$HOME/.cargo/env"
fi

log "cargo build --workspace --all-targets"
cargo build --workspace --all-targets

# The container image test (tests/tests/container.rs) puts a static binary on `scratch`, built as
# the Containerfile builds it (crt-static needs --target; debug profile here, to keep it short).
static_target="$(uname -m)-unknown-linux-gnu"
log "cargo build -p sluice --target $static_target (crt-static, for the container image test)"
RUSTFLAGS='-C target-feature=+crt-static' cargo build -p sluice --bin sluice --target "$static_target" \
    || { log "WARNING: static build failed; tests/tests/container.rs will SKIP"
         rm -f "target/$static_target/debug/sluice"; }

# deploy/kubernetes/ is validated offline (tests/tests/kubernetes.rs) against the Kubernetes schemas
# that the PyPI package kubernetes-validate bundles, from a virtualenv under target/tools.
k8s_venv=target/tools/kubernetes-validate
if ! "$k8s_venv/bin/python3" -c 'import kubernetes_validate' >/dev/null 2>&1; then
    log "installing kubernetes-validate into $k8s_venv"
    rm -rf "$k8s_venv"
    if ! { python3 -m venv "$k8s_venv" \
        && "$k8s_venv/bin/pip" install -q --disable-pip-version-check 'kubernetes-validate==1.37.0'; }; then
        log "WARNING: could not install kubernetes-validate; tests/tests/kubernetes.rs will SKIP its schema checks"
        rm -rf "$k8s_venv"
    fi
fi

status=0
log "cargo test --workspace${SLUICE_TEST_FILTER:+ $SLUICE_TEST_FILTER}"
cargo test --workspace --no-fail-fast ${SLUICE_TEST_FILTER:+"$SLUICE_TEST_FILTER"} "$@" || status=$?

# PgBouncer's own pytest suite, the counted files, against the binary just built (~6 minutes);
# fails on a case outside tests/data/pgbouncer_suite_deliberate.txt.
if [ -n "${SLUICE_TEST_FILTER:-}" ]; then
    log "PgBouncer's suite skipped (SLUICE_TEST_FILTER set)"
else
    log "scripts/pgbouncer-suite.sh target/debug/sluice"
    scripts/pgbouncer-suite.sh target/debug/sluice || status=1
fi

# Fuzzing: every fuzz/ target for FUZZ_SECONDS in total (default 60) from the committed corpus;
# installs nightly + cargo-fuzz when missing, SKIPs loudly without network; a crash fails the run.
if [ -n "${SLUICE_TEST_FILTER:-}" ] || [ "${SLUICE_SKIP_FUZZ:-0}" = 1 ]; then
    log "fuzzing skipped (SLUICE_TEST_FILTER or SLUICE_SKIP_FUZZ set)"
else
    log "scripts/fuzz.sh (FUZZ_SECONDS=${FUZZ_SECONDS:-60})"
    scripts/fuzz.sh || status=1
fi
exit "$status"
