//go:build linux

package cli

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/closedport"
)

// TestAClientCommandWhoseConnectionsAreClosedUnansweredSaysSoAtOnce: exec,
// work wait and work cancel, whose automator's address accepts connections
// and closes them at once with nothing sent, with a FIN or a reset (a load
// balancer or a relay with no healthy backend), or answers them as an
// HTTP/1 server, say so at once in one line on stderr: the address, where
// it came from, what happened and what it may mean, what they do and
// until when they keep trying, and that Ctrl-C stops them; not that the
// automator is not answering as a stopped process does. Ctrl-C ends them
// with exit 255, stdout empty. Before, they said nothing until the retry
// budget's minute had passed, then "giving up" (a reset: "is not
// answering: it accepted the connection, then sent nothing for 0s (its
// process stopped or frozen, ...)").
func TestAClientCommandWhoseConnectionsAreClosedUnansweredSaysSoAtOnce(t *testing.T) {
	t.Parallel()
	const id = "w_0123456789abcdef0123456789abcdef"
	closed := []string{"it accepted the connection and closed it without answering", "load balancer", "without a backend"}
	for _, tc := range []struct {
		name   string
		serve  func(net.Conn)
		args   []string
		doing  string
		says   []string
		server bool // the address given by --server, not the data directory
		// reset: the listener resets each connection, which on loopback
		// may come before the dial returns, and is then told at once as
		// the dial's error ("connection reset by peer") rather than as says.
		reset bool
	}{
		{name: "exec, closed", serve: func(net.Conn) {}, args: []string{"exec", "--data-dir", "DIR", "--account", "acme", "x.sh"}, doing: `submitting work to account "acme"`, says: closed},
		{name: "work wait, reset", serve: closedport.Reset, args: []string{"work", "wait", "--data-dir", "DIR", id}, doing: "waiting for work " + id, says: closed, reset: true},
		{name: "work cancel, HTTP/1 server", serve: http1, args: []string{"work", "cancel", "--data-dir", "DIR", id}, doing: "getting work " + id, says: []string{`what answers there is not an automator: it sent "HTTP/1.1 400 Bad Request", an HTTP server's answer (the automator's HTTP listener, http_listen, 8080 by default, given for its gRPC one`}},
		{name: "exec --server, closed", serve: func(net.Conn) {}, args: []string{"exec", "--account", "acme", "x.sh"}, doing: `submitting work to account "acme"`, says: closed, server: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := initDir(t)
			addr := closedport.Accepting(t, tc.serve)
			args := append([]string(nil), tc.args...)
			where := ", the address in " + filepath.Join(dir, config.FileServing)
			if tc.server {
				args = append([]string{args[0], "--server", "https://" + addr, "--api-key-file", filepath.Join(dir, config.FileAPIKey), "--ca", filepath.Join(dir, config.FileCACert)}, args[1:]...)
				where = ":"
			} else if err := config.WriteServing(dir, config.Serving{GRPC: addr, HTTP: closedport.Addr(t)}); err != nil {
				t.Fatal(err)
			}
			for i, a := range args {
				if a == "DIR" {
					args[i] = dir
				}
			}
			ctx, interrupt := context.WithCancel(t.Context())
			defer interrupt()
			r := start(ctx, args...)
			line := r.notice(t, tc.name)
			says := tc.says
			if tc.reset && strings.Contains(line, "connection reset by peer") {
				says = nil
			}
			for _, want := range append([]string{"cannot connect to the automator at https://" + addr + where, tc.doing + ": trying again for", "Ctrl-C"}, says...) {
				if !strings.Contains(line, want) {
					t.Errorf("stderr's first line %q does not say %q", line, want)
				}
			}
			for _, wrong := range []string{"is not answering", "stopped or frozen", "sent nothing"} {
				if strings.Contains(line, wrong) {
					t.Errorf("stderr's first line %q says %q, as of a stopped automator", line, wrong)
				}
			}
			r.endsOnCtrlC(t, tc.name, interrupt)
		})
	}
}

// http1 answers as an HTTP/1 server does to what it does not understand.
func http1(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 4096)); err != nil {
		return
	}
	_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
}
