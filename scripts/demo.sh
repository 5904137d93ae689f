#!/usr/bin/env bash
# make demo: the system end to end on the embedded SQLite store, on loopback.
# An automator and two proxy instances of one account; a handful of exec
# calls showing which instance ran each; a timeout; one instance killed with
# SIGKILL while the other carries on. Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$PWD/bin"
scripts="$PWD/deploy/scripts"
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
waitfor() { # what, condition...
	local what=$1; shift
	for _ in $(seq 1 200); do "$@" && return 0; sleep 0.05; done
	echo "demo: timed out waiting for $what" >&2; exit 1
}

say "automator init and serve (TLS, SQLite in $dir/data)"
"$bin/automator" init --data-dir "$dir/data" --public-url https://127.0.0.1:8443 >/dev/null
"$bin/automator" serve --data-dir "$dir/data" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 2>"$dir/automator.log" &
pids+=($!)
waitfor "the automator" test -s "$dir/data/serving.yaml"
grpc=$(sed -n 's/^grpc: *//p' "$dir/data/serving.yaml")
http=$(sed -n 's/^http: *//p' "$dir/data/serving.yaml")
echo "serving gRPC on $grpc, HTTP on $http"

say "account create acme (prints the proxy profile)"
"$bin/automator" account create acme --data-dir "$dir/data" >"$dir/proxy.yaml"
# The demo's automator listens on a free port rather than the public URL's.
sed -i "s#^automator_url: .*#automator_url: https://$grpc#" "$dir/proxy.yaml"
sed -n '1,4p' "$dir/proxy.yaml" | sed 's/\(token: opt_....\).*/\1…/; s/\(key: 1:....\).*/\1…/'

say "two proxy instances of acme: a and b (active/active)"
for id in a b; do
	"$bin/proxy" run --config "$dir/proxy.yaml" --scripts-dir "$scripts" --instance-id "$id" 2>"$dir/proxy-$id.log" &
	pids+=($!)
done
proxy_a=${pids[1]}
waitfor "instance a" grep -q "connected" "$dir/proxy-a.log"
waitfor "instance b" grep -q "connected" "$dir/proxy-b.log"

ex() { "$bin/automator" exec --data-dir "$dir/data" --account acme "$@"; }
# runex shows an exec as a user would type it (without the demo's --data-dir).
runex() { printf '$ automator exec --account acme %s\n' "$*"; ex "$@"; }

say "executeOnProxy: each unit is claimed by exactly one instance"
for n in 1 2 3 4 5 6; do
	runex hello.sh "caller-$n" &
done
wait_jobs() { for j in $(jobs -p); do case " ${pids[*]} " in *" $j "*) ;; *) wait "$j" || true;; esac; done; }
wait_jobs

say "stdin in, checksum out"
printf '$ echo "some data" | automator exec --account acme --stdin - checksum.sh\n'
echo "some data" | ex --stdin - checksum.sh

say "any exit code is a result: the caller exits with it"
set +e
runex exit-code.sh 3
echo "exit code: $?"

say "a script that is not deployed fails (exit 125); a name outside the scripts directory is refused before anything is queued (exit 255)"
runex not-deployed.sh
echo "exit code: $?"
runex ../../bin/sh
echo "exit code: $?"

say "a unit that outlives its deadline: the proxy kills it, the caller gets a timeout (exit 124)"
runex --timeout 2s sleep.sh 30
echo "exit code: $?"
set -e

say "SIGKILL instance a; b carries on"
{ kill -9 "$proxy_a"; wait "$proxy_a"; } 2>/dev/null || true
echo "killed instance a (pid $proxy_a)"
for n in 1 2 3; do
	runex hello.sh "after-kill-$n"
done

say "done: everything above ran on loopback and is cleaned up now"
