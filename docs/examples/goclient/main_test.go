//go:build linux

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/automatortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGoExample runs the documented Go example against a real automator
// and proxy: a result, a failure and an unknown account.
func TestGoExample(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	scripts, err := filepath.Abs("../../../deploy/scripts")
	if err != nil {
		t.Fatal(err)
	}
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "docs-go", ScriptsDir: scripts}).WaitPolling(t)
	env := map[string]string{"AUTOMATOR_GRPC": a.URL(), "AUTOMATOR_API_KEY": a.APIKey, "AUTOMATOR_CA": a.CAFile}
	getenv := func(k string) string { return env[k] }
	exec := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, getenv, &out, &errb)
		return code, out.String(), errb.String()
	}

	if code, out, errs := exec("hello.sh", "gopher"); code != 0 || !strings.HasPrefix(out, "hello gopher from instance docs-go") || !strings.Contains(errs, "ran on instance docs-go") {
		t.Errorf("hello.sh: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := exec("exit-code.sh", "7"); code != 7 || !strings.Contains(errs, "exiting with 7") {
		t.Errorf("exit-code.sh 7: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := exec("not-deployed.sh"); code != 125 || !strings.Contains(errs, "failed") {
		t.Errorf("not-deployed.sh: exit %d, stderr %q; want 125", code, errs)
	}
	env["ACCOUNT"] = "nobody"
	if code, _, errs := exec("hello.sh"); code != 255 || !strings.Contains(errs, "NotFound") {
		t.Errorf("unknown account: exit %d, stderr %q; want 255", code, errs)
	}
}
