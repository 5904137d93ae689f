//go:build !linux

// Command bench is `make bench` (see main.go): it reads /proc and raises
// rlimits, so it runs on Linux only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench: runs on Linux only")
	os.Exit(2)
}
