package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// envOneArgWarning is what the proxy logs at start, and status says, when
// unrunnable lists scripts whose #! line gives env a name with options.
const envOneArgWarning = "scripts whose #! line gives env more than a program's name without -S (options, a variable, an argument), which Linux passes to env as one argument: env looks for a program named all of it, refuses it as an option, or sets a variable and runs the script itself again; a unit naming one fails on this instance; use env -S, or give the interpreter's path"

// unreadableWarning is what the proxy logs at start when unrunnable lists
// scripts its user may run but not read.
const unreadableWarning = "scripts the proxy's user may run but not read: a unit naming one that has a #! line fails on this instance, its interpreter unable to read it (a compiled program needs no read access); give that user read access"

// notAllowedWarning is what the proxy logs at start when unrunnable lists
// scripts its user may not run.
const notAllowedWarning = "scripts the proxy's user may not run: a unit naming one fails on this instance"

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
//     this host does not have (a path that does not exist); when running,
//     also those whose line is "#!/usr/bin/env NAME" (or "-S NAME ...")
//     where NAME is found nowhere in this process's PATH, which the
//     scripts get (a command may not set another: scriptenv); and those
//     whose line gives env a path that does not exist.
//   - crlfWarning: those whose #! line ends in a carriage return (a file
//     saved with Windows line endings: the interpreter, or its argument,
//     has it, "#!/usr/bin/env python3\r" making env look for "python3\r");
//     listed with the line without it, which the warning names (a review:
//     they were listed as missing their interpreter, and the text log
//     escaped the "\r" they were shown with twice).
//   - envOneArgWarning: on Linux, those whose line gives env more than a
//     program's name without -S (envProgram): "#!/usr/bin/env python3 -u"
//     fails with 127 (a review).
//   - notAllowedWarning: when running, those this process may not run or
//     reach (runner.ErrNotAllowed), each with why and what to do (a
//     review: a proxy installed --user nobody counted a root-only script
//     as runnable, and said nothing until a unit failed).
//   - unreadableWarning: when running, on unix, those this process may run
//     but not read (a #! script's interpreter cannot: it "succeeded" with
//     the interpreter's exit status 2 or 126), listed with their mode and
//     owner; whether one is a script no one here can tell.
//   - noExecWarning: those that are, or whose #! interpreter is, on a file
//     system mounted noexec (a hardened /tmp, /home or /var), from which
//     the system runs nothing ("permission denied") though their modes
//     allow it. Only on Linux.
//
// running is set by the running proxy: what depends on its process (its
// PATH, its user) is looked at only then, `proxy status` being run from a
// shell, by another user.
func unrunnable(dir string, running bool) []scriptTrouble {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var missing, crlf, envOneArg, notAllowed, unread, noexec []string
	for _, e := range entries {
		path, err := runner.ResolveScript(dir, e.Name())
		switch {
		case errors.Is(err, runner.ErrNoExec):
			noexec = append(noexec, fmt.Sprintf("%s (%s)", e.Name(), filepath.Join(dir, e.Name())))
		case errors.Is(err, runner.ErrNotAllowed) && running:
			notAllowed = append(notAllowed, fmt.Sprintf("%s (%s)", e.Name(), notAllowedWhy(err, e.Name())))
		}
		if err != nil {
			continue
		}
		if running {
			if why := unreadable(path); why != "" {
				unread = append(unread, fmt.Sprintf("%s (%s)", e.Name(), why))
				continue
			}
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
			continue
		}
		if runner.OnNoExec(interp) {
			noexec = append(noexec, fmt.Sprintf("%s (#!%s)", e.Name(), interp))
			continue
		}
		switch prog, oneArg := envProgram(line); {
		case oneArg:
			envOneArg = append(envOneArg, fmt.Sprintf("%s (#!%s)", e.Name(), strings.TrimSpace(line)))
		case strings.Contains(prog, "/"):
			if _, err := os.Stat(prog); err != nil && !errors.Is(err, fs.ErrPermission) {
				missing = append(missing, fmt.Sprintf("%s (#!%s: %s does not exist)", e.Name(), strings.TrimSpace(line), prog))
			}
		case prog != "" && running && !inPath(prog):
			missing = append(missing, fmt.Sprintf("%s (#!%s: %s is in no directory of the proxy's PATH)", e.Name(), strings.TrimSpace(line), prog))
		}
	}
	var out []scriptTrouble
	for _, t := range []scriptTrouble{{missingInterpretersWarning, missing}, {crlfWarning, crlf}, {envOneArgWarning, envOneArg}, {notAllowedWarning, notAllowed}, {unreadableWarning, unread}, {noExecWarning, noexec}} {
		if len(t.scripts) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// envProgram reads a #! line (runner.ShebangLine) that runs env: program
// is the program env is to run, when the line names one ("/usr/bin/env
// python3", "/usr/bin/env -S python3 -u", "/usr/bin/env /opt/py/bin/python"):
// a name env looks up in PATH, or a path. oneArg says that, on Linux, the
// line gives env more than a program's name without -S: the system passes
// the rest of the line as one argument, so env looks for a program called
// all of it ("python3 -u"), refuses it as an option ("-i sh"), or sets a
// variable and runs the script itself again, forever ("FOO=1 sh", "FOO=1")
// (a re-review: the last two were not listed).
func envProgram(line string) (program string, oneArg bool) {
	interp := runner.InterpreterIn(line)
	if filepath.Base(interp) != "env" {
		return "", false
	}
	// The system passes the rest of the line, white space around it
	// dropped, as the interpreter's one argument.
	arg := strings.Trim(strings.TrimLeft(line, " \t")[len(interp):], " \t")
	if arg == "" {
		return "", false
	}
	linux := runtime.GOOS == "linux"
	if rest, ok := strings.CutPrefix(arg, "-S"); ok || strings.HasPrefix(arg, "--split-string") {
		if !ok {
			rest = strings.TrimLeft(strings.TrimPrefix(arg, "--split-string"), "=")
		}
		// env splits the rest itself: its first word is the program,
		// unless it is another option or a variable.
		fields := strings.Fields(rest)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "-") || strings.Contains(fields[0], "=") {
			return "", false
		}
		return fields[0], false
	}
	first := strings.Fields(arg)[0]
	switch {
	case strings.HasPrefix(arg, "-"):
		// An option alone ("-i") is env's; with more after it, one
		// argument env refuses.
		return "", linux && strings.ContainsAny(arg, " \t")
	case strings.Contains(first, "="):
		return "", linux
	case strings.ContainsAny(arg, " \t"):
		return "", linux
	}
	return arg, false
}

// inPath reports whether name is an executable file in a directory of this
// process's PATH (exec.LookPath), or PATH is not set (env then searches a
// default of its own: not said missing).
func inPath(name string) bool {
	if _, ok := os.LookupEnv("PATH"); !ok {
		return true
	}
	_, err := exec.LookPath(name)
	return err == nil || errors.Is(err, exec.ErrDot)
}

// notAllowedWhy is the part of ResolveScript's error err of the script
// name that says why and what to do: after `script the proxy's user may
// not run "NAME": `, up to the OS's own words.
func notAllowedWhy(err error, name string) string {
	why := err.Error()
	_, why, _ = strings.Cut(why, strconv.Quote(name)+": ")
	if i := strings.LastIndex(why, ": "); i >= 0 {
		why = why[:i] // "permission denied"
	}
	return why
}
