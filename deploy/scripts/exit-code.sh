#!/bin/sh
# Example proxy script: exits with the code given as $1; any exit code is a
# result, not an error.
echo "exiting with ${1:-0}" >&2
exit "${1:-0}"
