package runner

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestInterpreterFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		want []string
	}{
		{`C:\scripts\a.ps1`, powerShellPrefix},
		{`C:\scripts\A.PS1`, powerShellPrefix},
		{`C:\scripts\a.cmd`, batchPrefix},
		{`C:\scripts\a.bat`, batchPrefix},
		{`C:\scripts\a.exe`, nil},
		{`C:\scripts\a.Exe`, nil},
	} {
		got, err := interpreterFor(tc.path)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("interpreterFor(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	for _, path := range []string{`C:\scripts\a.sh`, `C:\scripts\a`, `C:\scripts.d\a`, `C:\scripts\a.ps1.txt`, "/s/a.py"} {
		if _, err := interpreterFor(path); !errors.Is(err, ErrUnknownScript) {
			t.Errorf("interpreterFor(%q) = %v, want ErrUnknownScript", path, err)
		}
	}
}

func TestInterpreterForPowerShellBypassesProfileAndPolicy(t *testing.T) {
	t.Parallel()
	want := []string{"powershell.exe", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-File"}
	if !slices.Equal(powerShellPrefix, want) {
		t.Errorf("powershell prefix %q, want %q", powerShellPrefix, want)
	}
}

func TestWindowsCommandArgv(t *testing.T) {
	t.Parallel()
	argv, line, err := windowsCommand(`C:\s\a.ps1`, []string{"x y", `"q"`})
	want := append(slices.Clone(powerShellPrefix), `C:\s\a.ps1`, "x y", `"q"`)
	if err != nil || line != "" || !slices.Equal(argv, want) {
		t.Errorf("ps1: %q %q %v; want %q", argv, line, err, want)
	}
	argv, line, err = windowsCommand(`C:\s\a.exe`, []string{"-v"})
	if err != nil || line != "" || !slices.Equal(argv, []string{`C:\s\a.exe`, "-v"}) {
		t.Errorf("exe: %q %q %v", argv, line, err)
	}
}

func TestBatchCommandLineQuotesShellCharacters(t *testing.T) {
	t.Parallel()
	_, line, err := windowsCommand(`C:\my scripts\a.cmd`, []string{"plain", "two words", "a&calc", "x|y", "<in", "^", "(p)", "", "c:\\dir\\", "!v!"})
	if err != nil {
		t.Fatal(err)
	}
	want := `cmd.exe /d /v:off /s /c ""C:\my scripts\a.cmd" plain "two words" "a&calc" "x|y" "<in" "^" "(p)" "" c:\dir\ "!v!""`
	if line != want {
		t.Errorf("command line\n got %s\nwant %s", line, want)
	}
}

func TestBatchCommandLineRefusesUnsafeArguments(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{`"&calc`, `%PATH%`, "a\r\nb", "a\nb", "a\x00"} {
		if _, _, err := windowsCommand(`C:\s\a.bat`, []string{arg}); !errors.Is(err, ErrStart) {
			t.Errorf("argument %q: %v, want ErrStart", arg, err)
		}
	}
	if _, _, err := windowsCommand(`C:\50%\a.bat`, nil); !errors.Is(err, ErrStart) {
		t.Errorf("path with %%: %v, want ErrStart", err)
	}
}

// TestBatchArgumentRefusalDoesNotShowTheArgument: an argument refused for a
// batch file is named by its position, not its value: the reason is logged
// by the proxy, and arguments may hold secrets (a password with a '%').
func TestBatchArgumentRefusalDoesNotShowTheArgument(t *testing.T) {
	t.Parallel()
	_, _, err := windowsCommand(`C:\s\a.bat`, []string{"--user", "admin", "--password", `hunter2%"x`})
	if !errors.Is(err, ErrStart) {
		t.Fatalf("argument with %%: %v, want ErrStart", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the refusal shows the argument: %v", err)
	}
	if !strings.Contains(err.Error(), "argument 4") {
		t.Errorf("the refusal does not say which argument: %v", err)
	}
}

// TestBatchCommandLineQuotesEveryArgumentCmdCouldSplitOrRun: an argument
// reaches cmd.exe unquoted only when it is made of characters that mean
// nothing to it. Vertical tab and form feed split arguments like a space,
// and characters beyond ASCII are not vouched for.
func TestBatchCommandLineQuotesEveryArgumentCmdCouldSplitOrRun(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"a\vb", "a\fb", "a\u00a0b", "a\u3000b", "a\x1ab", "a~b", "a'b", "a`b", "[a]", "{a}"} {
		_, line, err := windowsCommand(`C:\s\a.cmd`, []string{arg})
		if err != nil {
			t.Errorf("argument %q: %v", arg, err)
			continue
		}
		if want := `cmd.exe /d /v:off /s /c ""C:\s\a.cmd" "` + arg + `""`; line != want {
			t.Errorf("argument %q: command line\n got %q\nwant %q", arg, line, want)
		}
	}
	// Every ASCII character is quoted, refused, or one of the plain ones.
	for c := rune(0); c < 0x80; c++ {
		arg := "a" + string(c) + "b"
		_, line, err := windowsCommand(`C:\s\a.cmd`, []string{arg})
		if err != nil || strings.HasSuffix(line, ` "`+arg+`""`) {
			continue
		}
		if !strings.ContainsRune(`#$*+-./:?@\_`, c) && !('0' <= c && c <= '9') && !('a' <= c && c <= 'z') && !('A' <= c && c <= 'Z') {
			t.Errorf("argument %q passed unquoted: %q", arg, line)
		}
	}
}

// TestInterpretersComeFromTheSystemDirectoryNotPATH: cmd.exe and
// powershell.exe are run from System32, so a copy earlier on PATH (in a
// folder some user may write to) is never what a LocalSystem service runs;
// an .exe script runs from its own path.
func TestInterpretersComeFromTheSystemDirectoryNotPATH(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ sysDir, name, want string }{
		{`C:\Windows\system32`, "cmd.exe", `C:\Windows\system32\cmd.exe`},
		{`C:\Windows\system32\`, "powershell.exe", `C:\Windows\system32\WindowsPowerShell\v1.0\powershell.exe`},
		{`C:\Windows\system32`, `C:\scripts\cmd.exe`, `C:\scripts\cmd.exe`},
	} {
		if got := systemInterpreter(tc.sysDir, tc.name); got != tc.want {
			t.Errorf("systemInterpreter(%q, %q) = %q, want %q", tc.sysDir, tc.name, got, tc.want)
		}
	}
	for _, argv := range [][]string{powerShellPrefix, batchPrefix} {
		if got := systemInterpreter(`D:\WINNT\System32`, argv[0]); !strings.HasPrefix(got, `D:\WINNT\System32\`) {
			t.Errorf("interpreter %q is not taken from the system directory: %q", argv[0], got)
		}
	}
}

// TestPowerShellScriptPathWithBracketsIsRefused: Windows PowerShell reads
// the path after -File as a wildcard pattern, so x[1].ps1 would run
// x1.ps1, or nothing: such a script is refused rather than another run.
// Brackets mean nothing to cmd.exe or to an .exe's path.
func TestPowerShellScriptPathWithBracketsIsRefused(t *testing.T) {
	t.Parallel()
	for _, path := range []string{`C:\s\x[1].ps1`, `C:\s\[ab].ps1`, `C:\s\a].ps1`, `C:\scripts [old]\a.ps1`} {
		_, _, err := windowsCommand(path, nil)
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "wildcard") {
			t.Errorf("windowsCommand(%q): %v, want ErrStart saying why", path, err)
		}
	}
	for _, path := range []string{`C:\s\x[1].cmd`, `C:\s\x[1].exe`} {
		if _, _, err := windowsCommand(path, []string{"[a]"}); err != nil {
			t.Errorf("windowsCommand(%q): %v, want it run", path, err)
		}
	}
	if _, _, err := windowsCommand(`C:\s\a.ps1`, []string{"[a]", "x[1]"}); err != nil {
		t.Errorf("a .ps1 with bracketed arguments: %v, want it run (arguments are not paths)", err)
	}
}
