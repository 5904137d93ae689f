//go:build linux

package cli

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeWarnsWhenPublicURLsSchemeIsNotTheOneItSpeaks: public_url goes
// into every profile as automator_url, so an http:// one on an automator
// serving TLS (or the other way round) makes profiles no proxy can use.
// serve says so as it starts, naming the fix, and serves all the same.
// The plaintext URL it suggests is the address serve listens on, not
// public_url's (before, it named public_url's port, where nothing
// listened, then public_url's host, which a plaintext public_url may not
// name off loopback).
func TestServeWarnsWhenPublicURLsSchemeIsNotTheOneItSpeaks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, want string
		more      []string
	}{
		{"http://127.0.0.1:8443", "public_url is http://, but serve serves TLS", nil},
		{"https://127.0.0.1:8443", "serving plaintext (insecure_plaintext), but public_url is https://", []string{"--insecure-plaintext"}},
		// Its host is not loopback: the suggestion is where serve listens.
		{"https://automator.example:8443", "serving plaintext (insecure_plaintext), but public_url is https://", []string{"--insecure-plaintext"}},
		{"https://127.0.0.1:8443", "", nil},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		if code, _, stderr := runMain(t, "init", "--data-dir", dir, "--public-url", c.url); code != 0 {
			t.Fatalf("init --public-url %s: exit %d: %s", c.url, code, stderr)
		}
		s := serveDirInProcess(t, dir, c.more...)
		s.stop() // its log whole
		log := s.log.String()
		switch {
		case c.want != "" && !strings.Contains(log, c.want):
			t.Errorf("serve %v of a public_url %s: its log lacks %q:\n%s", c.more, c.url, c.want, log)
		case c.want == "" && strings.Contains(log, "public_url is"):
			t.Errorf("serve %v of a public_url %s warns of its scheme:\n%s", c.more, c.url, log)
		}
		if _, port, _ := net.SplitHostPort(s.grpc); len(c.more) > 0 && !strings.Contains(log, "set public_url to http://127.0.0.1:"+port+" in ") {
			t.Errorf("serve %v listening on %s: its log does not suggest http://127.0.0.1:%s:\n%s", c.more, s.grpc, port, log)
		}
	}
}
