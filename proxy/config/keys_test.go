package config

import (
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

func key(t *testing.T, id uint32) string {
	t.Helper()
	k, err := crypto.NewKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return k.String()
}

// TestPreviousKeysJoinTheKeyRing: a profile printed by rotate-key holds
// the new key and the previous ones; the proxy opens units sealed with
// any of them.
func TestPreviousKeysJoinTheKeyRing(t *testing.T) {
	k2, k1 := key(t, 2), key(t, 1)
	c, err := Parse([]byte("automator_url: https://a:1\ntoken: t\nkey: " + k2 + "\nprevious_keys:\n  - " + k1 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := c.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if ids := ring.IDs(); len(ids) != 2 || ids[0] != 2 || ids[1] != 1 {
		t.Fatalf("key ring ids %v, want [2 1]", ids)
	}
	for i, bad := range map[string][]string{
		"a broken key":  {"nope"},
		"a duplicate":   {k1, k1},
		"the key again": {k2},
	} {
		c.PreviousKeys = bad
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "previous_keys[") {
			t.Errorf("previous_keys with %s: %v, want an error naming previous_keys[i]", i, err)
		}
		if err != nil && strings.Contains(err.Error(), k1[2:]) {
			t.Errorf("the error quotes a key: %v", err)
		}
	}
}

// TestPinsReplaceOrTightenTheCA: pin_sha256 must be 64 hex digits; with
// pins, ca_cert may be left out.
func TestPinsReplaceOrTightenTheCA(t *testing.T) {
	c := Config{AutomatorURL: "https://a:1", PinSHA256: []string{"zz"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "pin_sha256[0]") {
		t.Fatalf("a bad pin: %v, want an error naming pin_sha256[0]", err)
	}
	c.PinSHA256 = []string{strings.Repeat("ab", 32)}
	if err := c.Validate(); err != nil && strings.Contains(err.Error(), "ca_cert") {
		t.Fatalf("pins without ca_cert: %v, want no ca_cert error", err)
	}
	if pins, err := c.Pins(); err != nil || len(pins) != 1 || pins[0][0] != 0xab {
		t.Fatalf("Pins = %v, %v", pins, err)
	}
}

func TestPlaintextToRemoteIsNoticed(t *testing.T) {
	for url, remote := range map[string]bool{
		"http://127.0.0.1:1": false, "http://[::1]:1": false, "http://localhost:1": false, "http://LOCALHOST:1": false,
		"http://automator.example:1": true, "http://10.0.0.1:1": true, "https://automator.example:1": false,
	} {
		if got := (Config{AutomatorURL: url}).PlaintextToRemote(); got != remote {
			t.Errorf("PlaintextToRemote(%s) = %v, want %v", url, got, remote)
		}
	}
}

// TestPlaintextToAnotherHostIsRefused: an http:// automator_url to a host
// that is not loopback would send the token in clear over a network (the
// automator serves plaintext on loopback only, so it can only be a relay).
// The proxy refuses it, as `automator exec --server` does, naming the key
// and the https:// URL to give instead; on loopback it is allowed (tests
// and demos).
func TestPlaintextToAnotherHostIsRefused(t *testing.T) {
	for _, url := range []string{"http://automator.example:8443", "http://10.0.0.1:8443", "http://[2001:db8::1]:8443"} {
		c := Config{AutomatorURL: url}
		err := c.Validate()
		want := "https://" + strings.TrimPrefix(url, "http://")
		if err == nil || !strings.Contains(err.Error(), "automator_url:") || !strings.Contains(err.Error(), "loopback only") || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate with automator_url %s: %v, want automator_url refused, saying to give %s", url, err, want)
		}
		if _, _, err := c.Target(); err == nil {
			t.Errorf("Target(%s) = nil error, want it refused (Dial must not send the token in clear)", url)
		}
	}
	for _, url := range []string{"http://127.0.0.1:8443", "http://[::1]:8443", "http://localhost:8443"} {
		if _, useTLS, err := (Config{AutomatorURL: url}).Target(); err != nil || useTLS {
			t.Errorf("Target(%s) = %v, %v; want plaintext allowed on loopback", url, useTLS, err)
		}
	}
}
