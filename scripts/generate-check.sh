#!/usr/bin/env bash
# Fails when the committed generated code differs from what `make generate`
# produces now.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/generate.sh "$tmp" >/dev/null
if ! diff -r -x '*.proto' "$tmp" proto >/dev/null; then
	diff -r -x '*.proto' "$tmp" proto | head -40
	echo "generated code is stale: run 'make generate' and commit the result" >&2
	exit 1
fi
echo "generated code is up to date"
