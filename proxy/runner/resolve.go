package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/opsgate/opsgate/internal/scriptname"
	"github.com/opsgate/opsgate/internal/winname"
)

// maxNameLen is the longest script name accepted, the usual file system
// limit for one path component.
const maxNameLen = 255

// ResolveScript validates name and returns the absolute, symlink-resolved
// path of the script inside dir. It refuses names that are not a plain file
// name (ErrBadScriptName), names that resolve outside the real dir
// (ErrOutsideScripts), and names that are not a runnable regular file in dir
// (ErrUnknownScript). Errors name the script, quoted.
func ResolveScript(dir, name string) (string, error) {
	if reason := badNameReason(name); reason != "" {
		return "", fmt.Errorf("%w %q: %s; a script is a plain file name inside the scripts directory",
			ErrBadScriptName, name, reason)
	}
	realDir, err := realScriptsDir(dir)
	if errors.Is(err, fs.ErrPermission) {
		return "", fmt.Errorf("%w %q: %s may not enter the scripts directory %q or a directory above it: give it search (x) access: %w", ErrNotAllowed, name, proxyUser(), dir, err)
	}
	if err != nil {
		return "", fmt.Errorf("%w %q: %w", ErrUnknownScript, name, err)
	}
	// realDir holds no link and name no separator, so realDir/name is the
	// script unless it is itself a link: only then is it resolved (and
	// checked to stay inside) again.
	real := filepath.Join(realDir, name)
	fi, err := os.Lstat(real)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, err = filepath.EvalSymlinks(real)
		if err == nil && !within(realDir, real) {
			return "", fmt.Errorf("%w: %q resolves to %q, not inside %q", ErrOutsideScripts, name, real, realDir)
		}
		if err == nil {
			fi, err = os.Stat(real)
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && fi != nil && fi.Mode()&fs.ModeSymlink != 0:
		to, _ := os.Readlink(filepath.Join(realDir, name))
		next := to
		if !filepath.IsAbs(next) {
			next = filepath.Join(realDir, to)
		}
		what := "which does not exist"
		if fi, err := os.Lstat(next); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			what = "a symbolic link that leads to no file" // a chain: name the first link's target as ls shows it
		}
		return "", fmt.Errorf("%w %q: it is a symbolic link in scripts directory %q to %q, %s", ErrUnknownScript, name, dir, to, what)
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w %q: no such file in scripts directory %q", ErrUnknownScript, name, dir)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("%w %q: %s may not look it up in the scripts directory %q (or where its link leads): give it read and search (x) access: %w", ErrNotAllowed, name, proxyUser(), dir, err)
	case errors.Is(err, syscall.ELOOP) || (err != nil && strings.Contains(err.Error(), "too many links")): // EvalSymlinks's own count
		return "", fmt.Errorf("%w %q: it is a symbolic link that leads to itself, through other links: %w", ErrUnknownScript, name, err)
	case err != nil:
		return "", fmt.Errorf("%w %q: %w", ErrUnknownScript, name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w %q: not a regular file", ErrUnknownScript, name)
	}
	if err := checkRunnable(name, real); err != nil {
		return "", err
	}
	return real, nil
}

// badNameReason says why name is not a plain file name, or "" when it is:
// scriptname.Problem, then the length and this OS's own rules.
func badNameReason(name string) string {
	if p := scriptname.Problem(name); p != "" {
		return p
	}
	switch {
	case len(name) > maxNameLen:
		return fmt.Sprintf("longer than %d bytes", maxNameLen)
	case windowsNames && strings.ContainsAny(name, `<>"|?*`):
		return `contains a character windows does not allow in a file name (< > " | ? *)`
	case windowsNames && (strings.HasSuffix(name, ".") || strings.HasSuffix(name, " ")):
		// Windows drops them: "x.ps1." opens x.ps1.
		return "ends in '.' or ' ', which windows drops, so it names another file"
	case windowsNames && winname.IsDevice(name):
		// CreateFile opens the device, not a file (CON would wait for
		// console input until the deadline).
		return "is a windows device name (CON, PRN, AUX, NUL, COM0-9, LPT0-9, CONIN$, CONOUT$), with or without an extension"
	}
	return ""
}

// windowsNames: the names windows gives a meaning of its own (devices,
// trailing dots) are refused on windows, where they would not name the file
// in the scripts directory. A variable so tests can set it on any OS.
var windowsNames = runtime.GOOS == "windows"

// realScriptsDir returns the absolute, symlink-resolved scripts directory.
func realScriptsDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("no scripts directory configured")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("scripts directory %q: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("scripts directory %q: %w", dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("scripts directory %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("scripts directory %q is not a directory", dir)
	}
	return real, nil
}

// within reports whether path is root or lies below it. Both are clean,
// absolute and symlink-free.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil || filepath.IsAbs(rel) {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// proxyUser names the proxy's user for a message: "the proxy's user
// (NAME)".
func proxyUser() string {
	if u, err := user.Current(); err == nil {
		return fmt.Sprintf("the proxy's user (%s)", u.Username)
	}
	return "the proxy's user"
}
