//go:build linux

package service

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
)

// TestAutomatorServiceInstallStartStopUninstall: `automator serve` as an
// OS service, with the same verbs as the proxy. The data directory is the
// operator's: uninstall leaves it, and nothing else.
func TestAutomatorServiceInstallStartStopUninstall(t *testing.T) {
	requireRoot(t)
	w := newWorkDir(t)
	dir := filepath.Join(w.dir, "data")
	port := freePort(t)
	if r := runCLI(bin.automator, "init", "--data-dir", dir, "--public-url", fmt.Sprintf("https://127.0.0.1:%d", port)); r.Code != 0 {
		t.Fatalf("automator init: %v", r)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.HTTPListen = fmt.Sprintf("127.0.0.1:%d", port), "127.0.0.1:0"
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	before := snapshot(t)
	r := runCLI(bin.automator, "install", "--data-dir", dir, "--name", name)
	t.Cleanup(func() {
		runCLI(bin.automator, "uninstall", "--name", name)
		if t.Failed() {
			log, _ := os.ReadFile("/var/log/" + name + ".log")
			t.Logf("---- service log ----\n%s", log)
		}
	})
	if r.Code != 0 || !strings.Contains(r.Stdout, "serve --data-dir "+dir) {
		t.Fatalf("automator install: %v", r)
	}
	if r := runCLI(bin.automator, "status", "--name", name); r.Code != 0 || !strings.Contains(r.Stdout, "running:        no") {
		t.Fatalf("status after install: %v", r)
	}

	if r := runCLI(bin.automator, "start", "--name", name); r.Code != 0 {
		t.Fatalf("automator start: %v", r)
	}
	var s config.Serving
	waitFor(t, 30*time.Second, "the automator service to serve", func() bool {
		var ok bool
		s, ok, _ = config.ReadServing(dir)
		return ok
	})
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	healthy := func() bool {
		resp, err := client.Get("http://" + s.HTTP + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	waitFor(t, 30*time.Second, "GET /healthz to answer 200", healthy)
	if r := runCLI(bin.automator, "status", "--name", name); r.Code != 0 || !strings.Contains(r.Stdout, "running:        yes") {
		t.Fatalf("status of the started service: %v", r)
	}

	if r := runCLI(bin.automator, "stop", "--name", name); r.Code != 0 {
		t.Fatalf("automator stop: %v", r)
	}
	if healthy() {
		t.Fatal("the automator still answers after stop")
	}
	if r := runCLI(bin.automator, "uninstall", "--name", name); r.Code != 0 {
		t.Fatalf("automator uninstall: %v", r)
	}
	assertNothingLeft(t, name, before, snapshot(t))
	if _, err := os.Stat(filepath.Join(dir, config.FileMasterKey)); err != nil {
		t.Fatalf("uninstall touched the data directory: %v", err)
	}
}
