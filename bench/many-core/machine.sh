# Sourced by run.sh and device.sh: unpack the bundle beside this file into /tmp/src once, and write
# $OUT/machine.txt (host, CPU, kernel, the commit, versions) once.
nproc; [ -d /tmp/src/root ] || { mkdir -p /tmp/src && tar -xJf $D/bundle.tar.xz -C /tmp/src; } || exit 1
[ -f "$OUT/machine.txt" ] || { echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "nproc: $(nproc)"
  echo "cpu_model: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "memory: $(free -m | awk '/^Mem:/{print $2 " MiB"}')"; echo "kernel: $(uname -srvm)"
  echo "git_commit: ${GIT_COMMIT:-$(git -C "$D/.." rev-parse HEAD 2>/dev/null || echo unknown)}"
  for b in /tmp/src/root/pgbouncer /tmp/src/root/pg_doorman /tmp/src/root/sluice $D/sluice-old; do
    [ -x "$b" ] && echo "$(basename "$b"): $(/tmp/src/root/libs/ld-linux-x86-64.so.2 --library-path /tmp/src/root/libs "$b" --version 2>&1 | head -1)"
  done; } > "$OUT/machine.txt"
