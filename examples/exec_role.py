#!/usr/bin/env python3
"""The command of an `exec` role, in Python with only the standard library (docs/exec.md).

`nats-roles run` starts it when this instance becomes the role's holder and stops it (the
role's stop_signal, SIGTERM by default, then SIGKILL of its whole process group) before
another instance can be promoted. Its output reaches the manager's, prefixed with the role.

    roles:
      - name: billing-sweeper
        exec:
          command: [python3, examples/exec_role.py]

It works in small steps and checks before each one that the term's deadline it was started
with (NATS_ROLES_DEADLINE_MS, Unix ms) is not close: the manager renews the lease and the
watchdog keeps the child alive past it, but a step that must not outlive the term can be
guarded like this. EXEC_ROLE_INTERVAL sets the step (seconds, default 1).
"""

import os
import signal
import sys
import time


def main() -> int:
    role = os.environ.get("NATS_ROLES_ROLE")
    if not role:
        print("run me as an exec role of nats-roles", file=sys.stderr)
        return 2
    term = os.environ["NATS_ROLES_TERM"]
    instance = os.environ["NATS_ROLES_INSTANCE"]
    token = os.environ["NATS_ROLES_TOKEN"]
    deadline_ms = int(os.environ["NATS_ROLES_DEADLINE_MS"])
    interval = float(os.environ.get("EXEC_ROLE_INTERVAL", "1"))
    stopping = False

    def stop(signum, _frame):
        nonlocal stopping
        stopping = True
        print(f"stopping: {instance} gives up {role} (term {term}, signal {signum})", flush=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    left = deadline_ms - int(time.time() * 1000)
    print(f"leading: {instance} holds {role} (term {term}, token of {len(token)} characters, "
          f"deadline in {left} ms)", flush=True)
    step = 0
    while not stopping:
        step += 1
        print(f"work {step} of {role} in term {term}", flush=True)
        # Short sleeps: a stop signal is noticed within 0.1 s.
        until = time.monotonic() + interval
        while not stopping and time.monotonic() < until:
            time.sleep(min(0.1, interval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
