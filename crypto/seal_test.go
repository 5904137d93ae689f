package crypto_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

func mustKey(t testing.TB, id uint32) crypto.Key {
	t.Helper()
	k, err := crypto.NewKey(id)
	if err != nil {
		t.Fatalf("NewKey(%d): %v", id, err)
	}
	return k
}

func mustSeal(t testing.TB, k crypto.Key, account, workID string, dir crypto.Direction, plaintext []byte) []byte {
	t.Helper()
	blob, err := crypto.Seal(k, account, workID, dir, plaintext)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return blob
}

// wantOpenErr fails unless err is an ErrOpen failure.
func wantOpenErr(t *testing.T, what string, plaintext []byte, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: Open succeeded with %q, want error", what, plaintext)
	}
	if !errors.Is(err, crypto.ErrOpen) {
		t.Fatalf("%s: error %v does not wrap ErrOpen", what, err)
	}
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := mustKey(t, 1)
	ring := crypto.Keys{k}
	for _, dir := range []crypto.Direction{crypto.DirCommand, crypto.DirResult} {
		for _, plaintext := range [][]byte{nil, []byte("x"), []byte("restart nginx"), bytes.Repeat([]byte{0xab}, 70000)} {
			blob := mustSeal(t, k, "acme", "work-42", dir, plaintext)
			if want := 1 + 4 + 24 + len(plaintext) + 16; len(blob) != want {
				t.Errorf("%v: blob length %d, want %d", dir, len(blob), want)
			}
			got, err := crypto.Open(ring, "acme", "work-42", dir, blob)
			if err != nil {
				t.Fatalf("%v: Open: %v", dir, err)
			}
			if !bytes.Equal(got, plaintext) {
				t.Fatalf("%v: Open = %q, want %q", dir, got, plaintext)
			}
		}
	}
}

func TestOpenRejectsReplay(t *testing.T) {
	k := mustKey(t, 1)
	ring := crypto.Keys{k}
	blob := mustSeal(t, k, "acme", "work-42", crypto.DirCommand, []byte("restart nginx"))

	cases := []struct {
		name, account, workID string
		dir                   crypto.Direction
	}{
		{"other account", "globex", "work-42", crypto.DirCommand},
		{"other work id", "acme", "work-43", crypto.DirCommand},
		{"other direction", "acme", "work-42", crypto.DirResult},
		{"empty account", "", "work-42", crypto.DirCommand},
		// Without length prefixes these would produce the same ad bytes.
		{"shifted boundary", "acmew", "ork-42", crypto.DirCommand},
		{"shifted boundary back", "acm", "ework-42", crypto.DirCommand},
	}
	for _, c := range cases {
		got, err := crypto.Open(ring, c.account, c.workID, c.dir, blob)
		wantOpenErr(t, c.name, got, err)
	}
}

func TestOpenRejectsEveryBitFlip(t *testing.T) {
	k := mustKey(t, 1)
	ring := crypto.Keys{k}
	blob := mustSeal(t, k, "acme", "work-42", crypto.DirResult, []byte("exit status 0"))
	for i := range blob {
		for bit := range 8 {
			bad := bytes.Clone(blob)
			bad[i] ^= 1 << bit
			got, err := crypto.Open(ring, "acme", "work-42", crypto.DirResult, bad)
			if err == nil || !errors.Is(err, crypto.ErrOpen) {
				t.Fatalf("byte %d bit %d flipped: Open = %q, %v; want ErrOpen", i, bit, got, err)
			}
		}
	}
	// The original must still open, or the loop above proves nothing.
	if _, err := crypto.Open(ring, "acme", "work-42", crypto.DirResult, blob); err != nil {
		t.Fatalf("unmodified blob: %v", err)
	}
}

func TestOpenRejectsTruncation(t *testing.T) {
	k := mustKey(t, 1)
	ring := crypto.Keys{k}
	blob := mustSeal(t, k, "acme", "w", crypto.DirCommand, []byte("hello"))
	for n := range len(blob) {
		got, err := crypto.Open(ring, "acme", "w", crypto.DirCommand, blob[:n])
		wantOpenErr(t, "truncated", got, err)
	}
	got, err := crypto.Open(ring, "acme", "w", crypto.DirCommand, append(bytes.Clone(blob), 0))
	wantOpenErr(t, "extended", got, err)

	_, err = crypto.Open(ring, "acme", "w", crypto.DirCommand, blob[:10])
	if err == nil || !strings.Contains(err.Error(), "shorter than the minimum") {
		t.Errorf("short blob error = %v, want it to say the blob is too short", err)
	}
}

func TestOpenUnknownVersion(t *testing.T) {
	k := mustKey(t, 1)
	blob := mustSeal(t, k, "acme", "w", crypto.DirCommand, []byte("hello"))
	blob[0] = 2
	got, err := crypto.Open(crypto.Keys{k}, "acme", "w", crypto.DirCommand, blob)
	wantOpenErr(t, "version 2", got, err)
	if !strings.Contains(err.Error(), "unknown format version 2") {
		t.Errorf("error %q does not name the version", err)
	}
}

func TestOpenUnknownKeyID(t *testing.T) {
	blob := mustSeal(t, mustKey(t, 7), "acme", "w", crypto.DirCommand, []byte("hello"))
	got, err := crypto.Open(crypto.Keys{mustKey(t, 1), mustKey(t, 2)}, "acme", "w", crypto.DirCommand, blob)
	wantOpenErr(t, "unknown key id", got, err)
	if !strings.Contains(err.Error(), "unknown key id 7") {
		t.Errorf("error %q does not name key id 7", err)
	}
	got, err = crypto.Open(crypto.Keys{}, "acme", "w", crypto.DirCommand, blob)
	wantOpenErr(t, "empty ring", got, err)
}

func TestOpenWrongKeySameID(t *testing.T) {
	blob := mustSeal(t, mustKey(t, 1), "acme", "w", crypto.DirCommand, []byte("hello"))
	got, err := crypto.Open(crypto.Keys{mustKey(t, 1)}, "acme", "w", crypto.DirCommand, blob)
	wantOpenErr(t, "wrong key", got, err)
	if !strings.Contains(err.Error(), "key id 1") {
		t.Errorf("error %q does not name the key id", err)
	}
}

func TestSealIsRandomized(t *testing.T) {
	k := mustKey(t, 1)
	a := mustSeal(t, k, "acme", "w", crypto.DirCommand, []byte("same"))
	b := mustSeal(t, k, "acme", "w", crypto.DirCommand, []byte("same"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are identical")
	}
	if bytes.Equal(a[5:29], b[5:29]) {
		t.Fatal("two seals reused the nonce")
	}
}

func TestRingPicksByID(t *testing.T) {
	k1, k2 := mustKey(t, 1), mustKey(t, 2)
	ring := crypto.Keys{k2, k1}
	for _, k := range []crypto.Key{k1, k2} {
		got, ok := ring.Key(k.ID)
		if !ok || got != k {
			t.Fatalf("ring.Key(%d) = %v, %v; want the key with that id", k.ID, got.ID, ok)
		}
	}
	if _, ok := ring.Key(3); ok {
		t.Fatal("ring.Key(3) found a key")
	}
	if _, ok := (crypto.Keys{{}}).Key(0); ok {
		t.Fatal("ring.Key(0) found the zero key")
	}

	// A blob sealed before rotation still opens while both keys are held.
	old := mustSeal(t, k1, "acme", "w", crypto.DirCommand, []byte("before rotation"))
	got, err := crypto.Open(ring, "acme", "w", crypto.DirCommand, old)
	if err != nil || string(got) != "before rotation" {
		t.Fatalf("Open with key 1 in ring {2, 1} = %q, %v", got, err)
	}
	newer := mustSeal(t, k2, "acme", "w", crypto.DirCommand, []byte("after rotation"))
	got, err = crypto.Open(ring, "acme", "w", crypto.DirCommand, newer)
	if err != nil || string(got) != "after rotation" {
		t.Fatalf("Open with key 2 in ring {2, 1} = %q, %v", got, err)
	}
}

func TestBlobKeyID(t *testing.T) {
	blob := mustSeal(t, mustKey(t, 0x01020304), "acme", "w", crypto.DirResult, []byte("x"))
	id, err := crypto.BlobKeyID(blob)
	if err != nil || id != 0x01020304 {
		t.Fatalf("BlobKeyID = %#x, %v; want 0x01020304", id, err)
	}
	if _, err := crypto.BlobKeyID(blob[:20]); !errors.Is(err, crypto.ErrOpen) {
		t.Errorf("BlobKeyID(short) error = %v, want ErrOpen", err)
	}
	blob[0] = 9
	if _, err := crypto.BlobKeyID(blob); !errors.Is(err, crypto.ErrOpen) {
		t.Errorf("BlobKeyID(version 9) error = %v, want ErrOpen", err)
	}
}

func TestSealRejectsBadInput(t *testing.T) {
	if _, err := crypto.Seal(crypto.Key{}, "acme", "w", crypto.DirCommand, nil); err == nil {
		t.Error("Seal with key id 0 succeeded")
	}
	if _, err := crypto.Seal(mustKey(t, 1), "acme", "w", 3, nil); err == nil {
		t.Error("Seal with direction 3 succeeded")
	}
	blob := mustSeal(t, mustKey(t, 1), "acme", "w", crypto.DirCommand, nil)
	if _, err := crypto.Open(crypto.Keys{}, "acme", "w", 0, blob); err == nil {
		t.Error("Open with direction 0 succeeded")
	}
}

// sloppyRing returns its one key for any id, like a buggy custom KeyRing.
type sloppyRing struct{ k crypto.Key }

func (r sloppyRing) Key(uint32) (crypto.Key, bool) { return r.k, true }

// TestOpenBindsHeaderKeyID checks that the key id in the header is
// authenticated even when the ring does not check it.
func TestOpenBindsHeaderKeyID(t *testing.T) {
	k := mustKey(t, 1)
	blob := mustSeal(t, k, "acme", "w", crypto.DirCommand, []byte("hello"))
	if _, err := crypto.Open(sloppyRing{k}, "acme", "w", crypto.DirCommand, blob); err != nil {
		t.Fatalf("unmodified blob: %v", err)
	}
	blob[4] = 5 // key id 1 -> 5
	got, err := crypto.Open(sloppyRing{k}, "acme", "w", crypto.DirCommand, blob)
	wantOpenErr(t, "relabelled key id", got, err)
}
