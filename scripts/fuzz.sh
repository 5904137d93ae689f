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
# fuzz PKG TARGET runs one target. Go 1.26's fuzzing coordinator may fail a
# run that found nothing with a bare "context deadline exceeded" when its
# workers are slow to stop at the end of -fuzztime (a loaded machine): such
# a run, which wrote no input under testdata/fuzz/TARGET, is run once more.
fuzz() {
	local pkg=$1 target=$2 corpus out status
	corpus="$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target"
	for try in 1 2; do
		local before=0
		[ -d "$corpus" ] && before=$(ls "$corpus" | wc -l)
		out=$(mktemp)
		status=0
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimizetime" "$pkg" 2>&1 | tee "$out" || status=$?
		local after=0
		[ -d "$corpus" ] && after=$(ls "$corpus" | wc -l)
		if [ "$status" -ne 0 ] && [ "$try" = 1 ] && [ "$after" = "$before" ] &&
			[ "$(grep -cv -e '^fuzz: ' -e '^--- FAIL: ' -e '^    context deadline exceeded$' -e '^FAIL' -e '^exit status 1$' "$out")" = 0 ]; then
			echo "== $pkg $target: Go's fuzzing coordinator missed the end of -fuzztime (no input found); once more"
			rm -f "$out"
			continue
		fi
		rm -f "$out"
		return "$status"
	done
}
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found=$((found + 1))
		echo "== $pkg $target ($fuzztime)"
		fuzz "$pkg" "$target"
	done
done
echo "fuzzed $found targets for $fuzztime each"
