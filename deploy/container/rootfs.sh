#!/bin/sh
# Lays out the container image's root filesystem around a static sluice binary:
#   rootfs.sh BINARY DIR
# DIR/usr/local/bin/sluice (debug info stripped), /etc/passwd and /etc/group naming the
# unprivileged user 65532 (sluice), the system CA bundle when there is one (server_tls_sslmode
# verify-* without server_tls_ca_file), /etc/pgbouncer for the config, and /run/sluice (its
# unix_socket_dir) and /tmp writable. Used by the Containerfile's build stage and by
# tests/tests/container.rs, so that the test builds the image the recipe builds. Run as root.
set -eu
bin=$1
root=$2
install -D -m 0755 "$bin" "$root/usr/local/bin/sluice"
if command -v strip >/dev/null 2>&1; then
    strip --strip-debug "$root/usr/local/bin/sluice"
fi
install -d -m 0755 "$root/etc" "$root/etc/pgbouncer"
printf 'root:x:0:0:root:/:/nonexistent\nsluice:x:65532:65532:sluice:/nonexistent:/nonexistent\n' \
    >"$root/etc/passwd"
printf 'root:x:0:\nsluice:x:65532:\n' >"$root/etc/group"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
install -d -m 1777 "$root/tmp"
install -d -m 0755 -o 65532 -g 65532 "$root/run/sluice"
