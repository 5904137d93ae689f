#!/usr/bin/env bash
# Stops a cluster that pg-start.sh started and removes its directory:
#   scripts/pg-stop.sh "$AUTOMATOR_TEST_PGDIR"
set -euo pipefail
dir=${1:?usage: scripts/pg-stop.sh DIR (the AUTOMATOR_TEST_PGDIR that pg-start.sh printed)}
if [[ ! -e "$dir/.opsgate-pg" ]]; then
	echo "pg-stop: $dir was not made by pg-start.sh; not touching it" >&2
	exit 1
fi
pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
	# SIGQUIT is PostgreSQL's immediate shutdown: the cluster is thrown away.
	kill -QUIT "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -KILL "$pid" 2>/dev/null || true
fi
rm -rf "$dir"
