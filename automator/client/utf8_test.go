package client_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/store"
)

// TestTextThatIsNotUTF8IsRefusedNamingItsField: the API carries the
// account, the script's name, its arguments and its environment as text
// (protobuf strings, UTF-8). Bytes that are not UTF-8, a Latin-1 file name
// passed as an argument, say, cannot be sent; the client says which field
// holds them, with InvalidArgument, instead of gRPC's "error while
// marshaling: string field contains invalid UTF-8" (Internal), and queues
// nothing. Stdin carries bytes and takes anything.
func TestTextThatIsNotUTF8IsRefusedNamingItsField(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	c := newClient(t, a)
	const bad = "caf\xe9"
	for _, tc := range []struct {
		name    string
		account string
		cmd     client.Command
		opts    []client.Option
		want    string
	}{
		{"account", bad, client.Command{Script: "x.sh"}, nil, "account name"},
		{"script", a.Account, client.Command{Script: bad + ".sh"}, nil, "command.script"},
		{"argument", a.Account, client.Command{Script: "x.sh", Args: []string{"ok", bad}}, nil, "command.args[1]"},
		{"env name", a.Account, client.Command{Script: "x.sh"}, []client.Option{client.WithEnv(map[string]string{bad: "v"})}, "command.env: a variable name"},
		{"env value", a.Account, client.Command{Script: "x.sh"}, []client.Option{client.WithEnv(map[string]string{"LANG": bad})}, "command.env: the value of LANG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Submit(context.Background(), tc.account, tc.cmd, tc.opts...)
			if err == nil {
				t.Fatal("Submit of text that is not UTF-8 succeeded")
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not valid UTF-8") {
				t.Errorf("Submit = %v (%s); want InvalidArgument naming %q as not valid UTF-8", err, status.Code(err), tc.want)
			}
			if strings.Contains(err.Error(), "\n") || !utf8.ValidString(err.Error()) {
				t.Errorf("error %q is not one line of valid text", err)
			}
		})
	}
	ws, err := a.Store.WorkList(context.Background(), store.WorkListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 0 {
		t.Errorf("%d unit(s) queued; want none", len(ws))
	}
	// Stdin is bytes: anything goes.
	if _, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithStdin([]byte(bad))); err != nil {
		t.Errorf("Submit with stdin that is not UTF-8: %v; want it queued", err)
	}
}

// TestAWorkIDThatIsNotUTF8IsRefusedAsSuch: Get, Wait and Cancel of an id
// that is not UTF-8 (no unit has one) say so, InvalidArgument, instead of
// gRPC's Internal "error while marshaling".
func TestAWorkIDThatIsNotUTF8IsRefusedAsSuch(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	c := newClient(t, a)
	ctx := context.Background()
	for name, call := range map[string]func(string) (client.Work, error){
		"Get": func(id string) (client.Work, error) { return c.Get(ctx, id) }, "Wait": func(id string) (client.Work, error) { return c.Wait(ctx, id) },
		"Cancel": func(id string) (client.Work, error) { return c.Cancel(ctx, id) },
	} {
		if _, err := call("w_\xff"); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("%s of an id that is not UTF-8: %v (%s); want InvalidArgument saying so", name, err, status.Code(err))
		}
	}
}

// TestAnAPIKeyAHeaderCannotCarryIsRefusedAtNew: the key goes in the
// authorization header, printable ASCII only; one read from a file with
// its line break (as `automator init` writes admin.apikey) is refused by
// New, saying what to do, not by every call with Internal.
func TestAnAPIKeyAHeaderCannotCarryIsRefusedAtNew(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	for key, want := range map[string]string{
		a.APIKey + "\n":     "trim it",
		" " + a.APIKey:      "trim it",
		a.APIKey + "\x00":   "U+0000",
		"oak_caf\u00e9-key": "U+00E9",
	} {
		_, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: key, CAPEM: a.CAPEM, ServerName: "127.0.0.1"})
		if err == nil || !strings.Contains(err.Error(), "APIKey") || !strings.Contains(err.Error(), want) {
			t.Errorf("New with the key %q: %v; want it refused naming APIKey and %q", key, err, want)
		}
	}
}
