#!/bin/sh
# The automator's HTTP/JSON API with curl (docs/api.md).
#   AUTOMATOR_HTTP     the automator's HTTP listener (default http://127.0.0.1:8080)
#   AUTOMATOR_API_KEY  an API key, e.g. $(cat /var/lib/automator/admin.apikey)
#   ACCOUNT            the account whose proxies run the commands (default acme)
set -eu
AUTOMATOR_HTTP=${AUTOMATOR_HTTP:-http://127.0.0.1:8080}
ACCOUNT=${ACCOUNT:-acme}
auth="Authorization: Bearer $AUTOMATOR_API_KEY"
json="Content-Type: application/json"

# 1. Execute: blocks until the unit ends. The HTTP status tells the outcome
#    (200 ran, 502 the proxy could not run it, 504 timed out, 409 cancelled);
#    stdout and stderr are base64 in result.stdout and result.stderr.
curl -sS -w '\nHTTP %{http_code}\n' -H "$auth" -H "$json" \
	-d '{"command": {"script": "hello.sh", "args": ["world"]}, "timeout": "60s"}' \
	"$AUTOMATOR_HTTP/v1/accounts/$ACCOUNT/execute"

# 2. Submit with stdin (base64) and an idempotency key: it returns at once,
#    and repeating it with the same key returns the same unit. So curl may
#    repeat it: --retry tries again after a 429 (the account's queue full:
#    nothing was queued) once its Retry-After has passed, or after a 503 or
#    another passing failure, four times at most. Not the execute above,
#    whose 502 and 504 are the unit's outcomes.
stdin=$(printf 'some data\n' | base64 | tr -d '\n')
work=$(curl -sS --retry 4 --retry-max-time 60 -H "$auth" -H "$json" \
	-d '{"command": {"script": "checksum.sh", "stdin": "'"$stdin"'"}, "idempotency_key": "checksum-'"$$"'"}' \
	"$AUTOMATOR_HTTP/v1/accounts/$ACCOUNT/submit")
id=$(printf '%s' "$work" | sed -n 's/.*"work_id": *"\([^"]*\)".*/\1/p')

# 3. Wait for it by id (as after a dropped connection), then read it again.
curl -sS -w '\nHTTP %{http_code}\n' -H "$auth" -X POST "$AUTOMATOR_HTTP/v1/work/$id:wait"
curl -sS -w '\nHTTP %{http_code}\n' -H "$auth" "$AUTOMATOR_HTTP/v1/work/$id"
