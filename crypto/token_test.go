package crypto_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok, err := crypto.NewToken("tok_")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tok, "tok_") || len(tok) != len("tok_")+43 {
			t.Fatalf("token %q: want prefix tok_ and 43 more characters", tok)
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "tok_"))
		if err != nil || len(raw) != 32 {
			t.Fatalf("token %q body is not 32 bytes of base64url: %v", tok, err)
		}
		if seen[tok] {
			t.Fatalf("token %q repeated", tok)
		}
		seen[tok] = true
	}
	if tok, err := crypto.NewToken(""); err != nil || len(tok) != 43 {
		t.Fatalf("NewToken(\"\") = %q, %v", tok, err)
	}
}

func TestHashToken(t *testing.T) {
	want := sha256.Sum256([]byte("tok_abc"))
	got := crypto.HashToken("tok_abc")
	if !bytes.Equal(got, want[:]) {
		t.Fatalf("HashToken = %x, want %x", got, want)
	}
	// Known answer so a change of hash function cannot go unnoticed.
	if h := crypto.HashToken(""); base64.StdEncoding.EncodeToString(h) != "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=" {
		t.Fatalf("HashToken(\"\") = %x, not the SHA-256 of the empty string", h)
	}
}

func TestTokenEqual(t *testing.T) {
	a := crypto.HashToken("tok_a")
	if !crypto.TokenEqual(a, crypto.HashToken("tok_a")) {
		t.Error("equal hashes compare unequal")
	}
	if crypto.TokenEqual(a, crypto.HashToken("tok_b")) {
		t.Error("different hashes compare equal")
	}
	if crypto.TokenEqual(a, a[:31]) {
		t.Error("hashes of different length compare equal")
	}
	if crypto.TokenEqual(nil, nil) || crypto.TokenEqual([]byte{}, []byte{}) {
		t.Error("empty hashes compare equal")
	}
}
