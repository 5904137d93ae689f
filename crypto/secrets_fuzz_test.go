package crypto_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

// fuzzMaster is fixed so the golden blobs below stay valid (see goldenBlobs
// for why they are constants).
func fuzzMaster() crypto.MasterKey {
	var m crypto.MasterKey
	for i := range m {
		m[i] = byte(3 * i)
	}
	return m
}

// goldenSealedKey is fuzzMaster().SealKey("acme", key 7 with secret 100, 101, …).
const goldenSealedKey = "0100000007e0f38c74f11fe057e369d1103e82e457905d0f8acd855c617c63fd94ada351afce44e1ccfee9e6fb7032badbaf58cbea1e45ba4d0aaa5073010ddcc3f4c2e6469317b0a8f3a0d4de"

// goldenAuditFields are fuzzMaster().SealAuditField(workID, plaintext).
var goldenAuditFields = []struct{ hex, workID, plaintext string }{
	{"012e959e5b6142a2d2266cfe56c511191ecf8db2f0806a7e53fb941a50c25baf51edfa603f7eaa191a00545beb3481de3bfd", "w-1", "deploy.sh"},
	{"01fc7540eb4c61ee43ad0d77348cff914af20c1c6f409083c8eb851034518b86c74d35a824f3b2ee3c", "", ""},
}

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestGoldenSealedKeyAndAuditFieldsOpen(t *testing.T) {
	m := fuzzMaster()
	k, err := m.OpenKey("acme", mustHex(t, goldenSealedKey))
	if err != nil || k.ID != 7 || k.Secret[0] != 100 || k.Secret[31] != 131 {
		t.Errorf("golden sealed key: OpenKey = %d, %v; want key 7", k.ID, err)
	}
	for _, g := range goldenAuditFields {
		got, err := m.OpenAuditField(g.workID, mustHex(t, g.hex))
		if err != nil || string(got) != g.plaintext {
			t.Errorf("golden audit field of %q: %q, %v; want %q", g.workID, got, err, g.plaintext)
		}
	}
}

// TestAuditFieldIsBoundToItsEvent: a sealed script name opens only for the
// work id it was sealed with and only with the master key that sealed it.
func TestAuditFieldIsBoundToItsEvent(t *testing.T) {
	m := fuzzMaster()
	blob, err := m.SealAuditField("w-1", []byte("deploy.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, []byte("deploy")) {
		t.Fatalf("sealed field holds the plaintext")
	}
	other, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() ([]byte, error){
		"another work id":    func() ([]byte, error) { return m.OpenAuditField("w-2", blob) },
		"another master key": func() ([]byte, error) { return other.OpenAuditField("w-1", blob) },
		"a flipped bit": func() ([]byte, error) {
			b := bytes.Clone(blob)
			b[len(b)-1] ^= 1
			return m.OpenAuditField("w-1", b)
		},
	} {
		if _, err := open(); !errors.Is(err, crypto.ErrOpen) {
			t.Errorf("opening with %s: %v, want ErrOpen", name, err)
		}
	}
}

// FuzzOpenKey feeds arbitrary blobs to MasterKey.OpenKey: never a panic,
// and a success only for the golden blob under its own account.
func FuzzOpenKey(f *testing.F) {
	m := fuzzMaster()
	golden := mustHex(f, goldenSealedKey)
	f.Add(golden, "acme")
	f.Add(golden, "globex")
	f.Add([]byte{}, "acme")
	f.Add([]byte{1, 0, 0, 0, 0}, "acme")
	f.Add(append([]byte{1, 0, 0, 0, 7}, make([]byte, 72)...), "acme")
	f.Fuzz(func(t *testing.T, blob []byte, account string) {
		k, err := m.OpenKey(account, blob)
		if err != nil {
			if !errors.Is(err, crypto.ErrOpen) {
				t.Fatalf("OpenKey error %v does not wrap ErrOpen", err)
			}
			return
		}
		if !bytes.Equal(blob, golden) || account != "acme" || k.ID != 7 {
			t.Fatalf("OpenKey accepted a blob SealKey never made for %q: %x", account, blob)
		}
	})
}

// FuzzOpenAuditField: never a panic, a success only for a golden blob
// opened with its own work id.
func FuzzOpenAuditField(f *testing.F) {
	m := fuzzMaster()
	made := map[string]int{}
	for i, g := range goldenAuditFields {
		b := mustHex(f, g.hex)
		made[string(b)] = i
		f.Add(b, g.workID)
	}
	f.Add([]byte{1}, "w-1")
	f.Add(make([]byte, 41), "w-1")
	f.Fuzz(func(t *testing.T, blob []byte, workID string) {
		got, err := m.OpenAuditField(workID, blob)
		if err != nil {
			if !errors.Is(err, crypto.ErrOpen) {
				t.Fatalf("OpenAuditField error %v does not wrap ErrOpen", err)
			}
			return
		}
		i, ok := made[string(blob)]
		if !ok || goldenAuditFields[i].workID != workID || string(got) != goldenAuditFields[i].plaintext {
			t.Fatalf("OpenAuditField accepted %x for %q: %q", blob, workID, got)
		}
	})
}

// FuzzParseKey: the profile's "ID:SECRET" text. Never a panic; whatever
// parses prints back to a text that parses to the same key; an error never
// quotes the secret.
func FuzzParseKey(f *testing.F) {
	k, _ := crypto.NewKey(1)
	f.Add(k.String())
	f.Add("4294967295:" + base64.RawURLEncoding.EncodeToString(make([]byte, 32)))
	f.Add("0:AAAA")
	f.Add("1:")
	f.Add(" 7:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA \n")
	f.Add("x:y:z")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := crypto.ParseKey(s)
		if err != nil {
			idText, secret, ok := strings.Cut(strings.TrimSpace(s), ":")
			msg := err.Error()
			if id, perr := strconv.ParseUint(idText, 10, 32); perr == nil {
				// The error names the key id, whose digits may hold the
				// secret's text ("100000000:00000000"): that is no leak.
				msg = strings.Replace(msg, fmt.Sprintf("parsing key %d", id), "parsing key", 1)
			}
			if ok && len(secret) >= 8 && strings.Contains(msg, secret) {
				t.Fatalf("ParseKey error quotes the secret: %v", err)
			}
			return
		}
		if k.ID == 0 {
			t.Fatalf("ParseKey(%q) gave key id 0", s)
		}
		again, err := crypto.ParseKey(k.String())
		if err != nil || again != k {
			t.Fatalf("ParseKey(String()) = %v, %v; want the same key", again.ID, err)
		}
	})
}

// FuzzParseMasterKey: the master key file's content. Never a panic; a
// success is exactly 32 bytes that encode back to the trimmed text; an
// error never quotes the content.
func FuzzParseMasterKey(f *testing.F) {
	f.Add([]byte(base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"))
	f.Add([]byte(""))
	f.Add([]byte("  \n"))
	f.Add([]byte("not base64 at all!"))
	f.Add([]byte(base64.StdEncoding.EncodeToString(make([]byte, 31))))
	f.Add(bytes.Repeat([]byte("A"), 2000))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := crypto.ParseMasterKey(data)
		if err != nil {
			if text := bytes.TrimSpace(data); len(text) >= 8 && strings.Contains(err.Error(), string(text)) {
				t.Fatalf("ParseMasterKey error quotes the content: %v", err)
			}
			return
		}
		if got := base64.StdEncoding.EncodeToString(m[:]); got != string(bytes.TrimSpace(data)) {
			t.Fatalf("ParseMasterKey(%q) accepted a variant of %q", data, got)
		}
	})
}
