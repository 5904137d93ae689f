//go:build !linux

package runner

import "os/exec"

// startScript starts cmd. Only Linux has a parent-death signal; on
// Windows the script's job object ends with the proxy.
func startScript(cmd *exec.Cmd) error { return cmd.Start() }
