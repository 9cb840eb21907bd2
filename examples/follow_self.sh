#!/bin/sh
# Follow the roles one nats-roles instance holds, from a shell: a long-poll on its
# `GET /api/self` (docs/http-api.md) with curl, no SSE needed.
#
#     examples/follow_self.sh http://127.0.0.1:8080/
#
# Prints one line each time the instance's roles change ("node-a holds: scheduler shard-7").
# With NATS_ROLES_LOCAL_TOKEN set (the instance's `http.local_token`) and the instance on
# loopback, the answer carries the whole fencing tokens too. FOLLOW_CHANGES=N stops after N
# changes (0, the default: forever). Errors (the instance restarting) are retried every second.
set -u

base="${1:-${NATS_ROLES_URL:-http://127.0.0.1:8080/}}"
base="${base%/}"
limit="${FOLLOW_CHANGES:-0}"
version=""
changes=0
while :; do
    query="wait=30s"
    if [ -n "$version" ]; then query="$query&since=$version"; fi
    if [ -n "${NATS_ROLES_LOCAL_TOKEN:-}" ]; then
        body=$(curl -fsS --max-time 45 -H "Authorization: Bearer $NATS_ROLES_LOCAL_TOKEN" "$base/api/self?$query")
    else
        body=$(curl -fsS --max-time 45 "$base/api/self?$query")
    fi
    if [ $? -ne 0 ]; then
        echo "cannot read $base/api/self; retrying in 1 s" >&2
        sleep 1
        continue
    fi
    # The answer is one JSON object; these fields are plain strings (no escapes in ids,
    # role names or versions), so sed can pick them out.
    case "$body" in *'"changed":true'*) ;; *) continue ;; esac
    version=$(printf '%s' "$body" | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')
    instance=$(printf '%s' "$body" | sed -n 's/.*"instance":"\([^"]*\)".*/\1/p')
    roles=$(printf '%s' "$body" | grep -o '"role":"[^"]*"' | sed 's/"role":"\(.*\)"/\1/' | tr '\n' ' ')
    echo "$instance holds: ${roles:-nothing}"
    changes=$((changes + 1))
    if [ "$limit" -gt 0 ] && [ "$changes" -ge "$limit" ]; then exit 0; fi
done
