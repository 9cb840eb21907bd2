#!/usr/bin/env bash
# Collects the root file system of the nats-roles container image into DEST:
#
#   deploy/container/make-rootfs.sh BINARY DEST
#
#   DEST/usr/local/bin/nats-roles       BINARY (mode 0755)
#   DEST/<path of each shared library>  every library `ldd BINARY` names, and the dynamic loader
#                                       (none for a statically linked binary)
#   DEST/etc/ssl/certs/ca-certificates.crt   the CA bundle (tls:// servers without tls.ca_file)
#   DEST/etc/passwd, DEST/etc/group     root and the non-root user nonroot (65532:65532)
#   DEST/etc/nsswitch.conf              hosts: files dns
#   DEST/etc/nats-roles/roles.yaml      the image's default configuration (roles.yaml beside
#                                       this script)
#   DEST/tmp                            mode 1777
#
# The Containerfile's `rootfs` stage runs it on the release binary; the test suite runs it on the
# binary it tests and builds the Containerfile's final stage from DEST (docs/deploy.md). It needs
# ldd (libc-bin) and the CA bundle (ca-certificates) on the machine that runs it; DEST must not
# exist yet. Any failure exits non-zero with a message on stderr.
set -Eeuo pipefail

die() { printf 'make-rootfs: %s\n' "$*" >&2; exit 1; }
trap 'die "failed at line ${LINENO}: ${BASH_COMMAND}"' ERR

[[ $# == 2 ]] || die "usage: make-rootfs.sh BINARY DEST"
BIN="$1"
DEST="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
NONROOT_ID=65532

[[ -f "$BIN" && -x "$BIN" ]] || die "${BIN} is not an executable file"
[[ ! -e "$DEST" ]] || die "${DEST} exists already"
[[ -f "$CA_BUNDLE" ]] || die "${CA_BUNDLE} is missing (install the ca-certificates package)"
command -v ldd >/dev/null 2>&1 || die "ldd not found (install the libc-bin package)"

# copy_file SRC: copies SRC (symlinks resolved) to the same path under DEST.
copy_file() {
    mkdir -p "${DEST}$(dirname "$1")"
    cp -L --preserve=mode "$1" "${DEST}$1"
}

mkdir -p "$DEST"/usr/local/bin "$DEST"/etc/nats-roles "$DEST"/etc/ssl/certs "$DEST"/tmp
install -m 0755 "$BIN" "$DEST"/usr/local/bin/nats-roles

# The shared libraries and the loader: `ldd` prints "libc.so.6 => /lib/.../libc.so.6 (0x...)"
# for a library and "/lib64/ld-linux-x86-64.so.2 (0x...)" for the loader; linux-vdso has no file.
if LIBS="$(ldd "$BIN" 2>&1)"; then
    while read -r line; do
        case "$line" in
            *"not found"*) die "${BIN}: a library is missing: ${line}" ;;
            *"=> /"*) path="${line#*=> }"; copy_file "${path%% (*}" ;;
            /*) copy_file "${line%% (*}" ;;
            *) ;;
        esac
    done <<<"$LIBS"
elif grep -q -e 'not a dynamic executable' -e 'statically linked' <<<"$LIBS"; then
    : # a static binary needs no library
else
    die "ldd ${BIN}: ${LIBS}"
fi

install -m 0644 "$CA_BUNDLE" "$DEST"/etc/ssl/certs/ca-certificates.crt
install -m 0644 "$HERE"/roles.yaml "$DEST"/etc/nats-roles/roles.yaml
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n' \
    "$NONROOT_ID" "$NONROOT_ID" >"$DEST"/etc/passwd
printf 'root:x:0:\nnonroot:x:%d:\n' "$NONROOT_ID" >"$DEST"/etc/group
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$DEST"/etc/nsswitch.conf
chmod 0644 "$DEST"/etc/passwd "$DEST"/etc/group "$DEST"/etc/nsswitch.conf
chmod 1777 "$DEST"/tmp
