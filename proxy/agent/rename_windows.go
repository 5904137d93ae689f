//go:build windows

package agent

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/windows"
)

// renameDurable renames a spool record into place, as os.Rename does
// (MoveFileEx, replacing the target), and with MOVEFILE_WRITE_THROUGH
// returns only once the move is on disk: a directory cannot be synced on
// Windows, so syncDir makes nothing durable there.
func renameDurable(from, to string) error {
	f, err := windows.UTF16PtrFromString(extendedPath(from))
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	t, err := windows.UTF16PtrFromString(extendedPath(to))
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	if err := windows.MoveFileEx(f, t, windows.MOVEFILE_REPLACE_EXISTING|windows.MOVEFILE_WRITE_THROUGH); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// extendedPath gives a drive path that MAX_PATH may not hold the \\?\ form,
// as os.Rename does for the paths it hands to MoveFileEx (fixLongPath).
func extendedPath(p string) string {
	if len(p) < 248 || strings.HasPrefix(p, `\\`) {
		return p
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return `\\?\` + abs
}
