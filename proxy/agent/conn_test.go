package agent

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestConnectionLogsOneLinePerStateChange: retries against an automator
// that stays down, or polls that keep succeeding, add no log lines; each
// change (up, down, refused, a certificate the profile does not trust)
// adds exactly one, and one that says the
// automator failed names it: gRPC's own message may not (a host name that
// does not resolve gives "produced zero addresses").
func TestConnectionLogsOneLinePerStateChange(t *testing.T) {
	var buf bytes.Buffer
	const url = "https://automator.example:8443"
	s := &connState{log: slog.New(slog.NewJSONHandler(&buf, nil)), automator: url}
	down := status.Error(codes.Unavailable, "connection refused")
	refused := status.Error(codes.Unauthenticated, "invalid account token")
	cut := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`)
	untrusted := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`)
	for range 5 {
		s.failed(down)
	}
	for range 5 {
		s.ok()
	}
	for range 3 {
		s.failed(down)
	}
	s.failed(refused)
	s.failed(refused)
	s.ok()
	for range 3 {
		s.failed(untrusted)
	}
	s.failed(down)
	s.failed(cut) // a handshake the network cut is still down, not untrusted

	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Level, Msg, Automator string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Level != "INFO" && rec.Automator != url {
			t.Errorf("log line %q does not name the automator %s", line, url)
		}
		msgs = append(msgs, rec.Level+" "+rec.Msg)
	}
	want := []string{
		"WARN automator unreachable; retrying with backoff",
		"INFO connected to the automator; polling",
		"WARN automator unreachable; retrying with backoff",
		"ERROR the automator refused this proxy's token: the account's token was rotated and its overlap has ended, or the account was deleted; install the account's current profile, or check `token` in the config (retrying with backoff)",
		"INFO connected to the automator; polling",
		"ERROR the TLS handshake with the automator failed: its certificate is not trusted by this proxy's `ca_cert` (or `pin_sha256`), or not valid for the host of `automator_url`; check them (retrying with backoff)",
		"WARN automator unreachable; retrying with backoff",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("log lines:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}

// TestConnectionLogNamesTheCodeInJSONAsInText: the gRPC code of a failure
// is its name in a JSON record ("Unavailable"), as in text, not the number
// JSON would make of it.
func TestConnectionLogNamesTheCodeInJSONAsInText(t *testing.T) {
	var buf bytes.Buffer
	s := &connState{log: slog.New(slog.NewJSONHandler(&buf, nil)), automator: "https://automator.example:8443"}
	s.failed(status.Error(codes.Unavailable, "connection refused"))
	var rec struct {
		Code any `json:"code"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec.Code != "Unavailable" {
		t.Errorf("code in %s: %v (%v); want \"Unavailable\"", buf.String(), rec.Code, err)
	}
}
