package pki

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Pin is the SHA-256 of a certificate's SubjectPublicKeyInfo (as HPKP and
// curl's --pinnedpubkey use): it names a key, so it survives a renewal of
// the certificate that keeps the key.
type Pin [sha256.Size]byte

// String is the pin as 64 lowercase hex digits.
func (p Pin) String() string { return hex.EncodeToString(p[:]) }

// ParsePin parses 64 hex digits, with optional colons between bytes (as
// openssl prints fingerprints) and an optional "sha256:" prefix.
func ParsePin(s string) (Pin, error) {
	t := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "sha256:")
	t = strings.ReplaceAll(t, ":", "")
	var p Pin
	if len(t) != 2*len(p) {
		return Pin{}, fmt.Errorf("a pin is 64 hex digits (the SHA-256 of a public key), got %d characters", len(t))
	}
	if _, err := hex.Decode(p[:], []byte(t)); err != nil {
		return Pin{}, fmt.Errorf("a pin is 64 hex digits: %w", err)
	}
	return p, nil
}

// PinOf returns the pin of a certificate's key.
func PinOf(cert *x509.Certificate) Pin {
	return sha256.Sum256(cert.RawSubjectPublicKeyInfo)
}

// PinOfPEM returns the pin of the first certificate in certPEM, e.g. the
// CA certificate of a profile.
func PinOfPEM(certPEM []byte) (Pin, error) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return Pin{}, err
	}
	return PinOf(cert), nil
}

// ParseCertPEM parses the first certificate in certPEM.
func ParseCertPEM(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate found")
	}
	return x509.ParseCertificate(block.Bytes)
}

func pinned(cert *x509.Certificate, pins []Pin) bool {
	p := PinOf(cert)
	for _, q := range pins {
		if p == q {
			return true
		}
	}
	return false
}

// verifyChainPin accepts a connection whose verified chain holds a pinned key.
func verifyChainPin(cs tls.ConnectionState, pins []Pin) error {
	for _, chain := range cs.VerifiedChains {
		for _, c := range chain {
			if pinned(c, pins) {
				return nil
			}
		}
	}
	return errors.New("the automator's certificate chain holds none of the pinned keys (pin_sha256)")
}

// verifyLeafPin accepts a connection whose server certificate (whose key
// signed the handshake) has a pinned key and is within its validity
// period. The other certificates the server sends prove nothing here: no
// CA verifies them.
func verifyLeafPin(cs tls.ConnectionState, pins []Pin) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the automator sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("the automator's certificate is not valid now (valid %s to %s)", leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	}
	if !pinned(leaf, pins) {
		return fmt.Errorf("the automator's certificate key %s is none of the pinned keys (pin_sha256)", PinOf(leaf))
	}
	if cs.ServerName != "" {
		if err := leaf.VerifyHostname(cs.ServerName); err != nil {
			return fmt.Errorf("the automator's certificate: %w", err)
		}
	}
	return nil
}
