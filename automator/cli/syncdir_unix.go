//go:build !windows

package cli

import "os"

// syncDir flushes a directory's entries (a file just named in it) to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
