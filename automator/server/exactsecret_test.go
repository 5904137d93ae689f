package server_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// nearMisses are secrets that differ from secret only a little: a
// prefix of it (all of it but its last character, and its first 40
// characters), it with its last or first random character changed, and it
// with one character more. Each must be refused as a wrong secret is.
func nearMisses(secret string) map[string]string {
	other := func(c byte) byte {
		if c == 'A' {
			return 'B'
		}
		return 'A'
	}
	last := []byte(secret)
	last[len(last)-1] = other(last[len(last)-1])
	first := []byte(secret)
	first[4] = other(first[4]) // after the kind's prefix ("opt_", "oak_")
	return map[string]string{
		"all but its last character":  secret[:len(secret)-1],
		"its first 40 characters":     secret[:40],
		"its last character changed":  string(last),
		"its first character changed": string(first),
		"one character more":          secret + "A",
	}
}

// TestOnlyTheExactSecretAuthenticates: a token or API key is matched
// whole: a prefix of it, or one that differs in one character or has one
// more, is Unauthenticated, while the secret itself is served.
func TestOnlyTheExactSecretAuthenticates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	for what, secret := range nearMisses(e.token) {
		_, err := automatorv1.NewProxyServiceClient(e.conn(secret)).Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("poll with the account token's %s: %v, want Unauthenticated", what, err)
		}
	}
	for what, secret := range nearMisses(e.apiKey) {
		_, err := automatorv1.NewAutomatorServiceClient(e.conn(secret)).Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x"}})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("submit with the API key's %s: %v, want Unauthenticated", what, err)
		}
	}
	if _, err := pollNow(e.proxyClient(), "a", 1); err != nil {
		t.Errorf("poll with the account token itself: %v", err)
	}
	if _, err := e.callerClient().Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x"}}); err != nil {
		t.Errorf("submit with the API key itself: %v", err)
	}
}
