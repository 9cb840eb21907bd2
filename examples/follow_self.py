#!/usr/bin/env python3
"""Follow the roles one nats-roles instance holds, from any program: a long-poll on its
`GET /api/self` (docs/http-api.md), with nothing but Python's standard library.

    python3 examples/follow_self.py http://127.0.0.1:8080/

Prints one line each time the instance's roles change ("node-a holds scheduler (term 41)").
With NATS_ROLES_LOCAL_TOKEN set (the instance's `http.local_token`) and the instance on
loopback, the whole fencing tokens are given too. FOLLOW_CHANGES=N stops after N changes
(0, the default: forever). Errors (the instance restarting) are retried every second.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def main() -> int:
    base = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("NATS_ROLES_URL", "http://127.0.0.1:8080/")).rstrip("/")
    token = os.environ.get("NATS_ROLES_LOCAL_TOKEN")
    limit = int(os.environ.get("FOLLOW_CHANGES", "0"))
    version = None
    changes = 0
    while True:
        query = {"wait": "30s"}
        if version is not None:
            query["since"] = version
        request = urllib.request.Request(f"{base}/api/self?{urllib.parse.urlencode(query)}")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=45) as response:
                view = json.load(response)
        except (urllib.error.URLError, OSError, ValueError) as error:
            print(f"cannot read {base}/api/self: {error}; retrying in 1 s", file=sys.stderr, flush=True)
            time.sleep(1)
            continue
        if not view.get("changed"):
            continue
        version = view["version"]
        held = ", ".join(f"{r['role']} (term {r['term']})" for r in view["roles"]) or "nothing"
        print(f"{view['instance']} holds {held}", flush=True)
        changes += 1
        if limit and changes >= limit:
            return 0


if __name__ == "__main__":
    sys.exit(main())
