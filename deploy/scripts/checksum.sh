#!/bin/sh
# Example proxy script: prints the SHA-256 of its stdin.
sha256sum | cut -d' ' -f1
