//go:build !windows

package service

// ConfigDir is where `proxy install` puts the service's copy of the config:
// /etc/<name>.
func ConfigDir(name string) string { return "/etc/" + name }

// StateDir is the service's state directory (its status file):
// /var/lib/<name>.
func StateDir(name string) string { return "/var/lib/" + name }

// temporaryInstead says where each kind of a service's files belongs
// instead of a temporary directory.
var temporaryInstead = map[PathKind]string{
	Binary:  "to /usr/local/bin",
	Data:    "under /var/lib",
	Scripts: "under /srv or /opt",
}
