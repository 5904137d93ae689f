package clihelp

import "strings"

// FlagValue returns the value args give the flag name ("--name V",
// "--name=V", with one dash or two), the last one when given twice, as
// flag.Parse would. It looks without parsing, for what must be known before
// the command's own parse reports any mistake: the log format of a service.
func FlagValue(args []string, name string) (string, bool) {
	var v string
	var found bool
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		switch {
		case a == name && i+1 < len(args):
			v, found = args[i+1], true
			i++
		case strings.HasPrefix(a, name+"="):
			v, found = a[len(name)+1:], true
		}
	}
	return v, found
}
