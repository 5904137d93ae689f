package crypto_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

// fuzzKeys returns fixed keys so the golden blobs below stay valid.
func fuzzKeys() (crypto.Key, crypto.Key) {
	var k1, k2 crypto.Key
	k1.ID, k2.ID = 1, 2
	for i := range k1.Secret {
		k1.Secret[i], k2.Secret[i] = byte(i), byte(255-i)
	}
	return k1, k2
}

// goldenBlobs were made once by Seal with fuzzKeys. They are constants rather
// than sealed at start-up because the fuzzer's worker processes each run the
// setup again, and a fresh random nonce would make the coordinator's seeds
// unknown to the workers. They also prove that blobs from older builds open.
var goldenBlobs = []struct {
	hex, account, workID string
	dir                  crypto.Direction
	plaintext            string
}{
	{"01000000012e37d6b96dc0e560eba99e1fb8fecb31ffaa34e2ba0b9211badfb169c8ee11dde9710840dabe479b1f7f8bed5f4c", "acme", "w-1", crypto.DirCommand, "uptime"},
	{"010000000268c44a82ac5739ac3c99307b43ee25b5913683de41bec730e4083a73ea763048c538904d53f44b058ed8c549c7940661f8", "acme", "w-1", crypto.DirResult, "up 3 days"},
	{"0100000001063f9ab2d482c61f61158c12077b345731049431f99b309605fbe5ac8f55209f17f5ff7afb1e6e3e", "", "", crypto.DirCommand, ""},
}

func TestGoldenBlobsOpen(t *testing.T) {
	k1, k2 := fuzzKeys()
	for i, g := range goldenBlobs {
		blob, err := hex.DecodeString(g.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := crypto.Open(crypto.Keys{k1, k2}, g.account, g.workID, g.dir, blob)
		if err != nil || string(got) != g.plaintext {
			t.Errorf("golden blob %d: Open = %q, %v; want %q", i, got, err, g.plaintext)
		}
	}
}

// FuzzOpen feeds arbitrary blobs and bindings to Open. It must never panic,
// and it may only succeed for one of the golden blobs, opened with exactly
// the binding it was sealed for: any other success would be a forgery.
func FuzzOpen(f *testing.F) {
	k1, k2 := fuzzKeys()
	ring := crypto.Keys{k1, k2}
	made := map[string]int{}
	for i, g := range goldenBlobs {
		blob, err := hex.DecodeString(g.hex)
		if err != nil {
			f.Fatal(err)
		}
		made[string(blob)] = i
		f.Add(blob, g.account, g.workID, byte(g.dir))
	}
	f.Add([]byte{}, "acme", "w-1", byte(crypto.DirCommand))
	f.Add([]byte{1}, "acme", "w-1", byte(crypto.DirCommand))
	f.Add([]byte{1, 0, 0, 0, 1}, "acme", "w-1", byte(crypto.DirCommand))
	f.Add(make([]byte, 45), "acme", "w-1", byte(crypto.DirResult))
	f.Add(append([]byte{1, 0, 0, 0, 1}, make([]byte, 40)...), "acme", "w-1", byte(crypto.DirCommand))

	f.Fuzz(func(t *testing.T, blob []byte, account, workID string, dir byte) {
		d := crypto.Direction(dir)
		got, err := crypto.Open(ring, account, workID, d, blob)
		if err != nil {
			valid := d == crypto.DirCommand || d == crypto.DirResult
			if valid && !errors.Is(err, crypto.ErrOpen) {
				t.Fatalf("Open error %v does not wrap ErrOpen", err)
			}
			return
		}
		i, ok := made[string(blob)]
		if !ok {
			t.Fatalf("Open accepted a blob Seal never made: %x", blob)
		}
		g := goldenBlobs[i]
		if g.account != account || g.workID != workID || g.dir != d {
			t.Fatalf("blob sealed for (%q, %q, %v) opened as (%q, %q, %v)", g.account, g.workID, g.dir, account, workID, d)
		}
		if !bytes.Equal(got, []byte(g.plaintext)) {
			t.Fatalf("Open = %q, want %q", got, g.plaintext)
		}
	})
}
