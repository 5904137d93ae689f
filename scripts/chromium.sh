#!/usr/bin/env bash
# Prints the path of Chromium for the browser test (test/browser),
# installing Debian's chromium package first when it is missing and this
# runs as root with apt-get (as CI does on a fresh machine). Exits 1 with
# the reason on stderr when neither is possible.
set -euo pipefail
find_chromium() {
	local c
	for c in chromium chromium-browser; do
		if command -v "$c"; then
			return 0
		fi
	done
	return 1
}
if find_chromium; then
	exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
	echo "chromium.sh: Chromium is not installed, and installing Debian's chromium package needs root and apt-get" >&2
	exit 1
fi
echo "chromium.sh: installing Debian's chromium package (apt-get install chromium fonts-dejavu-core)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# A font too: the screenshots need one to show text.
apt-get install -y -qq chromium fonts-dejavu-core >&2
find_chromium || {
	echo "chromium.sh: the chromium package is installed but no chromium is on PATH" >&2
	exit 1
}
