//go:build linux

package service

import (
	"encoding/binary"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
)

// TestAutomatorServiceInstallStartStopUninstall: `automator serve` as an
// OS service, with the same verbs as the proxy. The data directory is the
// operator's: uninstall leaves it, and nothing else.
func TestAutomatorServiceInstallStartStopUninstall(t *testing.T) {
	// Not parallel: it compares the service directories before and after,
	// where another test's service would show as left behind.
	requireRoot(t)
	w := newWorkDir(t)
	dir := filepath.Join(w.dir, "data")
	initOnLoopback(t, dir)
	name := uniqueName(t)
	before := snapshot(t)
	r := runCLI(bin.automator, "install", "--data-dir", dir, "--name", name)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(serviceLog(name))
			t.Logf("---- service log ----\n%s", log)
		}
		runCLI(bin.automator, "uninstall", "--name", name)
		removeLog(name)
	})
	if r.Code != 0 || !strings.Contains(r.Stdout, "serve --data-dir "+dir) {
		t.Fatalf("automator install: %v", r)
	}
	// It says which database the service opens: automator.yaml's, by its
	// absolute path.
	if want := "\n  database:       " + filepath.Join(dir, "automator.db") + "\n"; !strings.Contains(r.Stdout, want) {
		t.Errorf("automator install: %q; want the line %q", r.Stdout, strings.TrimSpace(want))
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
	// A start of the running service starts nothing, succeeds and says so,
	// as the proxy's does.
	if r := runCLI(bin.automator, "start", "--name", name); r.Code != 0 || r.Stdout != "Service "+name+" is already running: it serves gRPC on "+s.GRPC+", HTTP on "+s.HTTP+".\n" {
		t.Fatalf("automator start of the running service: %v; want exit 0 saying it is already running", r)
	}

	if r := runCLI(bin.automator, "stop", "--name", name); r.Code != 0 {
		t.Fatalf("automator stop: %v", r)
	}
	if healthy() {
		t.Fatal("the automator still answers after stop")
	}
	// A stop of the stopped service succeeds, changes nothing and says so.
	if r := runCLI(bin.automator, "stop", "--name", name); r.Code != 0 || r.Stdout != "Service "+name+" is not running: nothing to stop.\n" {
		t.Fatalf("automator stop of the stopped service: %v; want exit 0 saying it is not running", r)
	}
	r = runCLI(bin.automator, "uninstall", "--name", name)
	if r.Code != 0 {
		t.Fatalf("automator uninstall: %v", r)
	}
	assertLogKept(t, name, r.Stdout)
	assertNothingLeft(t, name, before, snapshot(t))
	if _, err := os.Stat(filepath.Join(dir, config.FileMasterKey)); err != nil {
		t.Fatalf("uninstall touched the data directory: %v", err)
	}
}

// TestAutomatorInstallRefusesAUserWhoCannotReachItsFiles: `automator
// install --user` refuses a data directory or a binary the user cannot
// reach (a parent directory it may not search, such as root's 0700 home),
// naming what is in the way, rather than installing a service that can only
// fail on every start. A directory's access list counts: with one that lets
// the user through, and the files the user's, the service serves as that
// user.
func TestAutomatorInstallRefusesAUserWhoCannotReachItsFiles(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	u := requireNobody(t)
	w := newWorkDir(t)
	private := filepath.Join(w.dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(private, "data")
	initOnLoopback(t, dir)
	if r := runCLI("chown", "-R", "nobody:", dir); r.Code != 0 {
		t.Fatalf("chown: %v", r)
	}
	name := uniqueName(t)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(serviceLog(name))
			t.Logf("---- service log ----\n%s", log)
		}
		runCLI(bin.automator, "uninstall", "--name", name)
		removeLog(name)
	})
	install := func(exe string) result {
		return runCLI(exe, "install", "--data-dir", dir, "--name", name, "--user", "nobody")
	}

	// The data directory's parent: nobody may not search it.
	r := install(bin.automator)
	if r.Code != 255 || !strings.Contains(r.Stderr, "nobody cannot search "+private) {
		t.Fatalf("install with a data directory nobody cannot reach: %v; want exit 255 naming %s", r, private)
	}
	if st := runCLI(bin.automator, "status", "--name", name); st.Code == 0 {
		t.Fatalf("a refused install installed the service: %v", st)
	}
	// An access list that lets nobody through, the mode bits unchanged
	// (where the file system keeps none, the mode bits do it).
	if err := allowSearch(private, u.UID); err != nil {
		t.Logf("no access list on %s (%v): chmod 0711", private, err)
		if err := os.Chmod(private, 0o711); err != nil {
			t.Fatal(err)
		}
	}

	// The binary: in a directory nobody may not search.
	hidden := filepath.Join(w.dir, "hidden")
	if err := os.Mkdir(hidden, 0o700); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(hidden, "automator")
	if r := runCLI("cp", bin.automator, exe); r.Code != 0 {
		t.Fatalf("cp: %v", r)
	}
	r = install(exe)
	if r.Code != 255 || !strings.Contains(r.Stderr, "nobody cannot search "+hidden) || !strings.Contains(r.Stderr, exe) {
		t.Fatalf("install from a binary nobody cannot reach: %v; want exit 255 naming %s", r, hidden)
	}

	// A file of the data directory that is root's.
	key := filepath.Join(dir, config.FileMasterKey)
	if err := os.Chown(key, 0, 0); err != nil {
		t.Fatal(err)
	}
	r = install(bin.automator)
	if r.Code != 255 || !strings.Contains(r.Stderr, "nobody cannot read "+key) {
		t.Fatalf("install with %s root's: %v; want exit 255 naming it", key, r)
	}
	if err := os.Chown(key, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}

	// Reachable: installed, saying as whom, and it serves as nobody.
	if r := install(bin.automator); r.Code != 0 || !strings.Contains(r.Stdout, "\n  user:           nobody\n") {
		t.Fatalf("install with everything reachable by nobody: %v; want exit 0 and a line \"  user:           nobody\"", r)
	}
	if r := runCLI(bin.automator, "start", "--name", name); r.Code != 0 {
		t.Fatalf("automator start: %v", r)
	}
	waitFor(t, 30*time.Second, "the automator service to serve", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	fi, err := os.Stat(filepath.Join(dir, config.FileServing))
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != u.UID {
		t.Errorf("%s written by uid %d, want nobody's (%d)", config.FileServing, uid, u.UID)
	}
	if r := runCLI(bin.automator, "uninstall", "--name", name); r.Code != 0 {
		t.Fatalf("automator uninstall: %v", r)
	}
}

// TestAutomatorStartAndStatusSayWhetherTheServiceServes: a service whose
// serve fails at every start (here a setting refused in automator.yaml) is
// "running" for its service manager, which starts it again and again;
// `automator start` and `status` say that it does not serve, and once it
// does, where.
func TestAutomatorStartAndStatusSayWhetherTheServiceServes(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	w := newWorkDir(t)
	dir := filepath.Join(w.dir, "data")
	initOnLoopback(t, dir)
	good, err := os.ReadFile(filepath.Join(dir, config.FileConfig))
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	r := runCLI(bin.automator, "install", "--data-dir", dir, "--name", name)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(serviceLog(name))
			t.Logf("---- service log ----\n%s", log)
		}
		runCLI(bin.automator, "uninstall", "--name", name)
		removeLog(name)
	})
	if r.Code != 0 {
		t.Fatalf("automator install: %v", r)
	}

	// A typo in automator.yaml after install: serve would refuse it at
	// every start, so start starts nothing and names it (a review: it
	// said "does not serve yet", exit 0).
	if err := os.WriteFile(filepath.Join(dir, config.FileConfig), append(append([]byte(nil), good...), "poll_windw: 5s\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(bin.automator, "start", "--name", name)
	if r.Code == 0 || !strings.Contains(r.Stderr, "service "+name+" was not started") || !strings.Contains(r.Stderr, "poll_windw") {
		t.Fatalf("automator start of a serve whose automator.yaml has a typo: %v; want it refused, naming the setting", r)
	}
	if r := runCLI(bin.automator, "status", "--name", name); r.Code != 0 || !strings.Contains(r.Stdout, "running:        no") {
		t.Fatalf("status after a refused start: %v; want it not running", r)
	}
	// A value serve refuses with its flags only (out of bounds): start
	// starts it, and says that it does not serve.
	if err := os.WriteFile(filepath.Join(dir, config.FileConfig), append(append([]byte(nil), good...), "http_max_connections: -1\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(bin.automator, "start", "--name", name)
	if r.Code != 0 || !strings.Contains(r.Stdout, "does not serve yet") {
		t.Fatalf("automator start of a serve that cannot start: %v; want it to say the service does not serve", r)
	}
	r = runCLI(bin.automator, "status", "--name", name)
	if r.Code != 0 || !strings.Contains(r.Stdout, "running:        yes") || !strings.Contains(r.Stdout, "serving:        no") {
		t.Fatalf("status of a service whose serve cannot start: %v; want running yes, serving no", r)
	}
	if r := runCLI(bin.automator, "stop", "--name", name); r.Code != 0 {
		t.Fatalf("automator stop: %v", r)
	}

	// Mended: start says where it serves, and so does status.
	if err := os.WriteFile(filepath.Join(dir, config.FileConfig), good, 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(bin.automator, "start", "--name", name)
	// start returns once the service serves: serving.yaml names the port
	// the kernel gave it.
	serving, ok, err := config.ReadServing(dir)
	if err != nil || !ok {
		t.Fatalf("serving.yaml once automator start returned (%v): found %v, %v", r, ok, err)
	}
	grpcAddr := serving.GRPC
	if r.Code != 0 || !strings.Contains(r.Stdout, "it serves gRPC on "+grpcAddr) {
		t.Fatalf("automator start: %v; want it to say it serves gRPC on %s", r, grpcAddr)
	}
	r = runCLI(bin.automator, "status", "--name", name)
	if r.Code != 0 || !strings.Contains(r.Stdout, "serving:        yes") || !strings.Contains(r.Stdout, "gRPC on "+grpcAddr) {
		t.Fatalf("status of a serving service: %v", r)
	}
	if r := runCLI(bin.automator, "uninstall", "--name", name); r.Code != 0 {
		t.Fatalf("automator uninstall: %v", r)
	}
}

// allowSearch gives the directory dir a POSIX access list that lets uid
// search it: the kernel's xattr form of `setfacl -m u:UID:x dir`.
func allowSearch(dir string, uid int) error {
	entry := func(tag, perm uint16, id uint32) []byte {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint16(b, tag)
		binary.LittleEndian.PutUint16(b[2:], perm)
		binary.LittleEndian.PutUint32(b[4:], id)
		return b
	}
	const undefined = ^uint32(0)
	acl := binary.LittleEndian.AppendUint32(nil, 2)   // version
	acl = append(acl, entry(0x01, 7, undefined)...)   // owner: rwx
	acl = append(acl, entry(0x02, 1, uint32(uid))...) // the user: x
	acl = append(acl, entry(0x04, 0, undefined)...)   // group: none
	acl = append(acl, entry(0x10, 1, undefined)...)   // mask: x
	acl = append(acl, entry(0x20, 0, undefined)...)   // others: none
	return syscall.Setxattr(dir, "system.posix_acl_access", acl, 0)
}

// initOnLoopback runs `automator init` on data directory dir and has it
// serve gRPC and HTTP on loopback ports of the kernel's choosing (port 0),
// which serving.yaml then names: no port is picked ahead, for another
// process to take before the service binds it. The public URL names a port
// nothing serves; these tests make no profile.
func initOnLoopback(t *testing.T, dir string) {
	t.Helper()
	if r := runCLI(bin.automator, "init", "--data-dir", dir, "--public-url", "https://127.0.0.1:1"); r.Code != 0 {
		t.Fatalf("automator init: %v", r)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
}
