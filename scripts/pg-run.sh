#!/usr/bin/env bash
# Runs a command with a PostgreSQL server for the tests:
#   scripts/pg-run.sh go test ./...
# With AUTOMATOR_TEST_POSTGRES set, it uses that server; otherwise it starts
# a throwaway cluster (pg-start.sh) and removes it when the command ends.
# Either way it sets AUTOMATOR_REQUIRE_POSTGRES=1, so a PostgreSQL test that
# cannot reach its server fails instead of skipping.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export AUTOMATOR_REQUIRE_POSTGRES=1
if [[ -n "${AUTOMATOR_TEST_POSTGRES:-}" ]]; then
	exec "$@"
fi
started=$("$here/pg-start.sh") || {
	echo "pg-run: no PostgreSQL for the tests (see above); set AUTOMATOR_TEST_POSTGRES to a server's URL or install PostgreSQL" >&2
	exit 1
}
eval "$started"
trap '"$here/pg-stop.sh" "$AUTOMATOR_TEST_PGDIR"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$@"
