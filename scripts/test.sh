#!/usr/bin/env bash
# The project's full check, as run by CI (.ci/run) and documented in the README:
# install tools, rustfmt, clippy, build, all tests (nextest), doc tests.
#
# Non-interactive (no stdin needed), works with CI=true. Integration tests start real
# nats-server processes from .tools/bin (see crates/testkit).
# Env: NEXTEST_TEST_THREADS (default 5, on the 2 cores; see below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

section() { printf '\n==================== %s (at %d s) ====================\n' "$*" "$((SECONDS - STARTED))"; }
STARTED=$SECONDS

section "install tools"
# --chromium: Debian's chromium + chromium-driver for the dashboard's browser test;
# --faketime: libfaketime for the chaos suite's clock test (tests/chaos/main.rs);
# --nextest: cargo-nextest, the only test runner here (.config/nextest.toml keeps the chaos tests
# apart from each other and terminates hung tests; `cargo test` would drop both);
# --systemd: systemd-analyze and systemd-sysusers for deploy/systemd/ (tests/processes/systemd.rs);
# --containers: podman + buildah for the container image test, --kubectl: kubectl for rendering
# the Kubernetes manifests (tests/processes/deploy/);
# --release-tools: zsh, fish, groff, man for the completion and man page tests.
bash scripts/install-tools.sh --chromium --faketime --nextest --systemd --containers --kubectl --release-tools
export NATS_SERVER_BIN="$ROOT/.tools/bin/nats-server"
"$NATS_SERVER_BIN" --version

# Five test threads on the 2 cores: the integration tests spend most of their time waiting for
# TTLs, heartbeats and hand-overs, not computing (measured: the nextest run took 548 s with 2
# threads, 424 s with 4 (issue 27); with issue 28's tests 482 s with 4, 419 s with 5 — all
# passing — and 369 s with 6, where one `exec` watchdog, starved, killed its child 2.5 ms past
# the term's deadline and the checker flagged S5: 6 is past what 2 cores keep honest). The
# chaos tests held to tight timing bounds still run alone (they take all the threads); those
# with roomy bounds take two (.config/nextest.toml says which and why).
export NEXTEST_TEST_THREADS="${NEXTEST_TEST_THREADS:-5}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A clean clone builds everything once: incremental compilation only adds work, and full debug
# info makes the ~20 test and example binaries slow to compile and link. Line tables keep file
# and line in backtraces. (Override either by setting it.)
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"

section "toolchain"
cargo --version
rustc --version

section "cargo fmt --check"
cargo fmt --all -- --check --color never

section "import cycles"
# No module of src/ or of the test kit depends on itself through others (top level and inside
# every folder), test code included: --with-tests counts the code under cfg(test) too, so its
# graph is a superset of the one without and this one run per crate covers both.
python3 scripts/import-cycles.py all --with-tests
python3 scripts/import-cycles.py all --with-tests --root crates/testkit/src

section "doc citations"
# Every test, function and path the documents (README.md, docs/*.md) cite exists.
python3 scripts/doc-citations.py

section "cargo clippy (-D warnings)"
# --workspace: the test kit (crates/testkit) too.
cargo clippy --workspace --all-targets --all-features -- -D warnings

# (No separate pass with the default features: `default = ["cli"]` turns on every feature but
# the test-only `testing` and `negative-controls`, whose code is test seams; the pass above and
# the one below bracket it.)

section "cargo clippy --lib --no-default-features (the library an application embeds)"
# `default-features = false`: the manager alone, without the binary, HTTP, OTel SDK or tooling.
cargo clippy --lib --no-default-features -- -D warnings

section "cargo build (tests, binary, the examples the tests run) --all-features"
# What the tests run: one build, with the `testing` and `negative-controls` features (the chaos
# suite's workload node needs them). The benchmark examples (failover_bench, scale_bench,
# placement_bench, groups_bench, exec_bench, sites_bench) are not run by the tests: clippy --all-targets
# above type-checks them, and building them here would only cost CI time. A test that runs an
# example not listed here fails loudly (testkit::example_bin: "example binary … is missing").
TEST_EXAMPLES=(chaos_node quick_start control_plane router single_role from_config sharded_worker)
cargo build --all-features --lib --bins --tests \
    "${TEST_EXAMPLES[@]/#/--example=}"

LOG_DIR="$(mktemp -d)"
trap 'rm -rf "$LOG_DIR"' EXIT
PASSED=0
FAILED=0
STATUS=0

# Adds the "N passed" / "N failed" counts on the lines of runner output file $1 that match the
# regex $2 (nextest's Summary line, the doc tests' libtest "test result:" lines) to the totals.
count() {
    local counts
    counts=$(awk -v pat="$2" '
        $0 ~ pat {
            for (i = 1; i < NF; i++) {
                w = $(i + 1); gsub(/[,;.]/, "", w)
                if (w == "passed") p += $i
                if (w == "failed") f += $i
            }
        }
        END { print p + 0, f + 0 }' "$1")
    PASSED=$((PASSED + ${counts% *}))
    FAILED=$((FAILED + ${counts#* }))
}

section "cargo nextest run (test threads: $NEXTEST_TEST_THREADS)"
# No fallback to `cargo test`: without nextest the chaos tests would run beside each other and a
# hung test would hang CI. install-tools.sh --nextest installed it or failed.
cargo nextest --version
cargo nextest run --all-features --no-fail-fast 2>&1 | tee "$LOG_DIR/tests.log" || STATUS=1
count "$LOG_DIR/tests.log" '^ *Summary \['

section "cargo test --doc"
# (They reuse the build above: the chaos suite's nested `cargo build --example chaos_node`
# no longer inherits the test's `CARGO_PKG_*` variables, which made ring's build script rerun
# and cost this step and the first chaos test about 25 s each — crates/testkit/src/faults.rs.)
cargo test --doc --all-features 2>&1 | tee "$LOG_DIR/doc.log" || STATUS=1
count "$LOG_DIR/doc.log" '^test result:'

section "cargo doc (-D warnings)"
# Every public item documented, no broken intra-doc links (the lib's #![deny(missing_docs)]).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features --lib

section "summary ($((SECONDS - STARTED)) s)"
if [[ "$STATUS" != 0 && "$FAILED" == 0 ]]; then
    # A runner failed without reporting failed tests (e.g. a compile error): count it.
    FAILED=1
fi
echo "summary: ${PASSED} passed, ${FAILED} failed"
exit "$STATUS"
