// Package pki makes the automator's private certificate authority and its
// server certificate, and builds the TLS configurations both sides use.
//
// The proxy's profile carries the CA certificate, so a proxy trusts exactly
// this automator without touching the system trust store.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// Validity of what init and cert renew make. The CA outlives the server
// certificate so a renewed server certificate keeps every proxy profile
// valid.
const (
	caValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 2 * 365 * 24 * time.Hour
)

// Bundle is a PEM certificate and its PEM private key.
type Bundle struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed ECDSA P-256 certificate authority.
func NewCA(name string, now time.Time) (Bundle, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Bundle{}, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Bundle{}, fmt.Errorf("signing CA certificate: %w", err)
	}
	return encode(der, key)
}

// NewServer makes a server certificate signed by ca, valid for hosts (DNS
// names or IP addresses), for ServerValidity or until the CA ends, if that
// is sooner: no client trusts it past its CA's end, and it should not
// claim to last longer. A CA that has ended signs nothing.
func NewServer(ca Bundle, hosts []string, now time.Time) (Bundle, error) {
	caPair, err := tls.X509KeyPair(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		return Bundle{}, fmt.Errorf("loading CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		return Bundle{}, fmt.Errorf("parsing CA certificate: %w", err)
	}
	if !now.Before(caCert.NotAfter) {
		return Bundle{}, fmt.Errorf("the CA ended on %s: no proxy trusts a certificate it signs; proxies need a new CA in their profiles", caCert.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := now.Add(ServerValidity)
	if caCert.NotAfter.Before(notAfter) {
		notAfter = caCert.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Bundle{}, fmt.Errorf("generating server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		return Bundle{}, fmt.Errorf("signing server certificate: %w", err)
	}
	return encode(der, key)
}

// ServerHosts are the names a server certificate is valid for: the public
// host plus the loopback names, without duplicates.
func ServerHosts(publicHost string) []string {
	hosts := []string{}
	seen := map[string]bool{}
	for _, h := range []string{publicHost, "localhost", "127.0.0.1", "::1"} {
		if h != "" && !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// tls12Suites are the only TLS 1.2 cipher suites offered: forward-secret
// key exchange and AEAD only (TLS 1.3 suites are not configurable and all
// qualify). ECDSA first, the key init makes; RSA for an operator's own.
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// ServerTLS is the automator's TLS configuration: TLS 1.3 whenever the peer
// speaks it (Go always negotiates the highest common version), TLS 1.2 at
// least with forward-secret AEAD suites only, HTTP/2 for gRPC, and the
// certificate served by a CertReloader, so a renewed server.pem and
// server.key are picked up without a restart.
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	r, err := NewCertReloader(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return ServerTLSFrom(r), nil
}

// ServerTLSFrom is ServerTLS serving r's certificate.
func ServerTLSFrom(r *CertReloader) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   tls12Suites,
		GetCertificate: r.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}

// ClientTLS trusts exactly the CA in caPEM, never the system store.
func ClientTLS(caPEM []byte, serverName string) (*tls.Config, error) {
	return ClientTLSPinned(caPEM, nil, serverName)
}

// ClientTLSPinned trusts the CA in caPEM (never the system store) and, when
// pins are given, also requires one of them to be the SHA-256 of the
// SubjectPublicKeyInfo of a certificate of the verified chain: pin the CA's
// key, which survives renewals of the server certificate, or the server's.
// With pins and no caPEM, the server certificate's own key must match a
// pin (and the certificate be within its validity period): for an
// automator whose certificate no CA at hand signed.
func ClientTLSPinned(caPEM []byte, pins []Pin, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: tls12Suites,
		ServerName:   serverName,
	}
	if len(caPEM) == 0 {
		if len(pins) == 0 {
			return nil, errors.New("neither a CA certificate nor a pinned key to trust")
		}
		// The chain is not verified against a CA: the pin on the key that
		// signed the handshake is the trust.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyLeafPin(cs, pins) }
		return cfg, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate found in the CA certificate")
	}
	cfg.RootCAs = pool
	if len(pins) > 0 {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyChainPin(cs, pins) }
	}
	return cfg, nil
}

// WriteFile writes data with the given mode, refusing to overwrite, and
// syncs it.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		// On disk before anyone renames it into place (cert renew): a
		// crash must not leave an empty server.key where a whole one was.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func encode(der []byte, key *ecdsa.PrivateKey) (Bundle, error) {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Bundle{}, fmt.Errorf("encoding key: %w", err)
	}
	return Bundle{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
