package service

import (
	"fmt"
	"strings"
)

// SystemdUnit renders the systemd unit Install writes to
// /etc/systemd/system/<Name>.service.
//
// Choices, each for the proxy's sake:
//   - Restart=always, and no start rate limit: a proxy that cannot reach the
//     automator keeps retrying; one that crashed comes back.
//   - After= and Wants=network-online.target: the first poll need not fail.
//   - KillMode=mixed: a stop sends SIGTERM to the proxy alone, which stops
//     polling and lets running scripts finish within its grace period (the
//     same path as `proxy run` on Ctrl-C); whatever is left when
//     TimeoutStopSec runs out gets SIGKILL.
//   - EnvironmentFile=-/etc/default/<Name>: optional variables such as
//     HTTPS_PROXY, for a network whose outbound traffic goes through a proxy.
//   - Hardening that leaves scripts working: NoNewPrivileges, ProtectSystem=full
//     (/usr, /boot and /etc read-only; /var, /srv, /opt and home directories
//     stay writable) and PrivateTmp. docs/install-proxy.md says how to relax
//     them with a drop-in.
func SystemdUnit(s Spec) string {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line("# Written by `%s install`; removed by `%s uninstall`.", progName(s), progName(s))
	line("[Unit]")
	line("Description=%s", systemdEscape(s.Description))
	line("Wants=network-online.target")
	line("After=network-online.target")
	line("StartLimitIntervalSec=0")
	line("")
	line("[Service]")
	line("Type=simple")
	words := make([]string, 0, 1+len(s.Arguments))
	for _, w := range append([]string{s.Executable}, s.Arguments...) {
		words = append(words, systemdQuote(w))
	}
	line("ExecStart=%s", strings.Join(words, " "))
	if s.User != "" {
		line("User=%s", s.User)
	}
	line("EnvironmentFile=-%s", systemdQuote(EnvironmentFile(s.Name)))
	line("Restart=always")
	line("RestartSec=5")
	line("KillMode=mixed")
	line("TimeoutStopSec=%d", int(s.stopTimeout().Seconds()))
	line("SyslogIdentifier=%s", s.Name)
	line("NoNewPrivileges=yes")
	line("ProtectSystem=full")
	line("PrivateTmp=yes")
	if len(s.WritablePaths) > 0 {
		paths := make([]string, len(s.WritablePaths))
		for i, p := range s.WritablePaths {
			paths[i] = systemdQuote(p)
		}
		line("ReadWritePaths=%s", strings.Join(paths, " "))
	}
	line("")
	line("[Install]")
	line("WantedBy=multi-user.target")
	return b.String()
}

// progName is the binary's base name for comments: "proxy" or "automator".
func progName(s Spec) string {
	name := s.Executable[strings.LastIndexAny(s.Executable, `/\`)+1:]
	name = strings.TrimSuffix(name, ".exe")
	if name == "" {
		return "proxy"
	}
	return name
}

// systemdEscape doubles the characters systemd would expand: % (specifiers)
// and $ (environment variables).
func systemdEscape(s string) string {
	return strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
}

// systemdQuote makes one word of a systemd command line: escaped, and
// double-quoted when it holds anything but plain characters.
func systemdQuote(w string) string {
	w = systemdEscape(w)
	plain := w != ""
	for _, r := range w {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@%$", r)) {
			plain = false
			break
		}
	}
	if plain {
		return w
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`).Replace(w) + `"`
}

// EnvironmentFile is the optional file of NAME=value lines the service
// reads its environment from (HTTPS_PROXY, say): /etc/default/<name>. The
// operator writes it; uninstall leaves it.
func EnvironmentFile(name string) string { return "/etc/default/" + name }
