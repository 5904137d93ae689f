#!/usr/bin/env bash
# make fuzz: runs every Fuzz target of the module for FUZZTIME each (30s by
# default). New crashers land in the package's testdata/fuzz/ and fail the
# run; fix the code and commit the crasher as a regression seed.
#
# FUZZMINIMIZETIME (5s by default) bounds the minimizing of each input that
# finds new coverage. Go's default of 60s let a single input of FuzzDecode
# (automator/config, YAML) hold both fuzzing workers for a whole minute with
# no execution counted, so a 30s run fuzzed for 3s.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-30s}
minimizetime=${FUZZMINIMIZETIME:-5s}
found=0
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found=$((found + 1))
		echo "== $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimizetime" "$pkg"
	done
done
echo "fuzzed $found targets for $fuzztime each"
