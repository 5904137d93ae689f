package crypto

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
)

const (
	keyCheckVersion  = 1
	keyCheckHKDFInfo = "opsgate key check v1"
	keyCheckContext  = "opsgate key check v1"
	// KeyCheckLen is the length of a KeyCheck value.
	KeyCheckLen = 16
)

// KeyCheck returns a check value of key k: it shows that its holder has
// the key (secret and id) without revealing the secret. A proxy sends it
// beside each key id it holds (PollRequest.key_checks), so the automator
// can refuse one that holds another account's key, or a mistyped one,
// under the right id, before it claims units it cannot open.
//
// It is the HMAC-SHA256, truncated to KeyCheckLen bytes, of the format
// version and the key id (each preceded by its length, as the additional
// data of a seal), keyed with a key derived from the secret by HKDF-SHA256
// with info "opsgate key check v1": a purpose of its own, so it shares no
// derived key with sealing. It names no account: the secret tells an
// account's key from any other (a profile does not name its account, so
// a proxy could not bind it to one before its first poll), and the value
// is no credential, the account's token being that. It is deterministic:
// the same key always gives the same value.
func KeyCheck(k Key) []byte {
	key, err := hkdf.Key(sha256.New, k.Secret[:], nil, keyCheckHKDFInfo, sha256.Size)
	if err != nil {
		// Only a requested length above 255 hash lengths fails.
		panic("crypto: deriving the key check key: " + err.Error())
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(keyCheckInput(keyCheckVersion, k.ID))
	return mac.Sum(nil)[:KeyCheckLen]
}

func keyCheckInput(version byte, keyID uint32) []byte {
	var b []byte
	b = appendField(b, []byte(keyCheckContext))
	b = appendField(b, []byte{version})
	b = appendField(b, binary.BigEndian.AppendUint32(nil, keyID))
	return b
}

// KeyCheckEqual reports whether two key check values are equal, in time
// that depends only on their lengths.
func KeyCheckEqual(a, b []byte) bool {
	return subtle.ConstantTimeCompare(a, b) == 1
}
