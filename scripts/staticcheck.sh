#!/usr/bin/env bash
# Runs staticcheck at a pinned version, built from source by `go install`.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=v0.8.2
tools="$PWD/.tools"
if [ ! -x "$tools/staticcheck" ] || [ ! -f "$tools/.staticcheck-$VERSION" ]; then
	GOBIN="$tools" go install "honnef.co/go/tools/cmd/staticcheck@$VERSION"
	rm -f "$tools/.staticcheck-"*
	touch "$tools/.staticcheck-$VERSION"
fi
"$tools/staticcheck" ./...
GOOS=windows "$tools/staticcheck" ./...
