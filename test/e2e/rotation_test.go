//go:build linux

package e2e

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver, to read and alter the database

	"github.com/opsgate/opsgate/automator/config"
)

// openDB opens the automator's SQLite file beside the running automator.
func openDB(t *testing.T, a *automator) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(a.DataDir, config.FileDB)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// queued counts the queued units.
func queued(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM work WHERE state = 'queued'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rotate runs `automator account rotate-token|rotate-key` and writes the
// profile it prints to a file.
func (a *automator) rotate(t *testing.T, what, account, overlap string) string {
	t.Helper()
	r := runCLI(bin.automator, "account", what, account, "--data-dir", a.DataDir, "--overlap", overlap)
	if r.Code != 0 {
		t.Fatalf("automator account %s %s: %v", what, account, r)
	}
	path := filepath.Join(t.TempDir(), account+"-"+what+".yaml")
	if err := os.WriteFile(path, []byte(r.Stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRotateKeyWithoutDowntime: after `account rotate-key`, the unit that
// was running (sealed with the old key) completes; the unit that was queued
// runs on a proxy of the new profile; new units are sealed with the new key
// at rest and run both on a proxy still on the old profile and on one on
// the new profile.
func TestRotateKeyWithoutDowntime(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	oldProfile := a.createAccount(t, "acme")
	scripts, tmp := t.TempDir(), t.TempDir()
	gate, started := filepath.Join(tmp, "gate"), filepath.Join(tmp, "started")
	writeScript(t, scripts, "wait.sh", `touch "$1"; while [ ! -e "$2" ] && [ -d "${2%/*}" ]; do sleep 0.05; done; echo released`)
	writeScript(t, scripts, "hello.sh", `echo "hello $1"`)
	db := openDB(t, a)

	old := startProxy(t, withSettings(t, oldProfile, "max_concurrency: 1"), scripts, "old")
	old.WaitPolling(t)
	running := a.StartExec(t, "--account", "acme", "--timeout", "60s", "wait.sh", started, gate)
	waitFor(t, 15*time.Second, "the old-profile proxy to run wait.sh", func() bool { return exists(started) })
	waiting := a.StartExec(t, "--account", "acme", "--timeout", "60s", "hello.sh", "queued-before")
	waitFor(t, 15*time.Second, "a unit to be queued behind the running one", func() bool { return queued(t, db) == 1 })

	newProfile := a.rotate(t, "rotate-key", "acme", "1h")
	if k := profileValue(t, newProfile, "key"); !strings.HasPrefix(k, "2:") {
		t.Fatalf("rotate-key printed key %q…, want key id 2", k[:2])
	}
	if data, _ := os.ReadFile(newProfile); !strings.Contains(string(data), "previous_keys:\n  - "+profileValue(t, oldProfile, "key")) {
		t.Fatalf("the new profile does not carry the old key in previous_keys:\n%s", data)
	}
	if profileValue(t, newProfile, "token") == profileValue(t, oldProfile, "token") {
		t.Fatalf("rotate-key printed the old token")
	}

	// The queued unit (sealed with key 1) runs on a proxy of the new profile.
	fresh := startProxy(t, newProfile, scripts, "new")
	if r := waiting.Wait(t, 30*time.Second); r.Code != 0 || r.Stdout != "hello queued-before\n" {
		t.Fatalf("unit queued before rotate-key: %v", r)
	}
	// The running unit (sealed with key 1) completes after the rotation.
	writeFile(t, gate, "")
	if r := running.Wait(t, 30*time.Second); r.Code != 0 || r.Stdout != "released\n" {
		t.Fatalf("unit running during rotate-key: %v", r)
	}

	// New units are sealed with key 2, and the old-profile proxy runs them.
	if fresh.Stop(t, 30*time.Second) != 0 {
		t.Fatalf("the new-profile proxy did not stop cleanly")
	}
	if r := a.Exec("--account", "acme", "--timeout", "30s", "hello.sh", "old-profile"); r.Code != 0 || r.Stdout != "hello old-profile\n" {
		t.Fatalf("a new unit on the old-profile proxy during the overlap: %v", r)
	}
	var keyID int
	if err := db.QueryRow(`SELECT key_id FROM work ORDER BY queued_at DESC LIMIT 1`).Scan(&keyID); err != nil || keyID != 2 {
		t.Fatalf("the newest unit is stored with key id %d (%v), want 2", keyID, err)
	}
	old.Stop(t, 30*time.Second)
	startProxy(t, newProfile, scripts, "new-2").WaitPolling(t)
	if r := a.Exec("--account", "acme", "--timeout", "30s", "hello.sh", "new-profile"); r.Code != 0 || r.Stdout != "hello new-profile\n" {
		t.Fatalf("a new unit on the new-profile proxy: %v", r)
	}
}

// TestRotateTokenKeepsTheOldTokenForTheOverlapThenRefusesIt: with
// `account rotate-token --overlap`, a proxy on the old profile keeps
// serving until the window ends and is refused from then on ("expired"),
// while a proxy on the new profile serves the account throughout.
func TestRotateTokenKeepsTheOldTokenForTheOverlapThenRefusesIt(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	oldProfile := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "who.sh", `echo "$PROXY_INSTANCE_ID"`)
	old := startProxy(t, oldProfile, scripts, "old")
	old.WaitPolling(t)

	const overlap = 3 * time.Second
	rotated := time.Now()
	newProfile := a.rotate(t, "rotate-token", "acme", overlap.String())
	if profileValue(t, newProfile, "key") != profileValue(t, oldProfile, "key") {
		t.Fatalf("rotate-token changed the key")
	}
	// Inside the window the old-profile proxy still serves the account.
	if r := a.Exec("--account", "acme", "--timeout", "20s", "who.sh"); r.Code != 0 || r.Stdout != "old\n" {
		t.Fatalf("exec inside the overlap window, old-profile proxy only: %v", r)
	}
	startProxy(t, newProfile, scripts, "new").WaitPolling(t)
	// After it, the old token is refused, saying why, and the new proxy serves.
	waitFor(t, overlap+20*time.Second, "the old token to be refused as expired", func() bool {
		return strings.Contains(a.Log(), "account token expired")
	})
	if el := time.Since(rotated); el < overlap {
		t.Fatalf("the old token was refused %v after the rotation, before the %v overlap ended", el, overlap)
	}
	for range 3 {
		if r := a.Exec("--account", "acme", "--timeout", "20s", "who.sh"); r.Code != 0 || r.Stdout != "new\n" {
			t.Fatalf("exec after the overlap: %v; want it run by the new-profile proxy", r)
		}
	}
	if old.Exited() {
		t.Fatalf("the refused proxy exited; it should keep retrying (its operator installs the new profile)")
	}
}

// TestAPIKeyScopesAndRevokeFromTheCLI: `apikey create` needs a scope; a key
// scoped to acme executes there and gets PermissionDenied on globex; a
// revoked key is refused by the running automator on its very next call.
func TestAPIKeyScopesAndRevokeFromTheCLI(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	acme := a.createAccount(t, "acme")
	a.createAccount(t, "globex")
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo hello`)
	startProxy(t, acme, scripts, "a").WaitPolling(t)

	if r := runCLI(bin.automator, "apikey", "create", "ci", "--data-dir", a.DataDir); r.Code != 255 || !strings.Contains(r.Stderr, "--accounts") {
		t.Fatalf("apikey create without a scope: %v; want exit 255 asking for --accounts", r)
	}
	if r := runCLI(bin.automator, "apikey", "create", "ci", "--accounts", "nobody", "--data-dir", a.DataDir); r.Code != 255 || !strings.Contains(r.Stderr, "nobody") {
		t.Fatalf("apikey create for an unknown account: %v; want exit 255 naming it", r)
	}
	r := runCLI(bin.automator, "apikey", "create", "ci", "--accounts", "acme", "--data-dir", a.DataDir)
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "oak_") {
		t.Fatalf("apikey create: %v", r)
	}
	keyFile := filepath.Join(t.TempDir(), "ci.apikey")
	writeFile(t, keyFile, r.Stdout)
	id := strings.Fields(strings.TrimPrefix(r.Stderr, "automator: API key "))[0]
	exec := func(account string) result {
		return runCLI(bin.automator, "exec", "--server", a.publicURL(), "--api-key-file", keyFile,
			"--ca", filepath.Join(a.DataDir, config.FileCACert), "--account", account, "--timeout", "20s", "hello.sh")
	}
	if r := exec("acme"); r.Code != 0 || r.Stdout != "hello\n" {
		t.Fatalf("exec on acme with a key scoped to acme: %v", r)
	}
	if r := exec("globex"); r.Code != 255 || !strings.Contains(r.Stderr, "may not use account") {
		t.Fatalf("exec on globex with a key scoped to acme: %v; want exit 255 saying it may not", r)
	}
	if r := runCLI(bin.automator, "apikey", "revoke", id, "--data-dir", a.DataDir); r.Code != 0 || !strings.Contains(r.Stdout, "revoked") {
		t.Fatalf("apikey revoke %s: %v", id, r)
	}
	if r := exec("acme"); r.Code != 255 || !strings.Contains(r.Stderr, "revoked") {
		t.Fatalf("exec right after the revoke: %v; want exit 255 saying the key was revoked", r)
	}
	list := runCLI(bin.automator, "apikey", "list", "--data-dir", a.DataDir)
	if list.Code != 0 || !strings.Contains(list.Stdout, id) || !strings.Contains(list.Stdout, "admin") {
		t.Fatalf("apikey list: %v", list)
	}
	for _, l := range strings.Split(list.Stdout, "\n") {
		if strings.HasPrefix(l, id) && strings.HasSuffix(strings.TrimSpace(l), "-") {
			t.Errorf("apikey list shows %s as not revoked: %q", id, l)
		}
	}
}

// TestCommandReplayedIntoAnotherUnitFailsAndRunsNothing: a sealed command
// copied in the database into another unit's row, of the same account or
// of another, does not open on the proxy: that unit fails and its script
// never runs, while the genuine unit runs.
func TestCommandReplayedIntoAnotherUnitFailsAndRunsNothing(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	acme := a.createAccount(t, "acme")
	globex := a.createAccount(t, "globex")
	scripts, markers := t.TempDir(), t.TempDir()
	writeScript(t, scripts, "mark.sh", `touch "`+markers+`/$1"`)
	db := openDB(t, a)

	genuine := a.StartExec(t, "--account", "acme", "--timeout", "30s", "mark.sh", "genuine")
	waitFor(t, 10*time.Second, "the genuine unit to be queued", func() bool { return queued(t, db) == 1 })
	sameAccount := a.StartExec(t, "--account", "acme", "--timeout", "30s", "mark.sh", "same-account")
	otherAccount := a.StartExec(t, "--account", "globex", "--timeout", "30s", "mark.sh", "other-account")
	waitFor(t, 10*time.Second, "three units to be queued", func() bool { return queued(t, db) == 3 })
	var blob []byte
	if err := db.QueryRow(`SELECT sealed_command FROM work WHERE state = 'queued' ORDER BY queued_at LIMIT 1`).Scan(&blob); err != nil {
		t.Fatal(err)
	}
	res, err := db.Exec(`UPDATE work SET sealed_command = ? WHERE state = 'queued' AND id <> (SELECT id FROM work WHERE state = 'queued' ORDER BY queued_at LIMIT 1)`, blob)
	if n, _ := res.RowsAffected(); err != nil || n != 2 {
		t.Fatalf("copying the sealed command into the other two units: %v, %d rows", err, n)
	}

	startProxy(t, acme, scripts, "acme-1")
	startProxy(t, globex, scripts, "globex-1")
	if r := genuine.Wait(t, 30*time.Second); r.Code != 0 {
		t.Fatalf("the genuine unit: %v", r)
	}
	for name, bg := range map[string]*bgExec{"same account": sameAccount, "other account": otherAccount} {
		if r := bg.Wait(t, 30*time.Second); r.Code != 125 || !strings.Contains(r.Stderr, "did not open") {
			t.Errorf("the unit holding a command replayed from another unit (%s): %v; want exit 125, did not open", name, r)
		}
	}
	entries, _ := os.ReadDir(markers)
	if len(entries) != 1 || entries[0].Name() != "genuine" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("scripts that ran: %v; want only the genuine unit's", names)
	}
}

// TestAProxyHoldingNoUsableKeyIsListedRefusedUntilItGetsTheLatestProfile:
// after `account rotate-key --overlap 0`, a proxy whose config was given
// the new token but still holds only the old key (key id 1) polls and is
// refused for want of a usable key. It is listed refused, not online (nor
// gone), in `automator instances`, `account list` (the account refused,
// not offline: its only proxy is up) and automator_instances_online and
// _refused, and a unit that times out unclaimed names it and the fix. With
// the latest profile installed, it is online at once.
func TestAProxyHoldingNoUsableKeyIsListedRefusedUntilItGetsTheLatestProfile(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	oldProfile := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo hello`)
	newProfile := a.rotate(t, "rotate-key", "acme", "0s")

	data, err := os.ReadFile(oldProfile)
	if err != nil {
		t.Fatal(err)
	}
	mixed := filepath.Join(t.TempDir(), "acme-new-token-old-key.yaml")
	oldToken, newToken := profileValue(t, oldProfile, "token"), profileValue(t, newProfile, "token")
	if err := os.WriteFile(mixed, []byte(strings.Replace(string(data), "token: "+oldToken, "token: "+newToken, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, mixed, scripts, "p1")
	waitFor(t, 15*time.Second, "p1, holding only key 1, to be listed refused", func() bool {
		return a.instanceStates(t, "acme")["p1"] == "refused"
	})
	r := runCLI(bin.automator, "instances", "--data-dir", a.DataDir, "--account", "acme")
	if r.Code != 0 || !strings.Contains(r.Stdout, "refused (its polls are refused: it holds key ids [1], none usable; install the account's latest profile)") {
		t.Errorf("automator instances while p1 is refused: %v", r)
	}
	wantRefusedUntilTheLatestProfile(t, a, p, newProfile, scripts, "instance p1 polls but holds no usable key: install the account's latest profile")
}

// TestAProxyOnTheWholeOldProfileIsListedRefusedForItsTokenUntilItGetsTheLatest:
// after `account rotate-key --overlap 2s`, a proxy still running the whole
// profile of before it polls with the old token, which is refused once the
// overlap has ended. It is listed refused for its expired token, not
// online (nor gone), in `automator instances` (table and --json), its
// account is refused and counts it so, and a unit that times out
// unclaimed names it and the fix. With the latest
// profile installed, it is online at once.
func TestAProxyOnTheWholeOldProfileIsListedRefusedForItsTokenUntilItGetsTheLatest(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	oldProfile := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo hello`)
	p := startProxy(t, oldProfile, scripts, "p1")
	p.WaitPolling(t)
	newProfile := a.rotate(t, "rotate-key", "acme", "2s")

	// p1's poll parked before the rotation was authenticated with the then
	// current token: it waits out its window (30–33 s from when it began)
	// and claims nothing past the overlap; the poll after it is refused.
	waitFor(t, 45*time.Second, "p1, on the old token past its overlap, to be listed refused", func() bool {
		return a.instanceStates(t, "acme")["p1"] == "refused"
	})
	r := runCLI(bin.automator, "instances", "--data-dir", a.DataDir, "--account", "acme")
	if r.Code != 0 || !strings.Contains(r.Stdout, "refused (its polls are refused: its account token expired, rotated and its overlap ended; install the account's latest profile)") {
		t.Errorf("automator instances while p1 is refused: %v", r)
	}
	r = runCLI(bin.automator, "instances", "--data-dir", a.DataDir, "--account", "acme", "--json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"refused_cause": "token_expired"`) {
		t.Errorf("automator instances --json while p1 is refused: %v", r)
	}
	wantRefusedUntilTheLatestProfile(t, a, p, newProfile, scripts, "instance p1 polls but its account token expired: install the account's latest profile")
}

// wantRefusedUntilTheLatestProfile checks what follows from p1, acme's only
// instance (proxy p), being listed refused: the account is refused with
// none online and one refused on /metrics, a unit times out unclaimed
// with reason in its error, and p1 restarted with newProfile is online.
func wantRefusedUntilTheLatestProfile(t *testing.T, a *automator, p *proxy, newProfile, scripts, reason string) {
	t.Helper()
	if status, n := a.accountOnline(t, "acme"); status != "refused" || n != 0 {
		t.Errorf("account acme while p1 is refused: %s, %d online; want refused, 0", status, n)
	}
	if got := a.onlineMetric(t, "acme"); !strings.HasSuffix(got, " 0") {
		t.Errorf("while p1 is refused: %s; want 0", got)
	}
	if got := a.accountGauge(t, "automator_instances_refused", "acme"); !strings.HasSuffix(got, " 1") {
		t.Errorf("while p1 is refused: %s; want 1", got)
	}
	r := a.Exec("--account", "acme", "--timeout", "2s", "hello.sh")
	if r.Code != 124 || !strings.Contains(r.Stderr, reason) {
		t.Errorf("exec while p1 is refused: %v; want exit 124 saying %q", r, reason)
	}

	if code := p.Stop(t, 30*time.Second); code != 0 {
		t.Fatalf("proxy exited %d after SIGTERM, want 0\n%s", code, p.Log())
	}
	startProxy(t, newProfile, scripts, "p1").WaitPolling(t)
	if got := a.instanceStates(t, "acme"); got["p1"] != "online" {
		t.Errorf("instances once p1 has the latest profile: %v; want p1 online", got)
	}
}

// TestAProxyHoldingAnotherAccountsKeyIsRefusedAndClaimsNothing: a proxy
// whose config has acme's token but the key line of another account (key
// id 1, as every account's first key: the key id check alone lets it
// through) is refused at its first poll for units, with the reason in its
// log; it claims nothing, so acme's unit runs on the healthy proxy, and
// it is listed refused for a wrong key (table and --json).
func TestAProxyHoldingAnotherAccountsKeyIsRefusedAndClaimsNothing(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	acme := a.createAccount(t, "acme")
	other := a.createAccount(t, "other")
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo "hello $PROXY_INSTANCE_ID"`)

	data, err := os.ReadFile(acme)
	if err != nil {
		t.Fatal(err)
	}
	acmeKey, otherKey := profileValue(t, acme, "key"), profileValue(t, other, "key")
	if !strings.HasPrefix(acmeKey, "1:") || !strings.HasPrefix(otherKey, "1:") {
		t.Fatalf("the accounts' first keys are not both key id 1")
	}
	wrong := filepath.Join(t.TempDir(), "acme-with-others-key.yaml")
	if err := os.WriteFile(wrong, []byte(strings.Replace(string(data), "key: "+acmeKey, "key: "+otherKey, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, wrong, scripts, "wrong")
	const said = `holds, as key id 1, a key that is not account \"acme\"'s key 1 (another account's key, or a mistyped one)`
	waitFor(t, 15*time.Second, "the proxy holding another account's key to log its refusal", func() bool {
		return strings.Contains(p.Log(), said) || p.Exited()
	})
	if !strings.Contains(p.Log(), "FailedPrecondition") || !strings.Contains(p.Log(), "install the account's profile") {
		t.Errorf("the refused proxy's log does not say why and what to do:\n%s", p.Log())
	}
	waitFor(t, 15*time.Second, "the proxy to be listed refused", func() bool {
		return a.instanceStates(t, "acme")["wrong"] == "refused"
	})
	r := runCLI(bin.automator, "instances", "--data-dir", a.DataDir, "--account", "acme", "--json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"refused_cause": "wrong_key"`) {
		t.Errorf("automator instances --json while the proxy is refused: %v", r)
	}
	r = runCLI(bin.automator, "instances", "--data-dir", a.DataDir, "--account", "acme")
	if r.Code != 0 || !strings.Contains(r.Stdout, "refused (its polls are refused: it holds key ids [1], and a key among them is not the account's key of its id") {
		t.Errorf("automator instances while the proxy is refused: %v", r)
	}
	// Alone, it leaves the unit unclaimed, and the reason names it.
	r = a.Exec("--account", "acme", "--timeout", "2s", "hello.sh")
	if r.Code != 124 || !strings.Contains(r.Stderr, "instance wrong polls but holds a key that is not the account's") {
		t.Errorf("exec while only the refused proxy polls: %v; want exit 124 naming it", r)
	}

	good := startProxy(t, acme, scripts, "good")
	good.WaitPolling(t)
	for i := range 4 {
		r := a.Exec("--account", "acme", "--timeout", "30s", "hello.sh")
		if r.Code != 0 || r.Stdout != "hello good\n" {
			t.Errorf("exec %d with a healthy proxy beside the refused one: %v; want it run by the healthy one", i, r)
		}
	}
	var claimed int
	if err := openDB(t, a).QueryRow(`SELECT COUNT(*) FROM work WHERE instance_id = 'wrong'`).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != 0 {
		t.Errorf("the proxy holding another account's key claimed %d units, want none", claimed)
	}
	if strings.Contains(p.Log(), "did not open") {
		t.Errorf("the refused proxy was handed a command:\n%s", p.Log())
	}
}
