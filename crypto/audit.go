package crypto

import (
	"crypto/rand"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

const (
	auditVersion   = 1
	auditHKDFInfo  = "opsgate audit field v1"
	auditADContext = "opsgate audit field v1"
	auditHeaderLen = 1 + chacha20poly1305.NonceSizeX
)

// SealAuditField encrypts a value the audit log keeps but a copy of the
// database alone must not reveal (a unit's script name), bound to the work
// id of the event it belongs to. The blob is
// version (1) || nonce (24) || sealed value + tag, under a key derived from
// the master key for this purpose only.
func (m MasterKey) SealAuditField(workID string, plaintext []byte) ([]byte, error) {
	aead, err := newAEAD(m[:], auditHKDFInfo)
	if err != nil {
		return nil, fmt.Errorf("sealing an audit field: %w", err)
	}
	blob := make([]byte, auditHeaderLen, auditHeaderLen+len(plaintext)+aead.Overhead())
	blob[0] = auditVersion
	if _, err := rand.Read(blob[1:]); err != nil {
		return nil, fmt.Errorf("sealing an audit field: reading random nonce: %w", err)
	}
	return aead.Seal(blob, blob[1:auditHeaderLen], plaintext, auditAD(workID)), nil
}

// OpenAuditField reverses SealAuditField. Every failure wraps ErrOpen.
func (m MasterKey) OpenAuditField(workID string, blob []byte) ([]byte, error) {
	if len(blob) < auditHeaderLen+chacha20poly1305.Overhead {
		return nil, fmt.Errorf("opening an audit field: blob is %d bytes, shorter than the minimum %d: %w", len(blob), auditHeaderLen+chacha20poly1305.Overhead, ErrOpen)
	}
	if blob[0] != auditVersion {
		return nil, fmt.Errorf("opening an audit field: unknown format version %d: %w", blob[0], ErrOpen)
	}
	aead, err := newAEAD(m[:], auditHKDFInfo)
	if err != nil {
		return nil, fmt.Errorf("opening an audit field: %w", err)
	}
	plain, err := aead.Open(nil, blob[1:auditHeaderLen], blob[auditHeaderLen:], auditAD(workID))
	if err != nil {
		return nil, fmt.Errorf("opening an audit field: wrong master key, or blob altered or moved to another event: %w", ErrOpen)
	}
	return plain, nil
}

func auditAD(workID string) []byte {
	var ad []byte
	ad = appendField(ad, []byte(auditADContext))
	ad = appendField(ad, []byte{auditVersion})
	ad = appendField(ad, []byte(workID))
	return ad
}
