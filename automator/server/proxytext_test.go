package server_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestProxyTextsHoldNoControlCharacters: the host name and version a poll
// reports (and its run id and running units' ids, which are looked up and
// stored), and the plain failure reason a proxy posts, are stored and shown
// to operators as they came (`automator instances`, `automator work list`,
// ListInstances, WorkStatus.reason), in their terminals. A token holder
// must not be able to put terminal escape sequences (or line breaks and
// tabs that forge rows) there: a host name or version holding one is
// refused, as an instance id holding one already is; a failure, whose
// refusal would leave its unit claimed until the deadline, is taken with
// its control characters replaced.
func TestProxyTextsHoldNoControlCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	proxy := e.proxyClient()
	ctx := context.Background()
	const esc = "\x1b]2;owned\x07\x1b[2J"

	for field, req := range map[string]*automatorv1.PollRequest{
		"hostname": {InstanceId: "i-1", Hostname: "h" + esc, Wait: durationpb.New(0)},
		"version":  {InstanceId: "i-1", Version: "v" + esc, Wait: durationpb.New(0)},
		// C1 controls: U+009B is CSI, which terminals may take as ESC [.
		"hostname (C1)":    {InstanceId: "i-1", Hostname: "h\u009b2J", Wait: durationpb.New(0)},
		"instance_id (C1)": {InstanceId: "i-\u009b2J", Wait: durationpb.New(0)},
		// Not shown, but looked up and stored: with PostgreSQL a NUL
		// fails the statement, and the batch of other instances' polls
		// written with it.
		"run_id":     {InstanceId: "i-1", RunId: "r\x00", Wait: durationpb.New(0)},
		"running[0]": {InstanceId: "i-1", Running: []string{"w_\x00"}, Wait: durationpb.New(0)},
	} {
		if _, err := proxy.Poll(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), strings.Fields(field)[0]) {
			t.Errorf("poll with a control character in %s: %v, want InvalidArgument naming it", field, err)
		}
	}
	list, err := e.callerClient().ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: e.account})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list.GetInstances() {
		if strings.ContainsRune(in.GetHostname()+in.GetVersion(), 0x1b) {
			t.Errorf("instance %s is listed with host %q, version %q", in.GetInstanceId(), in.GetHostname(), in.GetVersion())
		}
	}

	submitScript(t, e.callerClient(), e.account, "x.sh", time.Minute)
	cl := claimOne(t, proxy, "i-2")
	if _, err = proxy.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: cl.GetWorkId(), ClaimId: cl.GetClaimId(), InstanceId: "i-2",
		Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "no" + esc + "\nsecond line",
	}); err != nil {
		t.Fatalf("failure reason with an escape sequence: %v, want it taken", err)
	}
	st, err := e.callerClient().Get(ctx, &automatorv1.GetRequest{WorkId: cl.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != automatorv1.State_STATE_FAILED || strings.IndexFunc(st.GetReason(), unicode.IsControl) >= 0 || !strings.HasSuffix(st.GetReason(), " second line") {
		t.Errorf("unit %s is %v with reason %q; want it failed, the proxy's escape sequence and line break replaced", cl.GetWorkId(), st.GetState(), st.GetReason())
	}

	// The same failure inside the sealed result, which the automator opens
	// for the reason it shows.
	submitScript(t, e.callerClient(), e.account, "x.sh", time.Minute)
	cl = claimOne(t, proxy, "i-2")
	if _, err = proxy.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: cl.GetWorkId(), ClaimId: cl.GetClaimId(), InstanceId: "i-2", Outcome: automatorv1.Outcome_OUTCOME_FAILED,
		SealedResult: e.sealResult(cl.GetWorkId(), &automatorv1.Result{Failure: "sealed" + esc}),
	}); err != nil {
		t.Fatalf("sealed failure with an escape sequence: %v, want it taken", err)
	}
	if st, err = e.callerClient().Get(ctx, &automatorv1.GetRequest{WorkId: cl.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.GetReason(), "sealed") || strings.IndexFunc(st.GetReason(), unicode.IsControl) >= 0 {
		t.Errorf("unit %s has reason %q; want the sealed failure, its escape sequence replaced", cl.GetWorkId(), st.GetReason())
	}
}

// TestCommandEnvThatRunsCodeIsRefusedAtSubmit: an env variable that makes a
// shell, an interpreter or the loader run code of the caller's choosing
// (BASH_ENV, LD_PRELOAD, ...), or picks the programs a script runs (PATH),
// is refused when the command is submitted, so
// that proxies not yet upgraded to refuse it themselves never receive it.
func TestCommandEnvThatRunsCodeIsRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, name := range []string{"BASH_ENV", "LD_PRELOAD", "BASH_FUNC_echo%%", "PERL5OPT", "ComSpec", "PSModulePath", "ld_preload", "PATH", "Path", "PATHEXT", "HOME", "XDG_CONFIG_HOME", "APPDATA", "UserProfile"} {
		_, err := e.callerClient().Submit(context.Background(), &automatorv1.ExecuteRequest{
			Account: e.account,
			Command: &automatorv1.Command{Script: "x.sh", Env: map[string]string{name: "$(id)"}},
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), name) {
			t.Errorf("submit with env %s: %v, want InvalidArgument naming it", name, err)
		}
	}
	// Names that load no code are the command's to set, ENV (read by
	// interactive shells only) among them.
	if _, err := e.callerClient().Submit(context.Background(), &automatorv1.ExecuteRequest{
		Account: e.account,
		Command: &automatorv1.Command{Script: "x.sh", Env: map[string]string{"ENV": "production", "TMPDIR": "/var/tmp", "LANG": "C.UTF-8"}},
	}); err != nil {
		t.Errorf("submit with env ENV, TMPDIR and LANG: %v, want it queued", err)
	}
}

// TestCommandNoProcessCanTakeIsRefusedAtSubmit: an env variable with an
// empty name or one holding '=' or NUL, and a NUL byte in a value, an
// argument or the script's name, can reach no process on any proxy (an
// environment block and an argument vector are NUL-terminated strings of
// NAME=value): such a command is refused when submitted, naming what is
// wrong, rather than queued for a proxy to report it failed.
func TestCommandNoProcessCanTakeIsRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		name string
		cmd  *automatorv1.Command
		want string
	}{
		{"empty env name", &automatorv1.Command{Script: "x.sh", Env: map[string]string{"": "v"}}, `command.env: variable name ""`},
		{"env name with =", &automatorv1.Command{Script: "x.sh", Env: map[string]string{"A=B": "v"}}, `command.env: variable name "A=B"`},
		{"env name with NUL", &automatorv1.Command{Script: "x.sh", Env: map[string]string{"A\x00": "v"}}, `command.env: variable name "A\x00"`},
		{"env value with NUL", &automatorv1.Command{Script: "x.sh", Env: map[string]string{"A": "v\x00w"}}, `command.env: the value of "A" holds a NUL byte`},
		{"arg with NUL", &automatorv1.Command{Script: "x.sh", Args: []string{"ok", "a\x00b"}}, `command.args[1] holds a NUL byte`},
		{"script with NUL", &automatorv1.Command{Script: "x\x00.sh"}, `command.script holds a NUL byte`},
		// No proxy runs a name that is not a plain file name in its
		// scripts directory (proxy/runner refuses it too): refused here,
		// it takes no proxy's slot, and its caller hears why at once.
		{"script out of the scripts directory", &automatorv1.Command{Script: "../outside/evil.sh"}, `command.script "../outside/evil.sh" is refused: contains a path separator; a script is a plain file name`},
		{"absolute script", &automatorv1.Command{Script: "/bin/sh"}, `command.script "/bin/sh" is refused: is an absolute path`},
		{"script named ..", &automatorv1.Command{Script: ".."}, `command.script ".." is refused: names a directory`},
		{"hidden script", &automatorv1.Command{Script: ".x.sh"}, `command.script ".x.sh" is refused: starts with '.' (a hidden file)`},
		{"script's backup", &automatorv1.Command{Script: "x.sh~"}, `command.script "x.sh~" is refused: ends in '~' (an editor's backup)`},
		{"script with a control character", &automatorv1.Command{Script: "x\n.sh"}, `command.script "x\n.sh" is refused: contains a control character`},
		{"script with a bidi override", &automatorv1.Command{Script: "\u202ehs.x"}, `command.script "\u202ehs.x" is refused: contains an invisible, format or separator character`},
		{"built-in with a zero-width space", &automatorv1.Command{Script: "@p\u200bing"}, `command.script: the built-in name "@p\u200bing" contains an invisible, format or separator character`},
		{"script with a Hangul filler", &automatorv1.Command{Script: "x\u3164.sh"}, `command.script "x\u3164.sh" is refused: contains an invisible, format or separator character`},
	} {
		_, err := e.callerClient().Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: tc.cmd})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: %v; want InvalidArgument saying %q", tc.name, err, tc.want)
		}
	}
	units, err := e.store.WorkList(context.Background(), store.WorkListParams{Account: e.account, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(units) != 0 {
		t.Fatalf("%d units queued by commands no process can take", len(units))
	}
}

// TestProxyTextsHoldNoInvisibleOrReorderingCharacters: beyond control
// characters, a text a proxy reports must not hold what terminals and
// browsers show as something else or not at all: a zero-width space makes
// an instance id that is listed as another instance's ("p1" and
// "p1\u200b" look the same in `automator instances` and on the
// dashboard), a bidi override reverses what follows it, a line separator
// breaks a row. The instance id, host name and version holding one are
// refused, naming the character; a failure reason is taken with it
// replaced, as with a control character.
func TestProxyTextsHoldNoInvisibleOrReorderingCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	proxy := e.proxyClient()
	ctx := context.Background()
	for _, c := range []struct{ name, text, char string }{
		{"a zero-width space", "p1\u200b", "U+200B"},
		{"a right-to-left override", "p1\u202egnp.exe", "U+202E"},
		{"a bidi isolate", "\u2066p1", "U+2066"},
		{"a line separator", "p1\u2028p2", "U+2028"},
		{"a byte order mark", "\ufeffp1", "U+FEFF"},
		{"a Hangul filler, printable but blank", "p1\u3164", "U+3164"},
		{"the braille blank", "p1\u2800", "U+2800"},
	} {
		for field, req := range map[string]*automatorv1.PollRequest{
			"instance_id": {InstanceId: c.text, Wait: durationpb.New(0)},
			"hostname":    {InstanceId: "i-1", Hostname: c.text, Wait: durationpb.New(0)},
			"version":     {InstanceId: "i-1", Version: c.text, Wait: durationpb.New(0)},
		} {
			_, err := proxy.Poll(ctx, req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), c.char) {
				t.Errorf("poll with %s in %s: %v, want InvalidArgument naming %s and %s", c.name, field, err, field, c.char)
			}
		}
	}
	list, err := e.callerClient().ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: e.account})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list.GetInstances() {
		if text := in.GetInstanceId() + in.GetHostname() + in.GetVersion(); strings.IndexFunc(text, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("an instance is listed as %q, host %q, version %q", in.GetInstanceId(), in.GetHostname(), in.GetVersion())
		}
	}
	// Ordinary text in any script is served.
	if _, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "hôte-1 東京", Hostname: "hôte-1", Version: "v1.2 (β)", Wait: durationpb.New(0)}); err != nil {
		t.Errorf("poll with accented, CJK and Greek text: %v, want it served", err)
	}

	submitScript(t, e.callerClient(), e.account, "x.sh", time.Minute)
	cl := claimOne(t, proxy, "i-2")
	if _, err = proxy.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: cl.GetWorkId(), ClaimId: cl.GetClaimId(), InstanceId: "i-2\u200b",
		Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "no",
	}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "instance_id") {
		t.Errorf("result with a zero-width space in its instance_id: %v, want InvalidArgument naming instance_id", err)
	}
	if _, err = proxy.Complete(ctx, &automatorv1.CompleteRequest{
		WorkId: cl.GetWorkId(), ClaimId: cl.GetClaimId(), InstanceId: "i-2",
		Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "no such file:\u202e hs.txt\u2028second line \u26a0\ufe0f",
	}); err != nil {
		t.Fatalf("failure reason with a bidi override and a line separator: %v, want it taken", err)
	}
	st, err := e.callerClient().Get(ctx, &automatorv1.GetRequest{WorkId: cl.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	// Prose, not a name: the variation selector after the emoji stays.
	if want := "no such file:\ufffd hs.txt second line \u26a0\ufe0f"; st.GetState() != automatorv1.State_STATE_FAILED || st.GetReason() != want {
		t.Errorf("unit %s is %v with reason %q; want it failed with reason %q", cl.GetWorkId(), st.GetState(), st.GetReason(), want)
	}
}
