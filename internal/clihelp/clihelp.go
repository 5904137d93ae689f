// Package clihelp prints the help of one command of the automator's or the
// proxy's command line: its forms from the program's usage text, then its
// flags with their defaults.
package clihelp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Forms returns the lines of usage (a text with one "  PROG COMMAND ..."
// line per form of a command) that describe command name ("serve",
// "account create", "stop": a line "PROG start|stop|..." describes stop).
func Forms(usage, prog, name string) []string {
	words := strings.Fields(name)
	var forms []string
	for _, line := range strings.Split(usage, "\n") {
		f := strings.Fields(line)
		if len(f) <= len(words) || f[0] != prog {
			continue
		}
		match := true
		for i, w := range words {
			if !slices.Contains(strings.Split(f[1+i], "|"), w) {
				match = false
				break
			}
		}
		if match {
			forms = append(forms, line)
		}
	}
	return forms
}

// Usage returns a flag.FlagSet.Usage for command name of prog that writes
// to w the command's forms in usage, then fs's flags with their defaults,
// written --name as the docs write them.
//
// It prints for -h and --help only. The flag package calls Usage after a
// parse error too, having written the error to fs's output; the caller
// prints that error as its one line, so Usage makes fs's output a writer
// that notes the error and prints nothing for it (and nothing onto w,
// which for exec is the remote script's stdout). Set fs's output before
// calling Usage, not after.
func Usage(w io.Writer, usage, prog, name string, fs *flag.FlagSet) func() {
	failed := &errorSeen{}
	fs.SetOutput(failed)
	return func() {
		if failed.seen {
			failed.seen = false
			return
		}
		fmt.Fprintln(w, "usage:")
		for _, f := range Forms(usage, prog, name) {
			fmt.Fprintln(w, f)
		}
		fmt.Fprintln(w, "\nflags:")
		fs.VisitAll(func(f *flag.Flag) {
			// The value's kind, as flag.PrintDefaults names it; a
			// backquoted word in the text is part of the text here.
			kind, _ := flag.UnquoteUsage(&flag.Flag{Value: f.Value})
			if k, ok := f.Value.(interface{ Kind() string }); ok {
				kind = k.Kind()
			}
			text := f.Usage
			line := "  --" + f.Name
			if kind != "" {
				line += " " + kind
			}
			if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" {
				text += fmt.Sprintf(" (default %q)", d)
			}
			fmt.Fprintf(w, "%s\n      %s\n", line, text)
		})
		fmt.Fprintf(w, "\n`%s help` lists every command.\n", prog)
	}
}

// errorSeen is a flag set's output: the flag package writes a parse error
// there just before it calls Usage.
type errorSeen struct{ seen bool }

func (e *errorSeen) Write(p []byte) (int, error) {
	e.seen = true
	return len(p), nil
}

// OneLine is err's message on one line, as a command prints its error: the
// lines of an errors.Join (every setting out of bounds, every bad address)
// are joined with "; ", and the indented lines a library adds under a line
// ending in ":" (pgx names each address it tried) follow it after a space.
func OneLine(err error) string {
	var b strings.Builder
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		switch {
		case b.Len() == 0:
		case strings.HasSuffix(b.String(), ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return b.String()
}

// OneLineStopped is OneLine for the error of a command given ctx, the
// context a stop signal ends (signal.NotifyContext, whose cause names the
// signal: "interrupt signal received"): once the signal came, the
// "context canceled" of the calls it cut short is said as "stopped:
// interrupt signal received", which tells the operator why they ended.
func OneLineStopped(ctx context.Context, err error) string {
	line := OneLine(err)
	cause := context.Cause(ctx)
	// The cause is context.Canceled itself when no signal ended ctx (the
	// signal's cause is one too, for errors.Is).
	if ctx.Err() == nil || cause == nil || cause == context.Canceled {
		return line
	}
	return strings.ReplaceAll(line, context.Canceled.Error(), "stopped: "+cause.Error())
}

// Parse is fs.Parse, its error worded as the commands write their flags
// (ParseError).
func Parse(fs *flag.FlagSet, args []string) error {
	return ParseError(fs, fs.Parse(args))
}

// ParseError words err, of fs.Parse: the flag package names a flag with
// one dash (`flag provided but not defined: -bogus`), where the commands
// and their help write two, and an unknown one is told with where the
// flags are listed. flag.ErrHelp, and nil, are returned as they are.
func ParseError(fs *flag.FlagSet, err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag --%s: `%s --help` lists the flags", strings.TrimPrefix(name, "-"), fs.Name())
	}
	// Where the flag package names a flag: "flag needs an argument: -x",
	// "invalid value "v" for flag -x: ...", "invalid boolean value "v"
	// for -x: ...".
	for _, p := range []string{"flag needs an argument: -", " for flag -", `" for -`} {
		if p == `" for -` && !strings.HasPrefix(msg, "invalid boolean value ") {
			continue
		}
		if i := strings.Index(msg, p); i >= 0 && !strings.HasPrefix(msg[i+len(p):], "-") {
			msg = msg[:i+len(p)] + "-" + msg[i+len(p):]
		}
	}
	return errors.New(msg)
}

// ParseInterspersed parses the flags of fs that may stand before or after
// the positional arguments (as in `account create NAME --data-dir DIR`)
// and returns the positional arguments.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := Parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// ParseNoArgs parses the flags of a command that takes no arguments,
// wherever they stand, and refuses a stray argument naming it alone, not
// the flags after it: "COMMAND takes no arguments, got [...]", COMMAND
// being fs's name without the program's ("account list" of "automator
// account list").
func ParseNoArgs(fs *flag.FlagSet, args []string) error {
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		name := fs.Name()
		if _, command, ok := strings.Cut(name, " "); ok {
			name = command
		}
		named := false // --name given too
		fs.Visit(func(f *flag.Flag) { named = named || f.Name == "name" })
		if f := fs.Lookup("name"); f != nil && !named && len(pos) == 1 && !strings.HasPrefix(pos[0], "-") {
			// `proxy stop NAME`: the service's name is a flag (a review).
			return fmt.Errorf("%s takes no arguments, got %q: to name it, give --name %s", name, pos, pos[0])
		}
		return fmt.Errorf("%s takes no arguments, got %q", name, pos)
	}
	return nil
}

// Duration defines a duration flag as fs.Duration does, but one whose
// value is refused says how to write a duration ("5", seconds meant, is
// not one), where the flag package says only "parse error".
func Duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Var(durationValue{&d}, name, usage)
	return &d
}

type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil && strings.Contains(err.Error(), "invalid duration") && strings.IndexFunc(s, unicode.IsLetter) >= 0 {
		if _, uerr := time.ParseDuration("1" + strings.TrimLeft(s, "+-0123456789.")); uerr == nil {
			// Its unit is one: the number is what is wrong, too large
			// for a duration (about 290 years).
			return fmt.Errorf("too long a duration: at most about 290 years (2562047h)")
		}
	}
	if err != nil {
		return fmt.Errorf("not a duration: write it with its unit, such as 30s, 5m or 1h")
	}
	*v.d = d
	return nil
}

// Kind is the value's kind in the usage, as for fs.Duration's.
func (durationValue) Kind() string { return "duration" }
