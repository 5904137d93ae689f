package config

import (
	"strings"
	"testing"
)

// TestAutomatorURLWithAPortThatCannotBeDialledIsRefused: url.Parse takes
// any digits as a port, but no TCP port is 0 or above 65535. Such a
// profile must be refused at start with a precise error, not accepted to
// retry "automator unreachable" for ever.
func TestAutomatorURLWithAPortThatCannotBeDialledIsRefused(t *testing.T) {
	for _, u := range []string{"https://automator.example:0", "https://automator.example:65536", "https://automator.example:99999", "http://127.0.0.1:00"} {
		_, _, err := Config{AutomatorURL: u}.Target()
		if err == nil || !strings.Contains(err.Error(), "port") {
			t.Errorf("Target(%q) = %v, want an error about its port", u, err)
		}
	}
	for _, u := range []string{"https://automator.example:443", "https://automator.example:65535", "http://127.0.0.1:1"} {
		if _, _, err := (Config{AutomatorURL: u}).Target(); err != nil {
			t.Errorf("Target(%q) = %v, want it accepted", u, err)
		}
	}
}

// TestAutomatorURLWithMoreThanHostAndPortIsRefused: a path, query or
// fragment would be ignored, and a user name and password would be
// ignored too, and shown wherever the URL is (logs, the service's
// description): each is refused at start, and the error shows no password.
func TestAutomatorURLWithMoreThanHostAndPortIsRefused(t *testing.T) {
	for _, u := range []string{"https://automator.example:443/api", "https://automator.example:443?x=1", "https://automator.example:443#f", "https://admin:s3cret@automator.example:443"} {
		_, _, err := Config{AutomatorURL: u}.Target()
		if err == nil || !strings.Contains(err.Error(), "HOST:PORT") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Target(%q) = %v, want it refused without showing a password", u, err)
		}
	}
	if _, _, err := (Config{AutomatorURL: "https://automator.example:443/"}).Target(); err != nil {
		t.Errorf("Target with a trailing slash = %v, want it accepted", err)
	}
}
