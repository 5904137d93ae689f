#!/bin/sh
# Example proxy script: sleeps for $1 seconds (default 1), then reports.
sleep "${1:-1}"
echo "slept ${1:-1}s on instance ${PROXY_INSTANCE_ID}"
