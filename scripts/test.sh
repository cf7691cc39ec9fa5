#!/usr/bin/env bash
# THE test command: installs what a fresh Debian needs (only when missing), builds the whole workspace,
# runs every test (unit + e2e), then a short fuzzing pass (scripts/fuzz.sh; SLUICE_SKIP_FUZZ=1 skips it).
# Every tool a test needs is installed here: a test whose tool is missing fails (unless the developer
# sets SLUICE_ALLOW_MISSING_TOOLS=1), and a tool this script cannot install fails the run, loudly,
# at once and again at the end.
# Optional SLUICE_TEST_FILTER=<name> is passed to `cargo test` (and skips fuzzing); extra arguments
# are passed to `cargo test` as well (e.g. `scripts/test.sh -- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUST_BACKTRACE=1

log() { printf '==> %s\n' "$*" >&2; }

# What could not be set up: each entry makes the run fail (after the tests ran, so that the rest
# is still reported).
setup_failed=()
setup_error() {
    printf '\n!!!!!!!! SETUP FAILED: %s\n\n' "$*" >&2
    setup_failed+=("$*")
}

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

# The tools the tests need and the Debian packages that bring them (each line: a check, a package).
missing=()
{ have_pg_server && command -v pgbench >/dev/null && command -v psql >/dev/null; } || missing+=(postgresql)
{ command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; } || missing+=(pgbouncer)
{ command -v cc >/dev/null && command -v make >/dev/null; } || missing+=(build-essential)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v curl >/dev/null || missing+=(curl)
# PgBouncer's own suite (scripts/pgbouncer-suite.sh): socat for two of its cases.
command -v socat >/dev/null || missing+=(socat)
[ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
# The openssl command makes the throwaway certificates of bench/pgo_train.py (tests/tests/pgo_train.rs).
command -v openssl >/dev/null || missing+=(openssl)
# Driver toolchains for the compat/ matrix (tests/tests/compat.rs; a missing one fails it, unless
# SLUICE_ALLOW_MISSING_TOOLS=1).
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
# The reference PgBouncer 1.25.2 of the parity tests (../shared/anchors, see below) links them.
dpkg -s libevent-2.1-7 libssl3 >/dev/null 2>&1 || missing+=(libevent-2.1-7 libssl3)

if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1; then
        log "installing: ${missing[*]}"
        if ! { $SUDO apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
            setup_error "apt-get install ${missing[*]} failed (its error is above)"
        fi
    else
        setup_error "missing ${missing[*]} and no apt-get to install them"
    fi
fi
# What the packages should have brought.
for tool in initdb:postgresql pgbench:postgresql psql:postgresql cc:build-essential \
    python3:python3 openssl:openssl socat:socat go:golang-go systemd-analyze:systemd groff:groff-base buildah:buildah; do
    name=${tool%%:*}
    if [ "$name" = initdb ]; then have_pg_server && continue
    elif command -v "$name" >/dev/null 2>&1; then continue; fi
    setup_error "$name is still not installed (Debian package ${tool#*:})"
done
command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
    || setup_error "chromium is still not installed (Debian package chromium)"

# tests/go/* (metrics.rs) and compat/go need Go 1.21 or later; Debian 12's golang-go is 1.19 and
# cannot fetch a newer one itself. Then the Go module proxy serves the official toolchain as the
# module golang.org/toolchain (checked against sum.golang.org by `go mod download`), unpacked into
# target/tools/go and put first on PATH.
go_minor() { go version 2>/dev/null | sed -n 's/.* go1\.\([0-9]*\).*/\1/p'; }
GO_TOOLCHAIN=go1.22.12
if command -v go >/dev/null 2>&1 && [ "$(go_minor)" -lt 21 ] 2>/dev/null; then
    go_dir="$PWD/target/tools/go"
    if [ ! -x "$go_dir/bin/go" ] || [ "$("$go_dir/bin/go" env GOVERSION 2>/dev/null)" != "$GO_TOOLCHAIN" ]; then
        arch=$(go env GOARCH)
        log "go $(go env GOVERSION) is older than 1.21: fetching $GO_TOOLCHAIN through the Go module proxy"
        rm -rf "$go_dir"
        mod="golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-$arch"
        if dir=$(cd /tmp && go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') \
            && [ -n "$dir" ] && mkdir -p "$(dirname "$go_dir")" && cp -r "$dir" "$go_dir"; then
            # Module zips keep no file modes: make the tools executable again.
            chmod -R u+w "$go_dir"
            chmod +x "$go_dir"/bin/* "$go_dir"/pkg/tool/*/*
        else
            setup_error "could not fetch $mod from the Go module proxy"
            rm -rf "$go_dir"
        fi
    fi
    [ -x "$go_dir/bin/go" ] && export PATH="$go_dir/bin:$PATH"
fi
command -v go >/dev/null 2>&1 && [ "$(go_minor)" -lt 21 ] 2>/dev/null \
    && setup_error "go is $(go env GOVERSION); tests/go needs 1.21 or later"

# The reference PgBouncer 1.25.2 of the parity tests (tests/tests/parity.rs, faults_side_by_side.rs):
# not a package, it comes with the workspace in ../shared/anchors (or $PGBOUNCER_ANCHOR).
anchor="${PGBOUNCER_ANCHOR:-../shared/anchors/pgbouncer-1.25.2}"
if [ ! -x "$anchor" ]; then
    setup_error "the reference PgBouncer is not at $anchor (set PGBOUNCER_ANCHOR); the parity tests will fail"
elif ! "$anchor" --version >/dev/null 2>&1; then
    setup_error "the reference PgBouncer at $anchor does not run: $("$anchor" --version 2>&1 | head -3)"
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
    || { setup_error "the static build failed; tests/tests/container.rs will fail"
         rm -f "target/$static_target/debug/sluice"; }

# deploy/kubernetes/ is validated offline (tests/tests/kubernetes.rs) against the Kubernetes schemas
# that the PyPI package kubernetes-validate bundles, from a virtualenv under target/tools.
k8s_venv=target/tools/kubernetes-validate
if ! "$k8s_venv/bin/python3" -c 'import kubernetes_validate' >/dev/null 2>&1; then
    log "installing kubernetes-validate into $k8s_venv"
    rm -rf "$k8s_venv"
    if ! { python3 -m venv "$k8s_venv" \
        && "$k8s_venv/bin/pip" install -q --disable-pip-version-check 'kubernetes-validate==1.37.0'; }; then
        setup_error "could not install kubernetes-validate; tests/tests/kubernetes.rs will fail its schema checks"
        rm -rf "$k8s_venv"
    fi
fi

# The fuzz pass's toolchain and build (nightly, cargo-fuzz, 15 targets with ASan: minutes of CPU)
# run in the background at the lowest priority while the tests run, which leave the CPUs idle much
# of the time (servers starting, timeouts running out); the fuzzing pass below then finds it built.
fuzz_prep=""
if [ -z "${SLUICE_TEST_FILTER:-}" ] && [ "${SLUICE_SKIP_FUZZ:-0}" != 1 ]; then
    log "scripts/fuzz.sh build in the background (nice 19; log: target/fuzz-build.log)"
    nice -n 19 scripts/fuzz.sh build > target/fuzz-build.log 2>&1 &
    fuzz_prep=$!
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
# installs nightly + cargo-fuzz when missing, fails loudly without network (SLUICE_ALLOW_MISSING_TOOLS=1:
# a loud NOT RUN instead); a crash fails the run.
if [ -n "${SLUICE_TEST_FILTER:-}" ] || [ "${SLUICE_SKIP_FUZZ:-0}" = 1 ]; then
    log "fuzzing skipped (SLUICE_TEST_FILTER or SLUICE_SKIP_FUZZ set)"
else
    if [ -n "$fuzz_prep" ]; then
        wait "$fuzz_prep" || log "the background fuzz build failed; the pass below builds again and reports it"
        cat target/fuzz-build.log >&2
    fi
    log "scripts/fuzz.sh (FUZZ_SECONDS=${FUZZ_SECONDS:-60})"
    scripts/fuzz.sh || status=1
fi
if [ ${#setup_failed[@]} -gt 0 ]; then
    printf '\n!!!!!!!! SETUP FAILED (the tests that need these failed or would have):\n' >&2
    printf '!!!!!!!!   %s\n' "${setup_failed[@]}" >&2
    status=1
fi
exit "$status"
