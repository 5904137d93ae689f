package crypto_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

func TestKeyCheck(t *testing.T) {
	k := mustKey(t, 1)
	c := crypto.KeyCheck(k)
	if len(c) != crypto.KeyCheckLen {
		t.Fatalf("KeyCheck is %d bytes, want %d", len(c), crypto.KeyCheckLen)
	}
	if again := crypto.KeyCheck(k); !bytes.Equal(c, again) || !crypto.KeyCheckEqual(c, again) {
		t.Fatalf("KeyCheck of the same key differs: %x, %x", c, again)
	}
	otherSecret := mustKey(t, 1)
	otherID := k
	otherID.ID = 2
	for name, other := range map[string][]byte{
		"another key id":        crypto.KeyCheck(otherID),
		"another secret":        crypto.KeyCheck(otherSecret),
		"truncated":             c[:crypto.KeyCheckLen-1],
		"empty":                 nil,
		"one bit of the secret": crypto.KeyCheck(flipBit(k)),
	} {
		if crypto.KeyCheckEqual(c, other) {
			t.Errorf("%s: KeyCheckEqual(%x, %x) = true", name, c, other)
		}
	}
}

func flipBit(k crypto.Key) crypto.Key {
	k.Secret[31] ^= 1
	return k
}

// TestKeyCheckKnownAnswer pins the check value: proxies and automators of
// different versions must compute the same. Computed independently (HKDF
// and HMAC from Python's standard library) for the secret 00 01 .. 1f and
// key id 1.
func TestKeyCheckKnownAnswer(t *testing.T) {
	k := crypto.Key{ID: 1}
	for i := range k.Secret {
		k.Secret[i] = byte(i)
	}
	const want = "584d70a705b23b76d900f1628d1cf58d"
	if got := hex.EncodeToString(crypto.KeyCheck(k)); got != want {
		t.Fatalf("KeyCheck = %s, want %s", got, want)
	}
}
