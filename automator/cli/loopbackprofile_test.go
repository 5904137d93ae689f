package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAProfileNamingLoopbackSaysOnlyThisHostReachesIt: init without
// --public-url writes https://localhost:8443, and every profile made from it
// names an address that a proxy on another host resolves to itself. The
// profile on stdout stays as it is; stderr says so, and how to give the
// automator an address other hosts reach. A profile with another host says
// nothing.
func TestAProfileNamingLoopbackSaysOnlyThisHostReachesIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		publicURL string // "" for init's default
		note      bool
	}{
		{"default", "", true},
		{"127.0.0.1", "https://127.0.0.1:8443", true},
		{"::1", "https://[::1]:8443", true},
		{"a host name", "https://automator.example:8443", false},
		{"an address", "https://192.0.2.10:8443", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "data")
			args := []string{"init", "--data-dir", dir}
			if tc.publicURL != "" {
				args = append(args, "--public-url", tc.publicURL)
			}
			if code, _, stderr := runCLI(t, args...); code != 0 {
				t.Fatalf("init: exit %d: %s", code, stderr)
			}
			for _, cmd := range [][]string{
				{"account", "create", "acme", "--data-dir", dir},
				{"account", "rotate-token", "acme", "--data-dir", dir},
				{"account", "rotate-key", "acme", "--data-dir", dir},
			} {
				code, stdout, stderr := runCLI(t, cmd...)
				if code != 0 {
					t.Fatalf("%s: exit %d: %s", strings.Join(cmd[:2], " "), code, stderr)
				}
				if !strings.Contains(stdout, "automator_url: https://") || strings.Contains(stdout, "loopback") {
					t.Errorf("%s: the profile on stdout changed:\n%s", strings.Join(cmd[:2], " "), stdout)
				}
				said := strings.Contains(stderr, "is a loopback address: only a proxy on this host reaches it")
				if said != tc.note {
					t.Errorf("%s with public URL %q: stderr says the profile is loopback only: %v, want %v:\n%s", strings.Join(cmd[:2], " "), tc.publicURL, said, tc.note, stderr)
				}
				if tc.note && (!strings.Contains(stderr, "public_url in "+filepath.Join(dir, "automator.yaml")) || !strings.Contains(stderr, "automator cert renew --data-dir "+dir)) {
					t.Errorf("%s: the note does not say how to give another address:\n%s", strings.Join(cmd[:2], " "), stderr)
				}
			}
		})
	}
}
