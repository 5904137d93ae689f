package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/config"
)

// serveState says whether the serve of an installed service answers: the
// service manager's "running" is only that its process, or the SysV
// supervisor, is up, also while serve fails at every start (a setting
// refused, a port taken) and is started again. "" when it cannot be told
// on this platform.
func serveState(name string) string {
	pid, dir, ok := serviceServe(name)
	if !ok {
		return ""
	}
	if pid == 0 {
		return "no: no serve of the service runs now (one that fails at start is started again every few seconds); its log says why"
	}
	s, found, err := config.ReadServing(dir)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("unknown: pid %d runs, but this user cannot read %s; run as root to check", pid, dir)
	case err != nil:
		return fmt.Sprintf("no: pid %d: %v", pid, err)
	case !found:
		return fmt.Sprintf("not yet: pid %d has not started listening (no %s in %s yet); its log says why if it does not", pid, config.FileServing, dir)
	}
	ready, detail := askReady(s.HTTP)
	if !ready {
		return fmt.Sprintf("no: pid %d, gRPC on %s, HTTP on %s: /readyz %s", pid, s.GRPC, s.HTTP, detail)
	}
	return fmt.Sprintf("yes: pid %d, gRPC on %s, HTTP on %s (/readyz: %s)", pid, s.GRPC, s.HTTP, detail)
}

// askReady asks GET /readyz of the HTTP listener at addr.
func askReady(addr string) (bool, string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err.Error()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + net.JoinHostPort(host, port) + "/readyz")
	if err != nil {
		return false, "does not answer: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	text := strings.Join(strings.Fields(string(body)), " ")
	return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, text)
}

// serveStartWait is how long `automator start` waits for the serve it
// started to answer /readyz.
const serveStartWait = 15 * time.Second

// waitServing waits up to d for the serve of service name to answer
// /readyz with 200, and returns the addresses it serves; ok is false when
// it does not by then, or when that cannot be told on this platform (known
// is false then).
func waitServing(name string, d time.Duration) (s config.Serving, ok, known bool) {
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		pid, dir, found := serviceServe(name)
		if !found {
			return config.Serving{}, false, false
		}
		if pid > 0 {
			if s, ok, _ := config.ReadServing(dir); ok {
				if ready, _ := askReady(s.HTTP); ready {
					return s, true, true
				}
			}
		}
		if time.Now().After(end) {
			return config.Serving{}, false, true
		}
	}
}
