package service

import (
	"fmt"
	"strings"
)

// Flag is the flag, before the command, that marks a command line run by
// the service manager: `proxy --service NAME run ...`. Install writes it
// into the service definition; it is not for use by hand.
const Flag = "--service"

// SplitServiceFlag recognises a command line that starts with
// "--service NAME" (or "--service=NAME"): ok is true, and rest is the
// command after it.
func SplitServiceFlag(args []string) (name string, rest []string, ok bool, err error) {
	if len(args) == 0 {
		return "", nil, false, nil
	}
	switch {
	case args[0] == Flag || args[0] == Flag[1:]:
		if len(args) < 2 {
			return "", nil, false, fmt.Errorf("%s needs a service name", Flag)
		}
		name, rest = args[1], args[2:]
	case strings.HasPrefix(args[0], Flag+"=") || strings.HasPrefix(args[0], Flag[1:]+"="):
		_, name, _ = strings.Cut(args[0], "=")
		rest = args[1:]
	default:
		return "", nil, false, nil
	}
	if err := CheckName(name); err != nil {
		return "", nil, false, fmt.Errorf("%s: %w", Flag, err)
	}
	if len(rest) == 0 {
		return "", nil, false, fmt.Errorf("%s %s: a command must follow", Flag, name)
	}
	return name, rest, true, nil
}

// LogLocation tells an operator where a service's log is.
func LogLocation(st Status) string {
	switch st.Platform {
	case "linux-systemd":
		return "journalctl -u " + st.Name
	case "unix-systemv":
		return "syslog (tag " + st.Name + ") when /dev/log exists, otherwise " + sysvLogDir + "/" + st.Name + ".log"
	case "windows-service":
		return "Event Log: Windows Logs > Application, source " + st.Name
	}
	return "the service manager's log"
}
