package service

import (
	"path/filepath"

	"golang.org/x/sys/windows"
)

// ConfigDir is where `proxy install` puts the service's copy of the config:
// %ProgramData%\<name>.
func ConfigDir(name string) string { return filepath.Join(programData(), name) }

// StateDir is the service's state directory (its status file):
// %ProgramData%\<name>\state.
func StateDir(name string) string { return filepath.Join(ConfigDir(name), "state") }

func programData() string {
	if p, err := windows.KnownFolderPath(windows.FOLDERID_ProgramData, 0); err == nil && p != "" {
		return p
	}
	return `C:\ProgramData`
}

// temporaryInstead says where each kind of a service's files belongs
// instead of a temporary directory.
var temporaryInstead = map[PathKind]string{
	Binary:  `to C:\Program Files`,
	Data:    `under C:\ProgramData`,
	Scripts: `under C:\ProgramData`,
}
