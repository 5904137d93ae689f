package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/crypto"
)

// Keys returns the key ring of the profile: key first, then previous_keys.
func (c Config) Keys() (crypto.Keys, error) {
	k, err := crypto.ParseKey(c.Key)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	ring := crypto.Keys{k}
	for i, s := range c.PreviousKeys {
		p, err := crypto.ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("previous_keys[%d]: %w", i, err)
		}
		ring = append(ring, p)
	}
	return ring, nil
}

// validateKeyRing checks previous_keys: each a key, no id twice.
func (c Config) validateKeyRing() []error {
	var errs []error
	seen := map[uint32]string{}
	if k, err := crypto.ParseKey(c.Key); err == nil {
		seen[k.ID] = "key"
	}
	for i, s := range c.PreviousKeys {
		k, err := crypto.ParseKey(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("previous_keys[%d]: %w", i, err))
			continue
		}
		if where, dup := seen[k.ID]; dup {
			errs = append(errs, fmt.Errorf("previous_keys[%d]: key id %d is also in %s", i, k.ID, where))
			continue
		}
		seen[k.ID] = fmt.Sprintf("previous_keys[%d]", i)
	}
	return errs
}

// Pins returns the parsed pin_sha256 digests.
func (c Config) Pins() ([]pki.Pin, error) {
	pins, errs := c.pins()
	return pins, errors.Join(errs...)
}

func (c Config) pins() ([]pki.Pin, []error) {
	var pins []pki.Pin
	var errs []error
	for i, s := range c.PinSHA256 {
		p, err := pki.ParsePin(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("pin_sha256[%d]: %w", i, err))
			continue
		}
		pins = append(pins, p)
	}
	return pins, errs
}

// PlaintextToRemote reports whether automator_url is http:// to a host that
// is not a loopback address: the token would cross a network in clear.
// (The automator serves plaintext on loopback only, so such a URL can only
// reach it through a relay.) Target refuses such a URL.
func (c Config) PlaintextToRemote() bool {
	u, err := url.Parse(c.AutomatorURL)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
