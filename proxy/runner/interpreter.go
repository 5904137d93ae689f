package runner

import (
	"fmt"
	"strings"
)

// The windows command lines, kept portable so they are tested on every OS.

var (
	powerShellPrefix = []string{"powershell.exe", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-File"}
	// /d skips AutoRun commands from the registry, /v:off turns off delayed
	// (!var!) expansion, /s makes cmd.exe strip exactly the outer quotes of
	// what follows /c.
	batchPrefix = []string{"cmd.exe", "/d", "/v:off", "/s", "/c"}
)

// interpreterFor returns the argument vector that precedes the script path
// when the windows script at path runs: the interpreter for .ps1, .cmd and
// .bat, nothing for .exe. Any other extension is ErrUnknownScript.
func interpreterFor(path string) ([]string, error) {
	switch strings.ToLower(extension(path)) {
	case ".ps1":
		return powerShellPrefix, nil
	case ".cmd", ".bat":
		return batchPrefix, nil
	case ".exe":
		return nil, nil
	}
	return nil, fmt.Errorf("%w %q: on windows a script ends in .ps1, .cmd, .bat or .exe", ErrUnknownScript, baseName(path))
}

// systemInterpreter is the full path of the interpreter named in the
// system directory sysDir (GetSystemDirectory: C:\Windows\System32), or
// name itself when it is not one of ours. The service runs as LocalSystem:
// found through PATH instead, a cmd.exe or powershell.exe put in a folder
// listed before System32 that some user may write to would run as
// LocalSystem.
func systemInterpreter(sysDir, name string) string {
	sysDir = strings.TrimRight(sysDir, `\`)
	switch strings.ToLower(name) {
	case "cmd.exe":
		return sysDir + `\cmd.exe`
	case "powershell.exe":
		return sysDir + `\WindowsPowerShell\v1.0\powershell.exe`
	}
	return name
}

// windowsCommand returns the argument vector that runs the script at path
// with args on windows and, for a batch file, the exact command line to hand
// to CreateProcess (SysProcAttr.CmdLine) instead of the usual quoting, which
// cmd.exe does not understand.
func windowsCommand(path string, args []string) (argv []string, cmdLine string, err error) {
	prefix, err := interpreterFor(path)
	if err != nil {
		return nil, "", err
	}
	if strings.ToLower(extension(path)) == ".ps1" && strings.ContainsAny(path, "[]") {
		// Windows PowerShell takes the path after -File for a wildcard
		// pattern (PowerShell/PowerShell#4726): x[1].ps1 would run x1.ps1,
		// or fail, and no escape works the same in every version.
		return nil, "", fmt.Errorf("%w %q: its path %q holds '[' or ']', which powershell.exe -File reads as a wildcard pattern: rename it",
			ErrStart, baseName(path), path)
	}
	argv = append(append(append([]string(nil), prefix...), path), args...)
	if !isBatch(path) {
		return argv, "", nil
	}
	cmdLine, err = batchCommandLine(path, args)
	if err != nil {
		return nil, "", err
	}
	return argv, cmdLine, nil
}

func isBatch(path string) bool {
	ext := strings.ToLower(extension(path))
	return ext == ".cmd" || ext == ".bat"
}

// batchCommandLine builds `cmd.exe /d /v:off /s /c ""path" arg ..."`.
//
// cmd.exe parses the line after /c as a shell would: & | < > ^ ( ) split or
// redirect, %name% expands, and Go's usual \" quoting means nothing to it (the
// "BatBadBut" problem). Inside double quotes the operators are literal, so
// an argument is quoted unless it is made only of characters known to mean
// nothing to cmd.exe (batchPlain): a list of the dangerous ones would miss
// some (vertical tab and form feed split arguments as a space does). Nothing
// makes ", % or a line break safe, so arguments holding them are refused. The
// batch file reads its arguments in quotes, as "%~1": %1 and %~1 expand
// before cmd.exe looks for & and |, so an unquoted %~1 (which drops the
// quotes added here) hands them back to cmd.exe to run.
func batchCommandLine(path string, args []string) (string, error) {
	if strings.ContainsAny(path, "\"%\r\n\x00") {
		return "", fmt.Errorf("%w %q: its path %q cannot be passed safely to cmd.exe", ErrStart, baseName(path), path)
	}
	var b strings.Builder
	b.WriteString(strings.Join(batchPrefix, " "))
	b.WriteString(` ""`)
	b.WriteString(path)
	b.WriteString(`"`)
	for i, a := range args {
		if strings.ContainsAny(a, "\"%\r\n\x00") {
			// Named by position: the reason is logged, and an argument
			// may be a secret.
			return "", fmt.Errorf("%w %q: argument %d cannot be passed safely to a batch file: it holds '\"', '%%' or a line break",
				ErrStart, baseName(path), i+1)
		}
		b.WriteByte(' ')
		if !batchPlain(a) {
			b.WriteString(`"` + a + `"`)
		} else {
			b.WriteString(a)
		}
	}
	b.WriteString(`"`)
	return b.String(), nil
}

// batchPlain reports whether a can be passed to cmd.exe unquoted: it is not
// empty and holds only ASCII letters, digits and characters that are neither
// operators nor argument delimiters for cmd.exe.
func batchPlain(a string) bool {
	if a == "" {
		return false
	}
	for _, r := range a {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		case strings.ContainsRune(`#$*+-./:?@\_`, r):
		default:
			return false
		}
	}
	return true
}

// extension and baseName read a path with either separator, so the windows
// logic behaves the same when tested on another OS.
func extension(path string) string {
	name := baseName(path)
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i:]
	}
	return ""
}

func baseName(path string) string {
	return path[strings.LastIndexAny(path, `/\`)+1:]
}

// InterpreterIn returns the interpreter a #! line (ShebangLine) names, as
// the system reads it: up to a space, a tab or the line's end, a carriage
// return part of it; or "".
func InterpreterIn(line string) string {
	line = strings.TrimLeft(line, " \t")
	if i := strings.IndexAny(line, " \t"); i >= 0 {
		line = line[:i]
	}
	return line
}
