//go:build unix

package stopsignal_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/stopsignal"
)

// TestMain runs the test binary as a command that stops on a signal, as
// the mains do, when asked to (helperEnv).
func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h == "hup" || h == "hup-untouched" {
		// What a program it starts ignores, and whether this process
		// still takes SIGHUP (to drop it) rather than dying of it.
		if h == "hup" {
			stopsignal.ChildrenGetDefaultHUP()
		}
		out, err := exec.Command("/bin/sh", "-c", "grep -E '^Sig(Ign|Cgt):' /proc/$$/status").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		self, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for who, status := range map[string][]byte{"child": out, "self": self} {
			for _, l := range bytes.Split(status, []byte("\n")) {
				if bytes.HasPrefix(l, []byte("SigIgn:")) || bytes.HasPrefix(l, []byte("SigCgt:")) {
					fmt.Printf("%s %s\n", who, l)
				}
			}
		}
		os.Exit(0)
	}
	if os.Getenv(helperEnv) == "list" {
		fmt.Println(slices.Contains(stopsignal.List(), os.Signal(syscall.SIGHUP)))
		os.Exit(0)
	}
	if h := os.Getenv(helperEnv); h == "1" || h == "words" || h == "stuck" {
		switch h {
		case "words":
			stopsignal.SetLastWords(func() { fmt.Fprintln(os.Stderr, "the last words") })
		case "stuck":
			// A write to a stderr that does not drain.
			stopsignal.SetLastWords(func() { select {} })
		}
		ctx, stop := signal.NotifyContext(context.Background(), stopsignal.List()...)
		fmt.Println("running")
		<-ctx.Done()
		stopsignal.Stopping(stop)
		fmt.Println("stopping") // ending takes a while: a cancel's round trip
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		if !signal.Ignored(syscall.SIGHUP) {
			// A SIGHUP now would kill it (one sent just before may not
			// have been handled yet).
			os.Exit(3)
		}
		os.Exit(0)
	}
	if signal.Ignored(syscall.SIGHUP) {
		// Run with SIGHUP ignored (under nohup, or a CI runner that
		// ignores it), the commands these tests start would inherit it,
		// and never stop on one: catching it here (and dropping it, as
		// ignoring did) starts them with its default instead.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	os.Exit(m.Run())
}

const helperEnv = "STOPSIGNAL_TEST_HELPER"

// TestASecondHangupDoesNotKillACommandThatIsStopping: a closed terminal
// sends its command SIGHUP more than once (the shell passes its own on to
// its jobs, and the kernel sends the foreground group another when the
// shell exits). The first stops the command as Ctrl-C does; the next must
// not kill it while it stops (exec cancelling its unit), as a second
// Ctrl-C would.
func TestASecondHangupDoesNotKillACommandThatIsStopping(t *testing.T) {
	cmd, in := stopTwice(t, syscall.SIGHUP, os.Args[0])
	in.Close() // it may end now
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("the command stopping after a SIGHUP ended with %v (3: another SIGHUP would kill it); want it to finish stopping, exit 0, whatever SIGHUP comes", ee)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestAHangupStopsACommandUnlessItWasStartedUnderNohup: a command started
// with SIGHUP ignored (nohup) was meant to outlive its terminal, and keeps
// ignoring it; one started without stops on it.
func TestAHangupStopsACommandUnlessItWasStartedUnderNohup(t *testing.T) {
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup here")
	}
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{os.Args[0]}, "true"},
		{[]string{nohup, os.Args[0]}, "false"},
	} {
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.Env = append(os.Environ(), helperEnv+"=list")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", c.argv, err)
		}
		if got := string(out); got != c.want+"\n" {
			t.Errorf("started as %v, the command stops on SIGHUP: %q, want %s", c.argv, got, c.want)
		}
	}
}

// TestASecondInterruptEndsACommandStartedWithItIgnored: a command started
// with SIGINT ignored (a background job of a script) stops on the first,
// as any; once it stops watching for it, Go puts the ignoring back, and a
// second one changed nothing where it must end the command at once. It
// ends with 130, the code a shell gives a command SIGINT killed.
func TestASecondInterruptEndsACommandStartedWithItIgnored(t *testing.T) {
	cmd, _ := stopTwice(t, syscall.SIGINT, "sh", "-c", `trap '' INT; exec "$0"`, os.Args[0]) // its stdin left open: it would wait
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("after a second SIGINT the command ended with %v; want exit 130", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command still runs 10 s after a second SIGINT; want it ended at once")
	}
}

// TestASecondInterruptSaysTheLastWordsAndEndsTheCommandByTheSignal: a
// second Ctrl-C or SIGTERM ends the command at once, by that signal, as
// its default does (a shell stops a script whose command SIGINT killed),
// once it has said the last words set (exec: how to follow the unit it
// leaves running).
func TestASecondInterruptSaysTheLastWordsAndEndsTheCommandByTheSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			var stderr bytes.Buffer
			cmd, _ := stopTwiceAs(t, "words", &stderr, sig, os.Args[0]) // its stdin left open: it would wait
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != sig {
					t.Errorf("after a second %v the command ended with %v; want it killed by %v", sig, err, sig)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the command still runs 10 s after a second %v; want it ended at once", sig)
			}
			if stderr.String() != "the last words\n" {
				t.Errorf("the command said %q on its way out; want the last words set", stderr.String())
			}
		})
	}
}

// TestASecondInterruptEndsTheCommandThoughItsLastWordsCannotBeSaid: last
// words whose write blocks (a stderr that does not drain: a pager that
// stopped reading, a terminal paused with Ctrl-S) do not keep the second
// signal from ending the command (a review: it ran on, a third signal
// too, until SIGKILL).
func TestASecondInterruptEndsTheCommandThoughItsLastWordsCannotBeSaid(t *testing.T) {
	cmd, _ := stopTwiceAs(t, "stuck", nil, syscall.SIGINT, os.Args[0])
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Errorf("after a second SIGINT the command ended with %v; want it killed by SIGINT", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command still runs 10 s after a second SIGINT, its last words stuck; want it ended")
	}
}

// stopTwice starts the helper command by argv, sends it sig once it runs,
// and sig again once it stops; it returns the command and its stdin,
// which it reads to its end before it exits.
func stopTwice(t *testing.T, sig syscall.Signal, argv ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	return stopTwiceAs(t, "1", nil, sig, argv...)
}

// stopTwiceAs is stopTwice of the helper as helper says (helperEnv), its
// stderr to stderr.
func stopTwiceAs(t *testing.T, helper string, stderr io.Writer, sig syscall.Signal, argv ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"="+helper)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := bufio.NewReader(outPipe)
	for _, line := range []string{"running", "stopping"} {
		if got, err := out.ReadString('\n'); got != line+"\n" {
			t.Fatalf("the command printed %q (%v), want %q", got, err, line)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	return cmd, in
}
