#!/usr/bin/env bash
# Fails when the committed generated code differs from what `make generate`
# produces now. Only generated files are compared: proto/ also holds sources
# (*.proto, the OpenAPI settings, vendored imports, hand-written Go).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/generate.sh "$tmp" >/dev/null
stale=0
# Every file generation makes must be committed, byte for byte...
while IFS= read -r f; do
	if ! cmp -s "$tmp/$f" "proto/$f"; then
		diff -u "proto/$f" "$tmp/$f" 2>&1 | head -40 || true
		stale=1
	fi
done < <(cd "$tmp" && find . -type f | sort)
# ...and no generated file may be left over from a removed proto.
while IFS= read -r f; do
	if [ ! -f "$tmp/$f" ]; then
		echo "proto/$f is not generated any more"
		stale=1
	fi
done < <(cd proto && find . -type f \( -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json' \) | sort)
if [ "$stale" = 1 ]; then
	echo "generated code is stale: run 'make generate' and commit the result" >&2
	exit 1
fi
echo "generated code is up to date"
