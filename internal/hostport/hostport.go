// Package hostport checks the URLs that name an automator for proxies: the
// automator's public_url and a profile's automator_url, which is made from
// it.
package hostport

import (
	"fmt"
	"net/url"
	"strconv"
)

// Parse returns raw as a URL when it is scheme://HOST:PORT and nothing
// more: a port of 1 to 65535, no user name or password (it would be shown
// wherever the URL is; a proxy authenticates with its token, a caller with
// its API key), no path but "/", no query or fragment (they would be
// ignored). It does not check the scheme. Its errors show the URL with any
// password redacted.
func Parse(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("must be https://HOST:PORT: %w", err)
	}
	shown := u.Redacted()
	switch {
	case u.Hostname() == "" || u.Port() == "":
		return nil, fmt.Errorf("%q must be https://HOST:PORT", shown)
	case u.User != nil:
		return nil, fmt.Errorf("%q must be https://HOST:PORT, without a user name or password (a proxy authenticates with its token, a caller with its API key)", shown)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%q must be https://HOST:PORT, without a path, query or fragment (they would be ignored)", shown)
	}
	if port, err := strconv.Atoi(u.Port()); err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("%q: port %s is not a TCP port (1 to 65535)", shown, u.Port())
	}
	return u, nil
}
