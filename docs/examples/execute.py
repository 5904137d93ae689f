#!/usr/bin/env python3
"""executeOnProxy from Python, standard library only (docs/api.md).

    AUTOMATOR_API_KEY=$(cat admin.apikey) python3 execute.py hello.sh world

Runs the script on a proxy of $ACCOUNT (default acme) through the HTTP/JSON
API at $AUTOMATOR_HTTP (default http://127.0.0.1:8080), sends this process's
stdin when it is not a terminal, writes the remote stdout and stderr to its
own and exits like `automator exec`: the remote exit code, or 124 timed out,
125 the proxy could not run it, 126 cancelled, 255 the call failed.
"""
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

BASE = os.environ.get("AUTOMATOR_HTTP", "http://127.0.0.1:8080")
API_KEY = os.environ["AUTOMATOR_API_KEY"]
ACCOUNT = os.environ.get("ACCOUNT", "acme")


def call(method, path, body=None):
    """One API call: returns the HTTP status and the decoded JSON answer
    ({"message": its first line} for an answer that is not JSON, such as a
    reverse proxy's own error page)."""
    req = urllib.request.Request(
        BASE + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, decode(resp.read())
    except urllib.error.HTTPError as err:  # 4xx and 5xx carry a JSON body too
        return err.code, decode(err.read())


def decode(raw):
    try:
        return json.loads(raw)
    except ValueError:
        lines = raw.decode(errors="replace").strip().splitlines()
        return {"message": lines[0] if lines else ""}


def execute(script, args, stdin=b"", timeout="300s"):
    """Runs script on one proxy instance and returns (status, work).

    The idempotency key makes a retry safe: if the connection drops, the
    same request again returns the same unit (and waits for its outcome)
    instead of running the script twice.
    """
    body = {
        "command": {"script": script, "args": args, "stdin": base64.b64encode(stdin).decode()},
        "timeout": timeout,
        "idempotency_key": str(uuid.uuid4()),
    }
    for attempt in range(5):
        try:
            status, work = call("POST", "/v1/accounts/%s/execute" % ACCOUNT, body)
            if status != 503:  # 503: the automator is restarting; try again
                return status, work
        except (urllib.error.URLError, ConnectionError) as err:
            if attempt == 4:
                raise
            print("retrying after: %s" % err, file=sys.stderr)
        time.sleep(1 + attempt)
    return status, work


def main():
    stdin = b"" if sys.stdin.isatty() else sys.stdin.buffer.read()
    try:
        status, work = execute(sys.argv[1], sys.argv[2:], stdin)
    except (urllib.error.URLError, ConnectionError) as err:
        print("cannot reach the automator at %s: %s" % (BASE, getattr(err, "reason", err)), file=sys.stderr)
        return 255
    # Only the automator's answers carry a unit ("work_id"): a reverse
    # proxy's own 502 or 504 page is the call failing, not an outcome.
    if status == 200 and "work_id" in work:  # the script ran: any exit code is a result
        result = work["result"]
        sys.stdout.buffer.write(base64.b64decode(result["stdout"]))
        sys.stderr.buffer.write(base64.b64decode(result["stderr"]))
        return result["exit_code"]
    outcome = {504: ("timed out", 124), 502: ("failed", 125), 409: ("cancelled", 126)}
    if status in outcome and "work_id" in work:
        what, code = outcome[status]
        print("work %s %s: %s" % (work["work_id"], what, work["reason"]), file=sys.stderr)
        return code
    # Any other answer is the call itself: 401 bad API key, 404 unknown
    # account, 400 bad request; the body is {"code", "message", "details"}.
    print("HTTP %d: %s" % (status, work.get("message")), file=sys.stderr)
    return 255


if __name__ == "__main__":
    sys.exit(main())
