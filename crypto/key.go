package crypto

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Key is one version of an account key.
type Key struct {
	ID     uint32 // key id, >= 1, grows with each rotation
	Secret [32]byte
}

// keyEncoding is strict so that every key has exactly one text form; a
// lenient decoder would accept variants with different trailing bits.
var keyEncoding = base64.RawURLEncoding.Strict()

// NewKey returns a key with the given id and a random secret.
func NewKey(id uint32) (Key, error) {
	if id == 0 {
		return Key{}, errors.New("creating key: key id must be >= 1")
	}
	k := Key{ID: id}
	if _, err := rand.Read(k.Secret[:]); err != nil {
		return Key{}, fmt.Errorf("creating key: reading random secret: %w", err)
	}
	return k, nil
}

// String returns "<id>:<base64url secret>". It reveals the secret, so never
// log a Key or format it with %v; it exists to move keys between programs.
func (k Key) String() string {
	return strconv.FormatUint(uint64(k.ID), 10) + ":" + keyEncoding.EncodeToString(k.Secret[:])
}

// ParseKey parses the form produced by Key.String. Surrounding whitespace is
// ignored because keys are usually read from files or environment variables.
// Errors never quote the input, since it contains the secret.
func ParseKey(s string) (Key, error) {
	idText, secretText, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Key{}, errors.New("parsing key: missing ':' between key id and secret")
	}
	id, err := strconv.ParseUint(idText, 10, 32)
	if err != nil {
		// strconv errors quote their input; keep only the reason.
		var numErr *strconv.NumError
		if errors.As(err, &numErr) {
			err = numErr.Err
		}
		return Key{}, fmt.Errorf("parsing key: key id is not a positive 32-bit integer: %w", err)
	}
	if id == 0 {
		return Key{}, errors.New("parsing key: key id is not a positive 32-bit integer: key id is 0")
	}
	secret, err := keyEncoding.DecodeString(secretText)
	if err != nil {
		// base64.CorruptInputError reports only an offset, not the input.
		return Key{}, fmt.Errorf("parsing key %d: secret is not unpadded base64url: %w", id, err)
	}
	k := Key{ID: uint32(id)}
	if len(secret) != len(k.Secret) {
		return Key{}, fmt.Errorf("parsing key %d: secret is %d bytes, want %d", id, len(secret), len(k.Secret))
	}
	copy(k.Secret[:], secret)
	return k, nil
}

// KeyRing finds the key for a key id (a proxy may hold several during rotation).
type KeyRing interface {
	Key(id uint32) (Key, bool)
}

// Keys is a KeyRing backed by a slice; rings hold a handful of keys, so a
// linear scan is simplest.
type Keys []Key

// Key returns the first key with the given id. Id 0 is never found, so a
// zero Key left in the slice by mistake cannot be selected.
func (ks Keys) Key(id uint32) (Key, bool) {
	if id == 0 {
		return Key{}, false
	}
	for _, k := range ks {
		if k.ID == id {
			return k, true
		}
	}
	return Key{}, false
}

// IDs returns the key ids in the ring, in order, without the zero id. A
// proxy sends them with each poll so the automator hands it only commands
// sealed with a key it holds.
func (ks Keys) IDs() []uint32 {
	ids := make([]uint32, 0, len(ks))
	for _, k := range ks {
		if k.ID != 0 {
			ids = append(ids, k.ID)
		}
	}
	return ids
}
