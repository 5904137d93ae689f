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
    """One API call: returns the HTTP status, the headers and the decoded
    JSON answer ({"message": its first line} for an answer that is not
    JSON, such as a reverse proxy's own error page)."""
    req = urllib.request.Request(
        BASE + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, resp.headers, decode(resp.read())
    except urllib.error.HTTPError as err:  # 4xx and 5xx carry a JSON body too
        return err.code, err.headers, decode(err.read())


def decode(raw):
    try:
        return json.loads(raw)
    except ValueError:
        lines = raw.decode(errors="replace").strip().splitlines()
        return {"message": lines[0] if lines else ""}


def retry_after(status, headers):
    """The seconds a 429 asks to wait before trying again (its Retry-After:
    the account's queue is full, which queued nothing, or too many failed
    authentications came from this address), or None when it says none.
    A full disk is no 429 but a 507, without one: no one knows when space
    comes back."""
    value = headers.get("Retry-After") if status == 429 else None
    try:
        return max(int(value), 0) if value is not None else None
    except ValueError:  # an HTTP date: the automator sends seconds
        return None


def execute(script, args, stdin=b"", timeout="300s", tries=5):
    """Runs script on one proxy instance and returns (status, headers, work).

    The idempotency key makes a retry safe: if the connection drops, the
    same request again returns the same unit (and waits for its outcome)
    instead of running the script twice. A 429 with Retry-After is tried
    again after it, a 503 or a connection that failed after 1, 2, 3… s, at
    most `tries` times in all and never for a wait over a minute: the last
    refusal is then the answer, not hidden.
    """
    body = {
        "command": {"script": script, "args": args, "stdin": base64.b64encode(stdin).decode()},
        "timeout": timeout,
        "idempotency_key": str(uuid.uuid4()),
    }
    for attempt in range(tries):
        try:
            status, headers, work = call("POST", "/v1/accounts/%s/execute" % ACCOUNT, body)
            wait = retry_after(status, headers)
            if status == 503:  # the automator is restarting; try again
                wait = 1 + attempt
            if wait is None or wait > 60 or attempt == tries - 1:
                return status, headers, work
            why = "HTTP %d: %s" % (status, work.get("message"))
        except (urllib.error.URLError, ConnectionError) as err:
            if attempt == tries - 1:
                raise
            wait, why = 1 + attempt, err
        print("retrying in %ds after: %s" % (wait, why), file=sys.stderr)
        time.sleep(wait)


def main():
    stdin = b"" if sys.stdin.isatty() else sys.stdin.buffer.read()
    try:
        status, headers, work = execute(sys.argv[1], sys.argv[2:], stdin)
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
    # account, 400 bad request, 429 try again later, 507 the automator's
    # disk full; the body is {"code", "message", "details"}.
    wait = retry_after(status, headers)
    later = "" if wait is None else " (try again in %ds)" % wait
    print("HTTP %d: %s%s" % (status, work.get("message"), later), file=sys.stderr)
    return 255


if __name__ == "__main__":
    sys.exit(main())
