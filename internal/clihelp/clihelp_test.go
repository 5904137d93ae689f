package clihelp

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

const usage = `usage:
  tool serve   --data-dir DIR [--listen ADDR]
  tool account create NAME --data-dir DIR
  tool account list --data-dir DIR [--json]
  tool exec    --data-dir DIR SCRIPT
  tool exec    --server URL SCRIPT
  tool start|stop|status [--name NAME]

install makes the OS service NAME that runs
  tool --service NAME run
`

// TestFormsPicksTheCommandsOwnLines: a command's forms are the usage lines
// naming it, all of them (exec has two), and only them: account create
// is not account list, stop is found in start|stop|status, and prose
// that names the program is not a form.
func TestFormsPicksTheCommandsOwnLines(t *testing.T) {
	for name, want := range map[string][]string{
		"serve":          {"  tool serve   --data-dir DIR [--listen ADDR]"},
		"account create": {"  tool account create NAME --data-dir DIR"},
		"exec":           {"  tool exec    --data-dir DIR SCRIPT", "  tool exec    --server URL SCRIPT"},
		"stop":           {"  tool start|stop|status [--name NAME]"},
		"run":            nil,
	} {
		if got := Forms(usage, "tool", name); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("Forms(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestUsagePrintsFormsAndEveryFlag: the help names every flag, written
// --name, with its kind and default, a backquoted word in a flag's text
// kept as text.
func TestUsagePrintsFormsAndEveryFlag(t *testing.T) {
	fs := flag.NewFlagSet("tool serve", flag.ContinueOnError)
	fs.String("data-dir", "", "the data directory (made by `tool init`)")
	fs.Bool("insecure-plaintext", false, "serve without TLS")
	fs.Duration("overlap", 24*time.Hour, "how long the old token works")
	var out bytes.Buffer
	fs.Usage = Usage(&out, usage, "tool", "serve", fs)
	if err := fs.Parse([]string{"--help"}); err != flag.ErrHelp {
		t.Fatalf("parsing --help: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{
		"  tool serve   --data-dir DIR [--listen ADDR]\n",
		"  --data-dir string\n      the data directory (made by `tool init`)\n",
		"  --insecure-plaintext\n      serve without TLS\n",
		"  --overlap duration\n      how long the old token works (default \"24h0m0s\")\n",
		"`tool help` lists every command.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "account") {
		t.Errorf("help of serve shows another command's form:\n%s", out.String())
	}
}

// TestUsageIsSilentOnAParseError: a bad flag or value prints no help (the
// caller prints the error as its one line; the help on stdout would mix
// with a command's output), and --help after one still prints it.
func TestUsageIsSilentOnAParseError(t *testing.T) {
	fs := flag.NewFlagSet("tool exec", flag.ContinueOnError)
	fs.Duration("timeout", 0, "time to the deadline")
	var out bytes.Buffer
	fs.Usage = Usage(&out, usage, "tool", "exec", fs)
	for _, args := range [][]string{{"--bogus"}, {"--timeout", "abc"}} {
		if err := fs.Parse(args); err == nil || err == flag.ErrHelp {
			t.Fatalf("parsing %q: %v, want a parse error", args, err)
		}
		if out.Len() != 0 {
			t.Fatalf("parsing %q printed:\n%s", args, out.String())
		}
	}
	if err := fs.Parse([]string{"--help"}); err != flag.ErrHelp {
		t.Fatalf("parsing --help: %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "--timeout") {
		t.Fatalf("help after a parse error:\n%s", out.String())
	}
}

// TestOneLineKeepsEveryProblemOnOneLine: the problems of an errors.Join
// are joined with "; ", and the indented lines under a line ending in ":"
// (as pgx lists the addresses it tried) follow it, without their indent.
func TestOneLineKeepsEveryProblemOnOneLine(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.New("one problem"), "one problem"},
		{fmt.Errorf("invalid settings: %w", errors.Join(errors.New("a: too big"), errors.New("b: too small"))), "invalid settings: a: too big; b: too small"},
		{errors.New("failed to connect to `user=u`:\n\t127.0.0.1:1: refused\n\t[::1]:1: refused\n"), "failed to connect to `user=u`: 127.0.0.1:1: refused; [::1]:1: refused"},
	} {
		if got := OneLine(c.err); got != c.want {
			t.Errorf("OneLine(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestFlagValueFindsEveryFormOfAFlag: the forms flag.Parse accepts, the
// last one winning.
func TestFlagValueFindsEveryFormOfAFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		ok   bool
	}{
		{[]string{"--data-dir", "d", "--log-format", "json"}, "json", true},
		{[]string{"-log-format=json"}, "json", true},
		{[]string{"--log-format=text", "--log-format", "json"}, "json", true},
		{[]string{"--data-dir", "d"}, "", false},
		{[]string{"--log-format"}, "", false},
		{[]string{"--", "--log-format", "json"}, "", false},
	} {
		if got, ok := FlagValue(tc.args, "log-format"); got != tc.want || ok != tc.ok {
			t.Errorf("%q: %q, %v; want %q, %v", tc.args, got, ok, tc.want, tc.ok)
		}
	}
}

// TestOneLineStoppedNamesTheSignalOnlyWhenOneEndedTheCommand: the
// "context canceled" of a call cut short is said as the signal that ended
// the command's context (signal.NotifyContext's cause), and left as it is
// while the context runs or when it ended for another reason.
func TestOneLineStoppedNamesTheSignalOnlyWhenOneEndedTheCommand(t *testing.T) {
	err := fmt.Errorf("waiting for work w_1: %w", context.Canceled)
	if got := OneLineStopped(context.Background(), err); got != "waiting for work w_1: context canceled" {
		t.Errorf("a running context: %q", got)
	}
	plain, cancel := context.WithCancel(context.Background())
	cancel()
	if got := OneLineStopped(plain, err); got != "waiting for work w_1: context canceled" {
		t.Errorf("a context cancelled without a cause: %q", got)
	}
	signalled, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(errors.New("terminated signal received"))
	if got := OneLineStopped(signalled, err); got != "waiting for work w_1: stopped: terminated signal received" {
		t.Errorf("a context ended by a signal: %q", got)
	}
}

// TestADurationTooLongIsSaidSo: a duration flag given a value with its
// unit that is too long for a duration (about 290 years) says so, not that
// it is no duration or lacks its unit; one without a unit still says how
// to write one.
func TestADurationTooLongIsSaidSo(t *testing.T) {
	for value, want := range map[string]string{
		"9999999h":    "too long a duration",
		"99999999h5m": "too long a duration",
		"5":           "write it with its unit",
		"5x":          "write it with its unit",
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		Duration(fs, "timeout", time.Minute, "")
		if err := fs.Parse([]string{"--timeout", value}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--timeout %s: %v, want %q", value, err, want)
		}
	}
}

// TestParseErrorsNameFlagsAsTheCommandsWriteThem: the flag package names
// a flag with one dash; the commands, their help and their docs write two.
// An unknown flag is told with where the flags are listed.
func TestParseErrorsNameFlagsAsTheCommandsWriteThem(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "unknown flag --bogus: `automator exec --help` lists the flags"},
		{[]string{"-bogus"}, "unknown flag --bogus: `automator exec --help` lists the flags"},
		{[]string{"--timeout"}, "flag needs an argument: --timeout"},
		{[]string{"--timeout", "5"}, `invalid value "5" for flag --timeout: not a duration: write it with its unit, such as 30s, 5m or 1h`},
		{[]string{"--limit", "x"}, `invalid value "x" for flag --limit: parse error`},
		{[]string{"--json=maybe"}, `invalid boolean value "maybe" for --json: parse error`},
	} {
		fs := flag.NewFlagSet("automator exec", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		Duration(fs, "timeout", 0, "")
		fs.Int("limit", 1, "")
		fs.Bool("json", false, "")
		_, err := ParseInterspersed(fs, c.args)
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: %v; want %q", c.args, err, c.want)
		}
	}
	fs := flag.NewFlagSet("automator exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v; want flag.ErrHelp, as it is", err)
	}
}

// TestAnArgumentWhereANameFlagIsWantedSaysToGiveIt: `proxy stop NAME`, the
// service's name given as an argument, is refused saying to give it as
// --name (a review: "stop takes no arguments" said nothing of the flag);
// a command without a --name flag says only that it takes none.
func TestAnArgumentWhereANameFlagIsWantedSaysToGiveIt(t *testing.T) {
	fs := flag.NewFlagSet("proxy stop", flag.ContinueOnError)
	fs.String("name", "proxy", "service name")
	if err := ParseNoArgs(fs, []string{"proxy-b"}); err == nil || err.Error() != `stop takes no arguments, got ["proxy-b"]: to name it, give --name proxy-b` {
		t.Errorf("ParseNoArgs with a --name flag and one argument = %v", err)
	}
	if err := ParseNoArgs(fs, []string{"extra", "--name", "proxy-b"}); err == nil || err.Error() != `stop takes no arguments, got ["extra"]` {
		t.Errorf("ParseNoArgs with --name given and one argument = %v; want no word of --name", err)
	}
	other := flag.NewFlagSet("automator backup-check", flag.ContinueOnError)
	if err := ParseNoArgs(other, []string{"x"}); err == nil || err.Error() != `backup-check takes no arguments, got ["x"]` {
		t.Errorf("ParseNoArgs without a --name flag = %v", err)
	}
}
