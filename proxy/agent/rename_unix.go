//go:build !windows

package agent

import "os"

// renameDurable renames a spool record into place; syncDir then makes the
// rename durable.
func renameDurable(from, to string) error { return os.Rename(from, to) }
