package crypto_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

func TestNewKey(t *testing.T) {
	a, b := mustKey(t, 3), mustKey(t, 3)
	if a.ID != 3 {
		t.Fatalf("ID = %d, want 3", a.ID)
	}
	if a.Secret == b.Secret || a.Secret == [32]byte{} {
		t.Fatal("NewKey secrets are not random")
	}
	if _, err := crypto.NewKey(0); err == nil {
		t.Fatal("NewKey(0) succeeded")
	}
}

func TestKeyStringParseRoundTrip(t *testing.T) {
	for _, id := range []uint32{1, 42, 1<<32 - 1} {
		k := mustKey(t, id)
		s := k.String()
		prefix := strconv.FormatUint(uint64(id), 10) + ":"
		if !strings.HasPrefix(s, prefix) || len(s) != len(prefix)+43 {
			t.Fatalf("String() = %q, want %q followed by 43 base64url characters", s, prefix)
		}
		if strings.ContainsAny(s, "=+/") {
			t.Fatalf("String() = %q is not unpadded base64url", s)
		}
		got, err := crypto.ParseKey(s)
		if err != nil {
			t.Fatalf("ParseKey(String()): %v", err)
		}
		if got != k {
			t.Fatal("ParseKey(String()) returned a different key")
		}
		if got, err := crypto.ParseKey(" " + s + "\n"); err != nil || got != k {
			t.Fatalf("ParseKey with surrounding whitespace = %v", err)
		}
	}
}

func TestParseKeyErrors(t *testing.T) {
	k := mustKey(t, 5)
	secret := strings.SplitN(k.String(), ":", 2)[1]
	cases := []struct {
		name, in, want string
	}{
		{"missing colon", "5" + secret, "missing ':'"},
		{"empty", "", "missing ':'"},
		{"id not a number", "x" + secret[:5] + ":" + secret, "key id is not a positive 32-bit integer"},
		{"id empty", ":" + secret, "key id is not a positive 32-bit integer"},
		{"id zero", "0:" + secret, "key id is not a positive 32-bit integer"},
		{"id negative", "-1:" + secret, "key id is not a positive 32-bit integer"},
		{"id too large", "4294967296:" + secret, "key id is not a positive 32-bit integer"},
		{"secret padded", "5:" + secret + "=", "secret is not unpadded base64url"},
		{"secret std alphabet", "5:" + strings.Repeat("+", 43), "secret is not unpadded base64url"},
		{"secret short", "5:" + secret[:40], "want 32"},
		{"secret long", "5:" + secret + "AAAA", "want 32"},
		{"secret empty", "5:", "want 32"},
	}
	for _, c := range cases {
		_, err := crypto.ParseKey(c.in)
		if err == nil {
			t.Errorf("%s: ParseKey succeeded", c.name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q does not contain %q", c.name, msg, c.want)
		}
		// Even a 5-character piece of the secret must not leak.
		for i := 0; i+5 <= len(secret); i++ {
			if strings.Contains(msg, secret[i:i+5]) {
				t.Errorf("%s: error %q contains part of the secret", c.name, msg)
				break
			}
		}
		if errors.Is(err, crypto.ErrOpen) {
			t.Errorf("%s: parse error wraps ErrOpen", c.name)
		}
	}
}
