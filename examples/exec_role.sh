#!/bin/sh
# The command of an `exec` role, in shell (docs/exec.md). `nats-roles run` starts it when this
# instance becomes the role's holder, with the term in its environment, and stops it (the
# role's stop_signal, SIGTERM by default, then SIGKILL of its whole process group) before
# another instance can be promoted. Its output reaches the manager's, prefixed with the role.
#
#   roles:
#     - name: report-writer
#       exec:
#         command: [examples/exec_role.sh]
#         env: {EXEC_ROLE_INTERVAL: "2"}
#
# It does its "work" every EXEC_ROLE_INTERVAL seconds (default 1) until it is told to stop,
# and writes the fencing token's term with each piece of work, as a real job would pass it to
# the systems it writes to.
set -eu

role="${NATS_ROLES_ROLE:?run me as an exec role of nats-roles}"
term="${NATS_ROLES_TERM:?}"
instance="${NATS_ROLES_INSTANCE:?}"
interval="${EXEC_ROLE_INTERVAL:-1}"

trap 'echo "stopping: $instance gives up $role (term $term)"; exit 0' TERM INT
echo "leading: $instance holds $role (term $term)"
n=0
while :; do
    n=$((n + 1))
    echo "work $n of $role in term $term"
    # In the background and waited for, so that the trap runs as soon as the signal comes.
    sleep "$interval" &
    wait $!
done
