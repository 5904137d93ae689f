package service

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// PathKind is what a path an installed service needs holds: the error of
// CheckNotTemporary says where that kind of file belongs.
type PathKind int

const (
	Binary  PathKind = iota // the service's program
	Data                    // its data: a data directory, a database
	Scripts                 // the scripts a proxy runs
)

// CheckNotTemporary refuses path, a file or directory of kind an installed
// service needs (its binary, its data or scripts), when it lies in a
// temporary directory: /tmp and /var/tmp are hidden from a systemd service
// by PrivateTmp, /tmp is emptied at reboot, and a Windows TEMP folder is
// cleaned by the system. The service would fail at every start, or after
// the next reboot. what names the path for the operator ("scripts_dir in
// FILE", "the data directory"); the error says where to move it instead.
func CheckNotTemporary(kind PathKind, what, path string) error {
	paths := []string{filepath.Clean(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != paths[0] {
		paths = append(paths, real)
	}
	for _, root := range temporaryDirs() {
		for _, p := range paths {
			if within(p, root) {
				return fmt.Errorf("%s %s is under the temporary directory %s, which a service cannot rely on (%s); move it %s", what, path, root, temporaryWhy(root), temporaryInstead[kind])
			}
		}
	}
	return nil
}

// temporaryDirs are the temporary directories of this host, as given and
// with their links resolved (macOS's /tmp is /private/tmp).
func temporaryDirs() []string {
	dirs := []string{os.TempDir()}
	if runtime.GOOS != "windows" {
		dirs = append(dirs, "/tmp", "/var/tmp")
	}
	var out []string
	seen := map[string]bool{}
	for _, d := range dirs {
		for _, p := range []string{filepath.Clean(d), resolved(d)} {
			if p != "" && p != string(filepath.Separator) && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

func resolved(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}

// within reports whether path is root or lies inside it.
func within(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

func temporaryWhy(root string) string {
	if runtime.GOOS == "windows" {
		return "the system cleans it"
	}
	if root == "/var/tmp" {
		return "systemd's PrivateTmp hides it from the service"
	}
	return "systemd's PrivateTmp hides it from the service, and it is emptied at reboot"
}
