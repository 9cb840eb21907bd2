#!/usr/bin/env bash
# A real local deployment: one nats-server with JetStream and three nats-roles instances
# (node-a, node-b, node-c) sharing roles.example.yaml. node-a starts 2 s ahead so it takes the
# roles; ~6 s in it is stopped with SIGTERM to show the hand-over to node-b/node-c, and ~5 s
# later it is started again. Placement is on in roles.example.yaml: after the 5 s stability window
# the roles spread evenly over the live instances by graceful hand-over. Each instance serves its dashboard and JSON API: node-a on
# http://127.0.0.1:8081/, node-b on :8082, node-c on :8083 (open one and watch the hand-over).
#
#   scripts/demo.sh                    # runs until Ctrl-C
#   DEMO_DURATION=30 scripts/demo.sh   # exits by itself 30 s after the instances start
#
# Env:
#   NATS_PORT          client port of the demo server (default 4222)
#   NATS_MONITOR_PORT  its monitoring port (default NATS_PORT + 4000, i.e. 8222; try /jsz)
#   DEMO_HTTP_PORT     dashboard port of node-a; node-b and node-c use the next two (default 8081)
#   DEMO_DURATION      seconds to run after the instances start, then stop everything
#   DEMO_CONFIG        config file for the instances (default roles.example.yaml)
#   NATS_ROLES_BIN     use this nats-roles binary instead of building target/release/nats-roles
#   NATS_SERVER_BIN    use this nats-server instead of .tools/bin/nats-server
#
# The console shows the demo's own lines ([demo] ...) and each instance's transitions (its stdout,
# prefixed [node-a] ...); the instances' structured logs (their stderr, RUST_LOG filters them) go
# to .demo/port-<NATS_PORT>/node-{a,b,c}.log, whose paths the demo prints (tail -f one to follow).
# The server's store and log live in the same folder (the store and the logs are wiped at start; a
# lock there refuses a second demo on the same port, demos on other ports can run side by side).
# On exit, Ctrl-C or SIGTERM, every instance gets SIGTERM (SIGKILL after 10 s), then the server
# is stopped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

NATS_PORT="${NATS_PORT:-4222}"
DEMO_CONFIG="${DEMO_CONFIG:-roles.example.yaml}"
NATS_URL="nats://127.0.0.1:${NATS_PORT}"
STOP_TIMEOUT=10

say() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] ERROR: %s\n' "$*" >&2; exit 1; }
banner() { printf '\n[demo] ======== %s ========\n\n' "$*"; }

[[ "$NATS_PORT" =~ ^[0-9]+$ ]] && ((NATS_PORT > 0 && NATS_PORT < 65536)) \
    || die "NATS_PORT must be a port number, got '$NATS_PORT'"
NATS_MONITOR_PORT="${NATS_MONITOR_PORT:-$((NATS_PORT + 4000))}"
[[ "$NATS_MONITOR_PORT" =~ ^[0-9]+$ ]] && ((NATS_MONITOR_PORT > 0 && NATS_MONITOR_PORT < 65536)) \
    || die "NATS_MONITOR_PORT must be a port number, got '$NATS_MONITOR_PORT' (set it explicitly)"
DEMO_HTTP_PORT="${DEMO_HTTP_PORT:-8081}"
[[ "$DEMO_HTTP_PORT" =~ ^[0-9]+$ ]] && ((DEMO_HTTP_PORT > 0 && DEMO_HTTP_PORT < 65534)) \
    || die "DEMO_HTTP_PORT must be a port number, got '$DEMO_HTTP_PORT'"
declare -A HTTP_PORT=([node-a]=$DEMO_HTTP_PORT [node-b]=$((DEMO_HTTP_PORT + 1)) [node-c]=$((DEMO_HTTP_PORT + 2)))
DEMO_DIR="$ROOT/.demo/port-$NATS_PORT"
# Path of instance $1's log file, and the same relative to the repository (for the console).
log_file() { printf '%s/%s.log' "$DEMO_DIR" "$1"; }
rel() { printf '%s' "${1#"$ROOT"/}"; }
if [[ -n "${DEMO_DURATION:-}" ]]; then
    [[ "$DEMO_DURATION" =~ ^[0-9]+$ ]] || die "DEMO_DURATION must be whole seconds, got '$DEMO_DURATION'"
fi
[[ -f "$DEMO_CONFIG" ]] || die "config file $DEMO_CONFIG not found (set DEMO_CONFIG)"

mkdir -p "$DEMO_DIR"
# One demo per port: the store is wiped at start, so never under another run's server.
# Children get the lock fd closed (9>&-); the lock goes when this script ends.
exec 9>"$DEMO_DIR/lock"
flock -n 9 || die "another scripts/demo.sh is running with NATS_PORT=$NATS_PORT (lock $DEMO_DIR/lock)"

# ---------------------------------------------------------------------------------------------
# Process bookkeeping and cleanup
# ---------------------------------------------------------------------------------------------

NATS_PID=""
declare -A INSTANCE_PID=()   # name -> pid of the nats-roles process itself (not of its sed)
SLEEP_PID=""
CLEANED_UP=0

# True if $1 is a live child (not yet reaped).
alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# Sends SIGTERM to the given pids, waits up to STOP_TIMEOUT s for all, then SIGKILLs the rest.
stop_pids() {
    local pid pending deadline=$((SECONDS + STOP_TIMEOUT))
    for pid in "$@"; do
        alive "$pid" && kill -TERM "$pid" 2>/dev/null || true
    done
    while :; do
        pending=()
        for pid in "$@"; do
            alive "$pid" && pending+=("$pid")
        done
        ((${#pending[@]} == 0)) && break
        if ((SECONDS >= deadline)); then
            say "still running after ${STOP_TIMEOUT}s, sending SIGKILL to: ${pending[*]}"
            kill -KILL "${pending[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    local status
    for pid in "$@"; do
        status=0
        wait "$pid" 2>/dev/null || status=$?
        say "pid $pid exited with status $status"
    done
}

cleanup() {
    ((CLEANED_UP)) && return 0
    CLEANED_UP=1
    set +e
    trap '' INT TERM
    alive "$SLEEP_PID" && kill "$SLEEP_PID" 2>/dev/null || true
    report_exits
    local pids=()
    local name
    for name in "${!INSTANCE_PID[@]}"; do
        alive "${INSTANCE_PID[$name]}" && pids+=("${INSTANCE_PID[$name]}")
    done
    if ((${#pids[@]} > 0)); then
        say "stopping ${#pids[@]} instance(s) with SIGTERM (up to ${STOP_TIMEOUT}s)"
        stop_pids "${pids[@]}"
    fi
    if alive "$NATS_PID"; then
        say "stopping nats-server (pid $NATS_PID)"
        stop_pids "$NATS_PID"
    fi
    if [[ -n "$NATS_PID" ]]; then
        # Give the output prefixers (sed) a moment to print the last lines; they exit on EOF.
        sleep 0.2
        say "stopped; nats-server log: $(rel "$DEMO_DIR/nats-server.log")"
        if ((${#INSTANCE_PID[@]} > 0)); then
            say "instance logs: $(rel "$(log_file node-a)") $(rel "$(log_file node-b)") $(rel "$(log_file node-c)")"
        fi
    fi
}

trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# Sleeps $1 seconds, interruptibly (traps run at once); with DEMO_DURATION, never past the
# deadline: when it is reached, the demo ends (exit 0 -> cleanup).
DEADLINE=""
pause_for() {
    local secs=$1
    if [[ -n "$DEADLINE" ]]; then
        local left=$((DEADLINE - SECONDS))
        if ((left <= 0)); then
            say "DEMO_DURATION=${DEMO_DURATION}s reached"
            exit 0
        fi
        ((secs > left)) && secs=$left
    fi
    sleep "$secs" &
    SLEEP_PID=$!
    wait "$SLEEP_PID" || true
    SLEEP_PID=""
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# HTTP status of GET 127.0.0.1:$1$2, via bash's /dev/tcp (no curl needed); empty on failure.
http_status() {
    local port=$1 path=$2 line=""
    {
        exec 3<>"/dev/tcp/127.0.0.1/$port" || return 0
        printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&3
        IFS= read -r -t 2 line <&3 || true
        exec 3<&-
    } 2>/dev/null
    line=${line%$'\r'}
    [[ "$line" =~ ^HTTP/[0-9.]+\ ([0-9]{3}) ]] && printf '%s' "${BASH_REMATCH[1]}"
}

# ---------------------------------------------------------------------------------------------
# Tools and build
# ---------------------------------------------------------------------------------------------

banner "installing tools"
bash scripts/install-tools.sh
NATS_SERVER_BIN="${NATS_SERVER_BIN:-$ROOT/.tools/bin/nats-server}"
[[ -x "$NATS_SERVER_BIN" ]] || die "nats-server not found at $NATS_SERVER_BIN"

if [[ -n "${NATS_ROLES_BIN:-}" ]]; then
    say "using NATS_ROLES_BIN=$NATS_ROLES_BIN (not building)"
else
    banner "building nats-roles (release)"
    cargo build --release --bin nats-roles
    # Cargo's real output directory (CARGO_TARGET_DIR, .cargo/config.toml build.target-dir, ...).
    TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')" \
        || die "cargo metadata failed: cannot find cargo's target directory"
    NATS_ROLES_BIN="$TARGET_DIR/release/nats-roles"
fi
[[ -x "$NATS_ROLES_BIN" ]] || die "nats-roles binary not found at $NATS_ROLES_BIN"

# ---------------------------------------------------------------------------------------------
# nats-server
# ---------------------------------------------------------------------------------------------

port_open "$NATS_PORT" && die "port $NATS_PORT is already in use (another nats-server?); set NATS_PORT"
port_open "$NATS_MONITOR_PORT" && die "port $NATS_MONITOR_PORT is already in use; set NATS_MONITOR_PORT"
for name in node-a node-b node-c; do
    port_open "${HTTP_PORT[$name]}" \
        && die "port ${HTTP_PORT[$name]} (dashboard of $name) is already in use; set DEMO_HTTP_PORT"
done

rm -rf "$DEMO_DIR/store"
: >"$DEMO_DIR/nats-server.log"
for name in node-a node-b node-c; do
    : >"$(log_file "$name")"
done

banner "starting nats-server on $NATS_URL (monitoring http://127.0.0.1:$NATS_MONITOR_PORT)"
# setsid: a Ctrl-C in the terminal must not reach the server (nor the instances below) directly;
# cleanup() stops the instances first, so they can release their roles, then the server.
setsid "$NATS_SERVER_BIN" --jetstream --addr 127.0.0.1 --port "$NATS_PORT" \
    --http_port "$NATS_MONITOR_PORT" --store_dir "$DEMO_DIR/store" --server_name demo \
    </dev/null >>"$DEMO_DIR/nats-server.log" 2>&1 9>&- &
NATS_PID=$!

ready_deadline=$((SECONDS + 10))
until [[ "$(http_status "$NATS_MONITOR_PORT" /healthz)" == 200 ]] && port_open "$NATS_PORT"; do
    if ! alive "$NATS_PID"; then
        tail -n 20 "$DEMO_DIR/nats-server.log" >&2 || true
        die "nats-server exited during start-up (log above)"
    fi
    if ((SECONDS >= ready_deadline)); then
        tail -n 20 "$DEMO_DIR/nats-server.log" >&2 || true
        die "nats-server not healthy within 10 s (log above)"
    fi
    sleep 0.1
done
say "nats-server ready (pid $NATS_PID): $("$NATS_SERVER_BIN" --version)"

# ---------------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------------

# Starts instance $1; its stdout (the transitions) is prefixed with "[$1] " on the console, its
# stderr (the structured logs) is appended to $(log_file $1) (a restart appends). Records the PID of
# nats-roles itself: process substitution keeps $! pointing at it, not at sed, and setsid
# (which execs in place: a background child of this shell is no group leader) keeps the PID
# while taking the instance out of the terminal's process group, so it gets exactly one
# SIGTERM from us instead of the terminal's SIGINT as well. The sed ignores INT/TERM so that
# it keeps forwarding the instance's last lines during shutdown.
start_instance() {
    local name=$1
    setsid "$NATS_ROLES_BIN" run --config "$DEMO_CONFIG" --instance-id "$name" \
        --server "$NATS_URL" --auto-create --http "127.0.0.1:${HTTP_PORT[$name]}" \
        </dev/null > >(trap '' INT TERM; exec sed -u "s/^/[$name] /" 9>&-) \
        2>>"$(log_file "$name")" 9>&- &
    INSTANCE_PID[$name]=$!
    say "started $name (pid ${INSTANCE_PID[$name]}), dashboard http://127.0.0.1:${HTTP_PORT[$name]}/, log $(rel "$(log_file "$name")")"
}

# Reports instances that exited on their own (once each).
report_exits() {
    local name pid status
    for name in "${!INSTANCE_PID[@]}"; do
        pid=${INSTANCE_PID[$name]}
        [[ -z "$pid" ]] && continue
        if ! alive "$pid"; then
            status=0
            wait "$pid" 2>/dev/null || status=$?
            say "$name (pid $pid) exited with status $status"
            if ((status != 0)); then
                # Why is in its log (stderr), not on the console: show the end of it.
                say "last lines of $(rel "$(log_file "$name")"):"
                tail -n 20 "$(log_file "$name")" | sed "s/^/[$name] /"
            fi
            INSTANCE_PID[$name]=""
        fi
    done
}

banner "starting node-a, node-b, node-c"
if [[ -n "${DEMO_DURATION:-}" ]]; then
    DEADLINE=$((SECONDS + DEMO_DURATION))
fi
# node-a gets a head start so that it wins the roles: stopping it then shows a real hand-over.
start_instance node-a
pause_for 2
start_instance node-b
start_instance node-c
say "dashboards: http://127.0.0.1:${HTTP_PORT[node-a]}/  http://127.0.0.1:${HTTP_PORT[node-b]}/  http://127.0.0.1:${HTTP_PORT[node-c]}/"
say "from another terminal: $NATS_ROLES_BIN status -s $NATS_URL   (or watch)"
say "structured logs (not on this console): tail -f $(rel "$DEMO_DIR")/node-{a,b,c}.log"

pause_for 4
report_exits

banner "stopping node-a (SIGTERM) to show hand-over"
if alive "${INSTANCE_PID[node-a]}"; then
    pid=${INSTANCE_PID[node-a]}
    stop_pids "$pid"
    say "node-a (pid $pid) stopped"
    INSTANCE_PID[node-a]=""
else
    say "node-a is not running"
fi

pause_for 5
report_exits

banner "restarting node-a"
start_instance node-a

if [[ -n "$DEADLINE" ]]; then
    banner "running; stopping everything after DEMO_DURATION=${DEMO_DURATION}s (or Ctrl-C)"
else
    banner "running; press Ctrl-C to stop everything"
fi
while :; do
    pause_for 1
    report_exits
done
