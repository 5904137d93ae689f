//go:build !windows

package service

// ConfigDir is where `proxy install` puts the service's copy of the config:
// /etc/<name>.
func ConfigDir(name string) string { return "/etc/" + name }

// StateDir is the service's state directory (its status file):
// /var/lib/<name>.
func StateDir(name string) string { return "/var/lib/" + name }

// temporaryInstead says where a service's files belong instead of a
// temporary directory.
const temporaryInstead = "to /usr/local/bin (a binary), under /var/lib (data) or under /srv or /opt (scripts)"
