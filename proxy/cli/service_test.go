//go:build !windows

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/proxy/agent"
	"github.com/opsgate/opsgate/proxy/config"
	"github.com/opsgate/opsgate/proxy/service"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenCheck compares got with testdata/name, or rewrites it with -update.
func goldenCheck(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s changed (rerun with -update if that is intended):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// goldenConfig is the config of the golden units: defaults, so a 30 s grace
// period.
func goldenConfig() config.Config {
	c := config.Config{AutomatorURL: "https://automator.example:8443"}
	c.ApplyDefaults()
	return c
}

// TestInstallWritesTheGoldenSystemdUnit: the unit `proxy install` writes on
// a systemd host, rendered from the spec install builds, without
// installing. Any change to it shows here.
func TestInstallWritesTheGoldenSystemdUnit(t *testing.T) {
	t.Parallel()
	configPath := filepath.Join(service.ConfigDir("proxy"), configFileName)
	if configPath != "/etc/proxy/proxy.yaml" {
		t.Fatalf("the service's config is %s, want /etc/proxy/proxy.yaml", configPath)
	}
	spec := installSpec("proxy", "/usr/local/bin/proxy", configPath, goldenConfig(), nil, false)
	goldenCheck(t, "proxy.service", service.SystemdUnit(spec))
	if got := goldenConfig().GracePeriod + stopMargin; !strings.Contains(service.SystemdUnit(spec), "\nTimeoutStopSec=60\n") || got != time.Minute {
		t.Errorf("TimeoutStopSec must cover the 30s grace period plus %v", stopMargin)
	}

	u := &service.User{Name: "opsgate-proxy", Group: "opsgate-proxy"}
	spec = installSpec("proxy-acme", "/usr/local/bin/proxy", "/etc/proxy-acme/proxy.yaml", goldenConfig(), u, true)
	goldenCheck(t, "proxy-acme-user.service", service.SystemdUnit(spec))
}

// TestInstallWritesTheGoldenSysVScript: the init script of a host without
// systemd.
func TestInstallWritesTheGoldenSysVScript(t *testing.T) {
	t.Parallel()
	spec := installSpec("proxy", "/usr/local/bin/proxy", "/etc/proxy/proxy.yaml", goldenConfig(), nil, false)
	goldenCheck(t, "proxy.init", service.SysVScript(spec))
}

// TestDeployedExampleUnitIsWhatInstallWrites: deploy/systemd/proxy.service,
// for those who manage units themselves, is the golden unit with its own
// comments.
func TestDeployedExampleUnitIsWhatInstallWrites(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "proxy.service"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "proxy.service"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := withoutComments(example), withoutComments(golden); a != b {
		t.Errorf("deploy/systemd/proxy.service differs from what install writes (testdata/proxy.service):\n--- example ---\n%s\n--- install ---\n%s", a, b)
	}
}

func withoutComments(data []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// TestInstalledConfigAddsStateDir: the service's copy of the config is the
// operator's file, byte for byte, plus state_dir.
func TestInstalledConfigAddsStateDir(t *testing.T) {
	t.Parallel()
	orig := []byte("automator_url: https://a:1 # the automator\ntoken: t\nkey: k")
	got := installedConfig(orig, "proxy", true, "/var/lib/proxy")
	if !bytes.HasPrefix(got, orig) {
		t.Fatalf("the copy does not start with the original:\n%s", got)
	}
	c, err := config.Parse(got)
	if err != nil || c.StateDir != "/var/lib/proxy" || c.Token != "t" {
		t.Fatalf("the copy reads as %+v, %v", c, err)
	}
	if !bytes.Contains(got, []byte(installMark("proxy"))) {
		t.Fatalf("the copy lacks the mark uninstall looks for:\n%s", got)
	}
	win := installedConfig([]byte("token: t\n"), "proxy", true, `C:\ProgramData\it's\state`)
	if c, err := config.Parse(win); err != nil || c.StateDir != `C:\ProgramData\it's\state` {
		t.Fatalf("a Windows path reads as %q, %v:\n%s", c.StateDir, err, win)
	}
	if got := installedConfig(orig, "proxy", false, "/x"); bytes.Contains(got, []byte("state_dir")) || !bytes.HasPrefix(got, orig) {
		t.Fatalf("a config that sets state_dir got another:\n%s", got)
	}
}

// TestInstalledConfigOfTheServicesOwnCopyHasOneMark: upgrade-proxy.md
// installs the service again from a copy of its config, which holds
// install's mark and state_dir already. The new copy is the same file, with
// one mark, not a second one under the first; a copy of another service's
// config (its state_dir line removed, as install asks) gets its mark named
// for the new service, in its place.
func TestInstalledConfigOfTheServicesOwnCopyHasOneMark(t *testing.T) {
	t.Parallel()
	for _, orig := range []string{"token: t\nkey: k\n", "token: t\r\nkey: k\r\n---\n"} {
		first := installedConfig([]byte(orig), "proxy", true, "/var/lib/proxy")
		again := installedConfig(first, "proxy", false, "/var/lib/proxy")
		if !bytes.Equal(again, first) {
			t.Errorf("installed again from its copy of %q:\n%s\nwant the copy unchanged:\n%s", orig, again, first)
		}
		if n := bytes.Count(again, []byte(installMarkPrefix)); n != 1 {
			t.Errorf("installed again from its copy of %q: %d marks, want 1:\n%s", orig, n, again)
		}
	}

	acme := installedConfig([]byte("token: t\nkey: k\n"), "proxy-acme", true, "/var/lib/proxy-acme")
	other := bytes.ReplaceAll(acme, []byte("state_dir: '/var/lib/proxy-acme'\n"), nil)
	got := installedConfig(other, "proxy-b", true, "/var/lib/proxy-b")
	if n := bytes.Count(got, []byte(installMarkPrefix)); n != 1 || !bytes.Contains(got, []byte(installMark("proxy-b"))) {
		t.Errorf("a copy of service proxy-acme's config installed as proxy-b has %d marks, want one, proxy-b's:\n%s", n, got)
	}
	if c, err := config.Parse(got); err != nil || c.StateDir != "/var/lib/proxy-b" {
		t.Errorf("it reads as %+v, %v", c, err)
	}
}

// TestInstallRefusesWhatAServiceCannotUse: checked before anything is
// written, so these need no root.
func TestInstallRefusesWhatAServiceCannotUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	profile := "automator_url: http://127.0.0.1:1\ntoken: t\nkey: " + testKey(t) + "\n"
	for _, tc := range []struct {
		name, extra string
		args        []string
		want        string
	}{
		// It is found (beside the file), but the service reads a copy
		// elsewhere; the message gives the path to write.
		{"relative scripts_dir", "scripts_dir: scripts\n", nil, `"scripts" must be an absolute path for a service (install copies the config elsewhere: give ` + filepath.Join(dir, "scripts") + ")"},
		// Not run's words, which name a --scripts-dir install does not
		// take (a review).
		{"no scripts_dir", "", nil, "scripts_dir: required: a service runs the scripts of the absolute scripts_dir in its config (install takes no --scripts-dir)"},
		{"foreign state_dir", "scripts_dir: " + dir + "\nstate_dir: /srv/state\n", nil, "install sets it to"},
		{"bad name", "scripts_dir: " + dir + "\n", []string{"--name", "../etc"}, "--name"},
		{"unknown user", "scripts_dir: " + dir + "\n", []string{"--user", "no-such-user-opsgate"}, "--user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "p.yaml")
			if err := os.WriteFile(path, []byte(profile+tc.extra), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), append([]string{"install", "--config", path}, tc.args...), Env{Stdout: &stdout, Stderr: &stderr})
			if code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// TestUninstallLeavesAFileThatIsNoLeftover: without a service of that name,
// uninstall removes a config only if install's mark says it copied it.
func TestUninstallLeavesAFileThatIsNoLeftover(t *testing.T) {
	// Not parallel: it writes under /etc and /var/lib, at paths named
	// after a fixed service name.
	if os.Geteuid() != 0 {
		t.Skip("writes under /etc: needs root")
	}
	name := "opsgate-test-notinstalled"
	dir := service.ConfigDir(name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	foreign := filepath.Join(dir, configFileName)
	if err := os.WriteFile(foreign, []byte("someone: else\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr}); code != 1 {
		t.Fatalf("uninstall of a service never installed: exit %d", code)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("uninstall removed a file install did not make: %v", err)
	}
	if err := os.WriteFile(foreign, installedConfig([]byte("token: t\n"), name, true, service.StateDir(name)), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr}); code != 0 {
		t.Fatalf("uninstall of a leftover: exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the leftover is still there: %v\n%s", err, stdout.String())
	}
}

// TestUninstallSaysWhenResultsWaitInTheSpool: results not yet posted are
// left in place, and uninstall says what they are.
func TestUninstallSaysWhenResultsWaitInTheSpool(t *testing.T) {
	// Not parallel: it writes under /etc and /var/lib, at paths named
	// after a fixed service name.
	name := "opsgate-test-spooled"
	dir, spool := installedWithSpool(t, name)
	result := filepath.Join(spool, "w_1.json")
	if err := os.WriteFile(result, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
	if code != 1 || !strings.Contains(stderr.String(), spool+" (results of units this proxy ran that the automator has not accepted yet: 1;") ||
		strings.Contains(stderr.String(), "did not make") {
		t.Fatalf("exit %d, stderr %q; want 1 and the spool named as results not yet posted", code, stderr.String())
	}
	if _, err := os.Stat(result); err != nil {
		t.Fatalf("uninstall removed a result not yet posted: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the config copy is still there: %v", err)
	}
}

// TestUninstallSaysWhenLostPollsWaitInTheSpool: the record of polls whose
// answers a stopped proxy never read, and could not report, is left in
// place like a result, and uninstall says what it is (not a result).
func TestUninstallSaysWhenLostPollsWaitInTheSpool(t *testing.T) {
	// Not parallel: it writes under /etc and /var/lib, at paths named
	// after a fixed service name.
	name := "opsgate-test-lostpolls"
	_, spool := installedWithSpool(t, name)
	lost := filepath.Join(spool, agent.LostPollsName)
	if err := os.WriteFile(lost, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
	if code != 1 || !strings.Contains(stderr.String(), spool+" (polls whose answers this proxy never read") ||
		strings.Contains(stderr.String(), "results of units") {
		t.Fatalf("exit %d, stderr %q; want 1 and the spool named as holding lost polls not yet reported, not results", code, stderr.String())
	}
	if _, err := os.Stat(lost); err != nil {
		t.Fatalf("uninstall removed the lost polls not yet reported: %v", err)
	}
}

// TestUninstallNamesSetAsideSpoolFilesForWhatTheyAre: a record the proxy
// could not read and set aside (a result's *.json.bad, lost-polls.bad) will
// never be posted or reported: uninstall leaves it, naming it as set
// aside, not counting it among the results that a start posts, nor as lost
// polls; a write interrupted before its rename (.tmp-*), which the proxy
// removes at its next start, is removed.
func TestUninstallNamesSetAsideSpoolFilesForWhatTheyAre(t *testing.T) {
	// Not parallel: it writes under /etc and /var/lib, at paths named
	// after a fixed service name.
	name := "opsgate-test-setaside"
	_, spool := installedWithSpool(t, name)
	result := filepath.Join(spool, "w_1.json")
	badResult := filepath.Join(spool, "w_2.json.bad")
	badLost := filepath.Join(spool, agent.LostPollsName+".bad")
	interrupted := filepath.Join(spool, ".tmp-123")
	for _, f := range []string{result, badResult, badLost, interrupted} {
		if err := os.WriteFile(f, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
	msg := stderr.String()
	if code != 1 || !strings.Contains(msg, spool+" (results of units this proxy ran that the automator has not accepted yet: 1;") ||
		!strings.Contains(msg, badLost+", "+badResult+" (set aside as not decoding") || !strings.Contains(msg, "will neither post nor report") ||
		strings.Contains(msg, "polls whose answers") {
		t.Fatalf("exit %d, stderr %q; want 1, the one result to post, and the two files set aside named as such", code, msg)
	}
	for _, f := range []string{result, badResult, badLost} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("uninstall removed %s: %v", f, err)
		}
	}
	if _, err := os.Stat(interrupted); !os.IsNotExist(err) {
		t.Errorf("the interrupted write %s is still there: %v", interrupted, err)
	}
	if !strings.Contains(stdout.String(), interrupted) {
		t.Errorf("stdout %q does not list %s as removed", stdout.String(), interrupted)
	}
}

// TestUninstallDoesNotReachThroughASpoolThatIsALink: a --user service's
// state directory is its user's (and its scripts') to write, so its spool
// may be a link planted to lead elsewhere; uninstall, run as root, removes
// the link and touches nothing where it leads: neither a write interrupted
// before its rename (.tmp-*), which it removes from a real spool, nor a
// result, which it does not count as the service's either.
func TestUninstallDoesNotReachThroughASpoolThatIsALink(t *testing.T) {
	// Not parallel: it writes under /etc and /var/lib, at paths named
	// after a fixed service name.
	name := "opsgate-test-linkedspool"
	_, spool := installedWithSpool(t, name)
	elsewhere := t.TempDir()
	tmp, result := filepath.Join(elsewhere, ".tmp-keep"), filepath.Join(elsewhere, "w_1.json")
	for _, f := range []string{tmp, result} {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(spool); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, spool); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
	for _, f := range []string{tmp, result} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("uninstall reached through the spool's link to %s: %v", f, err)
		}
	}
	if strings.Contains(stderr.String(), "results of units") {
		t.Errorf("exit %d, stderr %q: uninstall counted a file where the spool's link leads as the service's result", code, stderr.String())
	}
	if _, err := os.Lstat(spool); !os.IsNotExist(err) {
		t.Errorf("the spool's link is still there: %v", err)
	}
}

func TestServiceVerbsNeedAnInstalledService(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"start", "stop", "status", "uninstall"} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), []string{verb, "--name", "opsgate-never-installed"}, Env{Stdout: &stdout, Stderr: &stderr})
		if code != 1 || !strings.Contains(stderr.String(), "not installed") {
			t.Errorf("%s: exit %d, stderr %q; want 1, not installed", verb, code, stderr.String())
		}
	}
}

func testKey(t *testing.T) string {
	t.Helper()
	k, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	return k.String()
}

// TestUninstallLeavesTheStateDirOfARunningProxy: a proxy still running on
// the service's state directory (started by hand on its config) holds it;
// uninstall removes nothing of it, nor the config copy, and says which
// process holds it. Once that proxy is gone, uninstall run again removes
// the rest, the lock file too.
func TestUninstallLeavesTheStateDirOfARunningProxy(t *testing.T) {
	// Not parallel: it sets uninstallLockWait, and writes under /etc and
	// /var/lib at paths named after a fixed service name.
	if os.Geteuid() != 0 {
		t.Skip("writes under /etc: needs root")
	}
	wait := uninstallLockWait
	uninstallLockWait = 0 // the holder below does not go by itself
	t.Cleanup(func() { uninstallLockWait = wait })
	name := "opsgate-test-held"
	dir, state := service.ConfigDir(name), service.StateDir(name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(state) })
	cfgCopy := filepath.Join(dir, configFileName)
	if err := os.WriteFile(cfgCopy, installedConfig([]byte("token: t\n"), name, true, state), 0o600); err != nil {
		t.Fatal(err)
	}
	lock, err := agent.LockStateDir(state) // the running proxy's hold
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Release() })
	statusFile := filepath.Join(state, agent.StateFileName)
	if err := os.WriteFile(statusFile, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
	want := fmt.Sprintf("%s and %s (a running proxy, pid %d, holds it: stop it, then uninstall again)", state, cfgCopy, os.Getpid())
	if code != 1 || !strings.Contains(stderr.String(), want) {
		t.Fatalf("uninstall with the state directory held: exit %d, stderr %q; want 1, saying %q", code, stderr.String(), want)
	}
	for _, p := range []string{statusFile, filepath.Join(state, agent.LockFileName), cfgCopy} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("uninstall removed %s while a proxy holds the state directory: %v", p, err)
		}
	}

	lock.Release()
	stdout.Reset()
	stderr.Reset()
	if code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr}); code != 0 {
		t.Fatalf("uninstall once the proxy is gone: exit %d: %s", code, stderr.String())
	}
	for _, p := range []string{state, dir} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v\n%s", p, err, stdout.String())
		}
	}
}

// TestInstallRefusesScriptsOrBinaryInATemporaryDirectory: a service whose
// scripts_dir or binary is under /tmp (hidden by systemd's PrivateTmp,
// emptied at reboot) would fail at every start; install refuses it, naming
// the path, before anything is written.
func TestInstallRefusesScriptsOrBinaryInATemporaryDirectory(t *testing.T) {
	// Not parallel: it may install, and uninstalls, a service of a fixed
	// name.
	profile := "automator_url: http://127.0.0.1:1\ntoken: t\nkey: " + testKey(t) + "\n"
	t.Cleanup(func() { // run as root, an install this test expects refused would be real
		if st, _ := service.Query("opsgate-test-tmp"); st.Installed {
			t.Error("the service was installed")
			Main(context.Background(), []string{"uninstall", "--name", "opsgate-test-tmp"}, Env{Stdout: io.Discard, Stderr: io.Discard})
		}
	})
	install := func(scriptsDir string) (int, string) {
		path := filepath.Join(t.TempDir(), "p.yaml")
		if err := os.WriteFile(path, []byte(profile+"scripts_dir: "+scriptsDir+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), []string{"install", "--config", path, "--name", "opsgate-test-tmp"}, Env{Stdout: &stdout, Stderr: &stderr})
		return code, stderr.String()
	}
	scripts := t.TempDir()
	if code, stderr := install(scripts); code != 1 || !strings.Contains(stderr, "scripts_dir in ") || !strings.Contains(stderr, scripts+" is under the temporary directory") {
		t.Errorf("scripts_dir under a temporary directory: exit %d, stderr %q; want 1 and the path refused", code, stderr)
	} else if !strings.Contains(stderr, "; move it under /srv or /opt\n") || strings.Contains(stderr, "/usr/local/bin") {
		t.Errorf("scripts_dir under a temporary directory: %q; want it told where scripts belong, not where a binary does", stderr)
	}

	exe, _ := os.Executable()
	if service.CheckNotTemporary(service.Binary, "", exe) == nil {
		t.Skipf("this test binary %s is not under a temporary directory", exe)
	}
	// A scripts_dir under no temporary directory wherever the checkout is
	// (a clone under /tmp, say), so that only the binary is refused.
	if code, stderr := install("/usr"); code != 1 || !strings.Contains(stderr, "the binary "+exe+" is under the temporary directory") {
		t.Errorf("a binary under a temporary directory: exit %d, stderr %q; want 1 and the binary refused", code, stderr)
	}
}

// TestInstalledConfigOfAFileEndingInAnEmptyDocument: a config ending in
// "---" (accepted: an empty second document) gets state_dir and the mark in
// its first document, where they are read, not after the "---", where
// they would be a second document with settings, refused.
func TestInstalledConfigOfAFileEndingInAnEmptyDocument(t *testing.T) {
	t.Parallel()
	for _, orig := range []string{
		"token: t\nkey: k\n---\n",
		"token: t\nkey: k\n# end\n---\n# nothing more\n\n",
		"---\ntoken: t\nkey: k\n---",
		"token: t\nca_cert: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n---\n",
	} {
		got := installedConfig([]byte(orig), "proxy", true, "/var/lib/proxy")
		c, err := config.Parse(got)
		if err != nil || c.StateDir != "/var/lib/proxy" || c.Token != "t" {
			t.Errorf("the copy of %q reads as %+v, %v:\n%s", orig, c, err, got)
		}
		if !bytes.Contains(got, []byte(installMark("proxy"))) {
			t.Errorf("the copy of %q lacks the mark:\n%s", orig, got)
		}
	}
}

// TestInstallCopiesAProfileSavedByPowerShellAsUTF8: `proxy install` reads
// the config (readConfigText) and writes the service's copy with its own
// lines added (installedConfig). A profile saved by Windows PowerShell 5's
// `>` is UTF-16 with a byte-order mark and CRLF: the copy is UTF-8 and
// reads back with the profile's settings and the state_dir install added,
// where UTF-8 lines appended to UTF-16 made a file that read as neither.
func TestInstallCopiesAProfileSavedByPowerShellAsUTF8(t *testing.T) {
	t.Parallel()
	k, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	profile := "automator_url: https://automator.example:8443\r\ntoken: oat_t\r\nkey: " + k.String() + "\r\nscripts_dir: /opt/scripts\r\n"
	data := []byte{0xFF, 0xFE}
	for _, r := range profile { // ASCII: one UTF-16 unit each
		data = append(data, byte(r), 0)
	}
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	text, err := readConfigText(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(installedConfig(text, "proxy", true, "/var/lib/proxy"))
	if err != nil || c.Token != "oat_t" || c.Key != k.String() || c.ScriptsDir != "/opt/scripts" || c.StateDir != "/var/lib/proxy" {
		t.Errorf("the service's copy of a UTF-16 profile: token %q, scripts_dir %q, state_dir %q, key matches %v, %v; want the profile's settings and state_dir /var/lib/proxy",
			c.Token, c.ScriptsDir, c.StateDir, c.Key == k.String(), err)
	}
}

// installedWithSpool makes, as install would, the config directory of
// service name with an installed config whose state_dir holds an empty
// spool, removed when the test ends; it skips the test unless run as root.
// It returns the config directory and the spool.
func installedWithSpool(t *testing.T, name string) (dir, spool string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("writes under /etc: needs root")
	}
	dir, state := service.ConfigDir(name), service.StateDir(name)
	spool = filepath.Join(state, agent.SpoolDirName)
	if err := os.MkdirAll(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(state) })
	if err := os.WriteFile(filepath.Join(dir, configFileName), installedConfig([]byte("token: t\n"), name, true, state), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, spool
}

// TestProxyCommandsLeaveAnAutomatorsServiceAlone: `proxy stop`, `start`,
// `status` and `uninstall` of a service that runs an automator (both
// install theirs through the same service manager) refuse it, saying whose
// it is, and leave it installed. Before, `proxy uninstall --name` of an
// automator's service removed it. Needs root.
func TestProxyCommandsLeaveAnAutomatorsServiceAlone(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("installing an OS service needs root")
	}
	name := "opsgate-test-automators"
	spec := service.Spec{Name: name, Description: "opsgate test", Executable: "/bin/sleep", Arguments: []string{service.Flag, name, "serve", "--data-dir", "/var/lib/" + name}, ManualStart: true}
	if err := service.Install(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = service.Uninstall(name) })
	for _, verb := range []string{"stop", "start", "status", "uninstall"} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), []string{verb, "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
		if code != 1 || !strings.Contains(stderr.String(), "is an automator's (it runs `serve`), not a proxy's") {
			t.Errorf("proxy %s of an automator's service: exit %d, stderr %q; want 1, saying whose it is", verb, code, stderr.String())
		}
	}
	if st, err := service.Query(name); err != nil || !st.Installed || st.Runs != "serve" || st.Running {
		t.Errorf("the automator's service afterwards: %+v, %v; want it installed, not started", st, err)
	}
}

// TestInstallRefusesAStateDirThatIsNotAProxys: /var/lib/NAME there
// already, holding another program's files, was taken for the service's
// state_dir: the service overwrote its status.json and proxy.lock, and
// uninstall deleted them and the directory. Install refuses it, naming
// what is not a proxy's, and changes nothing; a state directory a proxy
// left (its status file, lock and spool) is still taken, as after an
// uninstall that kept results waiting in the spool.
func TestInstallRefusesAStateDirThatIsNotAProxys(t *testing.T) {
	// Not parallel: it writes under /var/lib at a fixed service name.
	if os.Geteuid() != 0 {
		t.Skip("writes under /var/lib: needs root")
	}
	name := "opsgate-test-foreignstate"
	state, cfgDir := service.StateDir(name), service.ConfigDir(name)
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state); os.RemoveAll(cfgDir) })
	files := map[string]string{
		agent.StateFileName: `{"app":"another program's state"}` + "\n",
		agent.LockFileName:  "another program's lock\n",
		"notes.txt":         "theirs\n",
	}
	for n, data := range files {
		if err := os.WriteFile(filepath.Join(state, n), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scripts := t.TempDir()
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("automator_url: http://127.0.0.1:1\ntoken: t\nkey: "+testKey(t)+"\nscripts_dir: "+scripts+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"install", "--config", path, "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
	want := state + " exists and holds what a proxy's state directory does not: notes.txt, status.json (not a proxy's)"
	if code != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("install over another program's %s: exit %d, stderr %q; want 1 saying %q", state, code, stderr.String(), want)
	}
	for n, data := range files {
		if got, err := os.ReadFile(filepath.Join(state, n)); err != nil || string(got) != data {
			t.Errorf("%s afterwards: %q, %v; want it untouched", n, got, err)
		}
	}
	if _, err := os.Stat(cfgDir); !os.IsNotExist(err) {
		t.Errorf("the refused install made %s: %v", cfgDir, err)
	}
	if st, err := service.Query(name); err != nil || st.Installed {
		t.Errorf("the refused install installed the service: %+v, %v", st, err)
	}

	// What a proxy leaves there is its own.
	os.Remove(filepath.Join(state, "notes.txt"))
	s := agent.State{InstanceID: "host-a", PID: 1, StartedAt: time.Now()}
	data, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(state, agent.StateFileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(state, agent.SpoolDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := stateDirOfAProxy(state); err != nil {
		t.Errorf("a state directory a proxy left: %v; want it taken", err)
	}
}

// TestUninstallLeavesTheLinksItFoundInPlaceOfItsDirectories: /etc/NAME or
// /var/lib/NAME as a link the operator made (to a directory on another
// volume) is theirs: uninstall removes what install and the proxy put in
// the directories, not the links, and says it left them. It used to
// remove both links (os.Remove unlinks a link to a directory).
func TestUninstallLeavesTheLinksItFoundInPlaceOfItsDirectories(t *testing.T) {
	// Not parallel: it writes under /etc and /var/lib at a fixed name.
	if os.Geteuid() != 0 {
		t.Skip("writes under /etc: needs root")
	}
	name := "opsgate-test-linkeddirs"
	cfgDir, state := service.ConfigDir(name), service.StateDir(name)
	cfgTarget, stateTarget := t.TempDir(), t.TempDir()
	for link, target := range map[string]string{cfgDir: cfgTarget, state: stateTarget} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(link) })
	}
	if err := os.WriteFile(filepath.Join(cfgDir, configFileName), installedConfig([]byte("token: t\n"), name, true, state), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"uninstall", "--name", name}, Env{Stdout: &stdout, Stderr: &stderr})
	for _, link := range []string{cfgDir, state} {
		if !strings.Contains(stderr.String(), link+" (a symbolic link, which `proxy install` did not make)") {
			t.Errorf("uninstall's stderr %q does not say it left %s", stderr.String(), link)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s after uninstall: %v; want the link left", link, err)
		}
	}
	if code != 1 {
		t.Errorf("uninstall: exit %d, want 1 (something left behind)", code)
	}
	if _, err := os.Stat(filepath.Join(cfgTarget, configFileName)); !os.IsNotExist(err) {
		t.Errorf("the config copy is still there: %v", err)
	}
}
