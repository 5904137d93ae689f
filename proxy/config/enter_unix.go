//go:build !windows

package config

import "golang.org/x/sys/unix"

// mayEnter reports why this process may not enter (search) dir, the scripts
// directory: no script in it could be found. Nil when it may.
func mayEnter(dir string) error {
	return unix.Access(dir, unix.X_OK)
}
