package crypto

import (
	"bytes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

// docAD builds the additional data exactly as doc.go describes it, written
// out independently of sealAD so that a change to either one is caught.
func docAD(keyID uint32, account, workID string, dir byte) []byte {
	var ad []byte
	field := func(b []byte) {
		ad = binary.BigEndian.AppendUint64(ad, uint64(len(b)))
		ad = append(ad, b...)
	}
	field([]byte("opsgate seal v1"))
	field([]byte{1})
	field([]byte{byte(keyID >> 24), byte(keyID >> 16), byte(keyID >> 8), byte(keyID)})
	field([]byte(account))
	field([]byte(workID))
	field([]byte{dir})
	return ad
}

// TestFormatMatchesDoc builds a blob by hand from the documented format and
// checks that Open accepts it, and takes a Seal blob apart by hand. This keeps
// automator and proxy builds of different ages compatible.
func TestFormatMatchesDoc(t *testing.T) {
	var k Key
	k.ID = 0x0a0b0c0d
	for i := range k.Secret {
		k.Secret[i] = byte(i)
	}
	for dir, info := range map[Direction]string{
		DirCommand: "opsgate seal v1 command",
		DirResult:  "opsgate seal v1 result",
	} {
		derived, err := hkdf.Key(sha256.New, k.Secret[:], nil, info, 32)
		if err != nil {
			t.Fatal(err)
		}
		aead, err := chacha20poly1305.NewX(derived)
		if err != nil {
			t.Fatal(err)
		}
		nonce := bytes.Repeat([]byte{0x5a}, 24)
		blob := []byte{1, 0x0a, 0x0b, 0x0c, 0x0d}
		blob = append(blob, nonce...)
		blob = aead.Seal(blob, nonce, []byte("hand made"), docAD(k.ID, "acme", "w-1", byte(dir)))

		got, err := Open(Keys{k}, "acme", "w-1", dir, blob)
		if err != nil || string(got) != "hand made" {
			t.Fatalf("%v: Open(hand-made blob) = %q, %v", dir, got, err)
		}

		sealed, err := Seal(k, "acme", "w-1", dir, []byte("from Seal"))
		if err != nil {
			t.Fatal(err)
		}
		if sealed[0] != 1 || binary.BigEndian.Uint32(sealed[1:5]) != k.ID {
			t.Fatalf("%v: header % x, want version 1 and key id 0a0b0c0d", dir, sealed[:5])
		}
		got, err = aead.Open(nil, sealed[5:29], sealed[29:], docAD(k.ID, "acme", "w-1", byte(dir)))
		if err != nil || string(got) != "from Seal" {
			t.Fatalf("%v: hand-opening a Seal blob = %q, %v", dir, got, err)
		}
	}
}

// TestADVector pins the additional data bytes so that a change to the
// encoding, which would break every deployed peer, is a visible test change.
func TestADVector(t *testing.T) {
	got := hex.EncodeToString(sealAD(1, 2, "ab", "c", DirResult))
	want := "" +
		"000000000000000f" + hex.EncodeToString([]byte("opsgate seal v1")) +
		"0000000000000001" + "01" +
		"0000000000000004" + "00000002" +
		"0000000000000002" + "6162" +
		"0000000000000001" + "63" +
		"0000000000000001" + "02"
	if got != want {
		t.Fatalf("sealAD =\n%s\nwant\n%s", got, want)
	}
	if bytes.Equal(sealAD(1, 2, "ab", "c", DirResult), sealAD(1, 2, "a", "bc", DirResult)) {
		t.Fatal("ad is not injective across the account/work id boundary")
	}
}

// TestDerivedAEADsAreKeptPerSecretAndPurpose: the cache gives the same AEAD
// for the same secret and purpose, and a different one when either differs,
// even for keys that share an id.
func TestDerivedAEADsAreKeptPerSecretAndPurpose(t *testing.T) {
	a, b := Key{ID: 1}, Key{ID: 1}
	a.Secret[0], b.Secret[0] = 1, 2
	get := func(k Key, d Direction) cipher.AEAD {
		t.Helper()
		aead, err := newAEAD(k.Secret[:], d.hkdfInfo())
		if err != nil {
			t.Fatal(err)
		}
		return aead
	}
	if get(a, DirCommand) != get(a, DirCommand) {
		t.Error("the same secret and purpose derived a new AEAD")
	}
	if get(a, DirCommand) == get(b, DirCommand) {
		t.Error("two secrets with the same key id share an AEAD")
	}
	if get(a, DirCommand) == get(a, DirResult) {
		t.Error("two purposes of one secret share an AEAD")
	}
	blob, err := Seal(a, "acct", "w_1", DirCommand, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Keys{b}, "acct", "w_1", DirCommand, blob); !errors.Is(err, ErrOpen) {
		t.Errorf("opened with another secret of the same id: %v", err)
	}
}

func BenchmarkSealSmallCommand(b *testing.B) {
	k := Key{ID: 1}
	plain := make([]byte, 64)
	for b.Loop() {
		if _, err := Seal(k, "acct", "w_0123456789", DirCommand, plain); err != nil {
			b.Fatal(err)
		}
	}
}
