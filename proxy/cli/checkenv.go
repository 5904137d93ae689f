package cli

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strings"
)

// checkEnvLine says which web-proxy settings status's automator check used:
// this shell's (the check dials as the service does, through grpc-go's
// reading of HTTPS_PROXY and NO_PROXY, or their lower-case forms, from the
// process environment), not the service's, which are what its environment
// file envFile sets ("" where the service has no such file: Windows, whose
// service has an environment of its own). The check cannot take the
// service's settings instead: that reading is made once per process and
// cannot be given other values, and the file is read by systemd's rules or
// sourced by /bin/sh (SysV), which no one parser matches. So it says which
// it used, passwords hidden.
func checkEnvLine(getenv func(string) string, envFile string) string {
	var shell []string
	proxyVar, via := firstSet(getenv, "HTTPS_PROXY", "https_proxy")
	if proxyVar == "" {
		shell = append(shell, "no HTTPS_PROXY: direct")
	} else {
		shell = append(shell, proxyVar+"="+hideUserinfo(via))
		if noVar, no := firstSet(getenv, "NO_PROXY", "no_proxy"); noVar != "" {
			shell = append(shell, noVar+"="+no)
		} else {
			shell = append(shell, "NO_PROXY not set")
		}
	}
	line := "this shell's (" + strings.Join(shell, ", ") + "), not the service's"
	if envFile == "" {
		return line + ", which is its own (the system's)"
	}
	line += ": it reads " + envFile
	data, err := os.ReadFile(envFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return line + ", which does not exist, so it uses no web proxy"
	case err != nil:
		return line + ", which this user cannot read"
	}
	var set []string
	proxied := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		l = strings.TrimSpace(strings.TrimPrefix(l, "export "))
		name, value, ok := strings.Cut(l, "=")
		if !ok || strings.Trim(value, `"' `) == "" {
			continue
		}
		switch name {
		case "HTTPS_PROXY", "https_proxy":
			proxied = true
			fallthrough
		case "NO_PROXY", "no_proxy":
			set = append(set, name)
		}
	}
	switch {
	case len(set) == 0:
		return line + ", which sets no HTTPS_PROXY or NO_PROXY, so it uses no web proxy"
	case !proxied:
		return line + ", which sets " + strings.Join(set, ", ") + " but no HTTPS_PROXY, so it uses no web proxy"
	}
	return line + ", which sets " + strings.Join(set, ", ")
}

// firstSet returns the first of names set to a value that is not empty,
// and its value.
func firstSet(getenv func(string) string, names ...string) (string, string) {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return n, v
		}
	}
	return "", ""
}

// hideUserinfo hides the user and password of a proxy URL.
func hideUserinfo(v string) string {
	at := strings.LastIndex(v, "@")
	if at < 0 {
		return v
	}
	if s := strings.Index(v, "://"); s >= 0 && s < at {
		return v[:s+3] + "xxxxx" + v[at:]
	}
	return "xxxxx" + v[at:]
}
