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
