package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opsgate/opsgate/proxy/runner"
)

// maxScriptsDigested bounds what scriptsDigest reads: status stays quick
// on a scripts directory that holds large files.
const maxScriptsDigested = 64 << 20

var errScriptsTooLarge = errors.New("more than 64 MiB of scripts: not digested")

// scriptsDigest returns how many scripts a unit may name in dir (each
// entry the runner would run: runner.ResolveScript) and a digest of their
// names and contents, so that `status` on a standby and on the active
// instance show whether they run the same scripts. Any script added,
// removed, renamed or changed changes the digest; the files' times and
// modes (beyond being runnable) do not.
func scriptsDigest(dir string) (n int, digest string, err error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	var total int64
	for _, e := range entries {
		path, err := runner.ResolveScript(dir, e.Name())
		if err != nil {
			continue // not runnable: a unit naming it fails wherever it is
		}
		f, err := os.Open(path)
		if err != nil {
			return 0, "", err
		}
		fi, err := f.Stat()
		if err == nil && total+fi.Size() > maxScriptsDigested {
			err = errScriptsTooLarge
		}
		if err == nil {
			total += fi.Size()
			// Name and length first, so no two sets of files hash alike.
			fmt.Fprintf(h, "%s\x00%s\x00", strconv.Quote(e.Name()), strconv.FormatInt(fi.Size(), 10))
			_, err = io.CopyN(h, f, fi.Size())
		}
		f.Close()
		if err != nil {
			return 0, "", err
		}
		n++
	}
	return n, hex.EncodeToString(h.Sum(nil))[:16], nil
}

// missingInterpretersWarning is what the proxy logs at start, and status
// says, when unrunnable lists scripts as missing their interpreter.
const missingInterpretersWarning = "scripts whose #! interpreter this host does not have: a unit naming one fails on this instance; install the interpreter, or fix the #! line"

// crlfWarning is what the proxy logs at start, and status says, when
// unrunnable lists scripts saved with Windows line endings.
const crlfWarning = "scripts saved with Windows line endings (CRLF), whose #! line ends in a carriage return the system takes as part of the interpreter's name, or of its last argument: a unit naming one fails on this instance; convert them to LF (dos2unix)"

// noExecWarning is what the proxy logs at start, and status says, when
// unrunnable lists scripts on a noexec file system.
const noExecWarning = "scripts the system will not run, on a file system mounted noexec (the script's own, or its #! interpreter's): a unit naming one fails on this instance; mount it without noexec, or move them"

// maxListed bounds the scripts a warning names: the rest are counted (a
// line of 5,000 is cut by journald and syslog alike).
const maxListed = 20

// listed joins items for a warning, at most maxListed of them, then how
// many more there are.
func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:maxListed], "; "), len(items)-maxListed)
}

// scriptTrouble is a kind of script a unit naming fails on this
// instance, and those of scripts_dir that are of it.
type scriptTrouble struct {
	warning string // what to log and show, and what to do
	scripts []string
}

// unrunnable walks the runnable scripts of dir once, and lists, each as
// "NAME (#!INTERPRETER)" or "NAME (PATH)", those a unit naming would fail
// on this instance, while a standby that would fail them all looks as
// healthy as the active one otherwise (a review); by kind, in this order,
// the kinds with none left out:
//
//   - missingInterpretersWarning: those whose #! line names an interpreter
//     this host does not have (a path that does not exist). A name PATH
//     resolves ("#!/usr/bin/env python3") is not looked up: the service's
//     PATH may not be this shell's.
//   - crlfWarning: those whose #! line ends in a carriage return (a file
//     saved with Windows line endings: the interpreter, or its argument,
//     has it, "#!/usr/bin/env python3\r" making env look for "python3\r");
//     listed with the line without it, which the warning names (a review:
//     they were listed as missing their interpreter, and the text log
//     escaped the "\r" they were shown with twice).
//   - noExecWarning: those that are, or whose #! interpreter is, on a file
//     system mounted noexec (a hardened /tmp, /home or /var), from which
//     the system runs nothing ("permission denied") though their modes
//     allow it. Only on Linux.
func unrunnable(dir string) []scriptTrouble {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var missing, crlf, noexec []string
	for _, e := range entries {
		path, err := runner.ResolveScript(dir, e.Name())
		if errors.Is(err, runner.ErrNoExec) {
			noexec = append(noexec, fmt.Sprintf("%s (%s)", e.Name(), filepath.Join(dir, e.Name())))
		}
		if err != nil {
			continue
		}
		line := runner.ShebangLine(path)
		interp := runner.InterpreterIn(line)
		if interp == "" {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\r"); ok {
			crlf = append(crlf, fmt.Sprintf("%s (#!%s)", e.Name(), l))
			continue
		}
		if !filepath.IsAbs(interp) {
			continue
		}
		// Any failure to find it but a permission's (a path through a
		// file, #!/bin/sh/x, is ENOTDIR: a re-review).
		if _, err := os.Stat(interp); strings.ContainsRune(interp, '\r') || (err != nil && !errors.Is(err, fs.ErrPermission)) {
			missing = append(missing, fmt.Sprintf("%s (#!%s)", e.Name(), strings.ReplaceAll(interp, "\r", `\r`)))
		} else if runner.OnNoExec(interp) {
			noexec = append(noexec, fmt.Sprintf("%s (#!%s)", e.Name(), interp))
		}
	}
	var out []scriptTrouble
	for _, t := range []scriptTrouble{{missingInterpretersWarning, missing}, {crlfWarning, crlf}, {noExecWarning, noexec}} {
		if len(t.scripts) > 0 {
			out = append(out, t)
		}
	}
	return out
}
