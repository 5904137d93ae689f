//go:build linux

package service

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/proctest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// The compose files of deploy/compose, relative to this package.
var (
	composeDir  = filepath.Join("..", "..", "deploy", "compose")
	composePath = filepath.Join(composeDir, "compose.yaml")
)

// composeFile is the part of the Compose Specification compose.yaml uses.
// Commands are lists (exec form), as a test can run them without a shell's
// word splitting.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Networks    map[string]struct {
		Aliases []string `yaml:"aliases"`
	} `yaml:"networks"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Restart string `yaml:"restart"`
}

var composeVar = regexp.MustCompile(`\$\{(\w+)(?::-([^}]*))?\}`)

// loadCompose reads compose.yaml as `docker compose` would with none of its
// variables set: each ${VAR:-default} is its default, $$ a $.
func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	text := composeVar.ReplaceAllStringFunc(string(data), func(v string) string {
		m := composeVar.FindStringSubmatch(v)
		if !strings.Contains(v, ":-") {
			t.Errorf("%s: %s has no default: `docker compose up` would need it set", composePath, v)
		}
		return m[2]
	})
	if strings.Count(text, "$") != 2*strings.Count(text, "$$") {
		t.Errorf("%s: a $ that is not ${VAR:-default} nor $$", composePath)
	}
	text = strings.ReplaceAll(text, "$$", "$")
	var f composeFile
	if err := yaml.Unmarshal([]byte(text), &f); err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	return f
}

// binaryName is "automator" or "proxy" when argv runs one of them.
func binaryName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	switch b := filepath.Base(argv[0]); b {
	case "automator", "proxy":
		return b
	}
	return ""
}

// shellScript is the script of a `sh -c SCRIPT` (or -euc ...) command.
func shellScript(argv []string) (string, bool) {
	if len(argv) == 3 && filepath.Base(argv[0]) == "sh" && strings.HasPrefix(argv[1], "-") && strings.HasSuffix(argv[1], "c") {
		return argv[2], true
	}
	return "", false
}

// TestComposeFileCommandsMatchTheCLI: every command of compose.yaml that
// runs automator or proxy, directly or in a shell script, names a verb and
// flags the binaries accept; the image's services run nothing else.
func TestComposeFileCommandsMatchTheCLI(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	helps := cliHelps{}
	calls := 0
	for name, s := range f.Services {
		if s.Image != composeImage(f) {
			continue
		}
		where := composePath + ": service " + name
		if script, ok := shellScript(s.Command); ok {
			n := 0
			for _, line := range strings.Split(script, "\n") {
				n += helps.checkCLICalls(t, where, line)
			}
			if n == 0 {
				t.Errorf("%s: its script runs no automator or proxy command", where)
			}
			calls += n
			continue
		}
		if binaryName(s.Command) == "" {
			t.Errorf("%s: command %q runs neither automator nor proxy nor a sh -c script", where, s.Command)
			continue
		}
		line := strings.Join(s.Command, " ")
		if n := helps.checkCLICalls(t, where, line); n != 1 {
			t.Errorf("%s: `%s` is %d automator or proxy commands, want 1 (an unknown verb?)", where, line, n)
		}
		calls++
	}
	if calls < 4 {
		t.Errorf("%s: %d automator or proxy commands, want at least init, two serves and a proxy run", composePath, calls)
	}
}

// composeImage is the image the services of the Dockerfile run: the one
// built from it.
func composeImage(f composeFile) string {
	for _, s := range f.Services {
		if s.Build.Dockerfile != "" {
			return s.Image
		}
	}
	return "(none built)"
}

// TestComposeFileAndDockerfileMatchTheRepository: the Dockerfile builds
// the module's two commands with the Go of go.mod and the Makefile's
// version stamp; compose.yaml builds it from the repository root, mounts
// what exists, gives its volumes to directories the image makes for its
// user, publishes ports its services listen on and checks their health on
// an endpoint they serve.
func TestComposeFileAndDockerfileMatchTheRepository(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	dockerfile := read(filepath.Join(composeDir, "Dockerfile"))
	gomod := read(filepath.Join(root, "go.mod"))
	makefile := read(filepath.Join(root, "Makefile"))

	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod has no go line")
	}
	if want := "FROM golang:" + goVersion[1] + " "; !strings.Contains(dockerfile, want) {
		t.Errorf("Dockerfile: want the builder `%s` (go.mod's go %s)", strings.TrimSpace(want), goVersion[1])
	}
	stamp := regexp.MustCompile(`-X (\S+)=`).FindStringSubmatch(makefile)
	if stamp == nil || !strings.Contains(dockerfile, "-X "+stamp[1]+"=") {
		t.Errorf("Dockerfile: the version is not stamped into %v as the Makefile does", stamp)
	}
	for _, pkg := range []string{"automator/cmd/automator", "proxy/cmd/proxy"} {
		if !strings.Contains(dockerfile, " ./"+pkg) {
			t.Errorf("Dockerfile does not build ./%s", pkg)
		}
		if _, err := os.Stat(filepath.Join(root, pkg, "main.go")); err != nil {
			t.Errorf("Dockerfile builds ./%s: %v", pkg, err)
		}
	}
	if !strings.Contains(dockerfile, "COPY --from=build /out/automator /out/proxy /usr/local/bin/") {
		t.Error("Dockerfile: the binaries are not copied to /usr/local/bin, on the PATH of compose.yaml's commands")
	}
	made := regexp.MustCompile(`install -d -o opsgate -g opsgate -m 0700 ([^\n]+)`).FindStringSubmatch(dockerfile)
	if made == nil {
		t.Fatal("Dockerfile makes no directories for its user")
	}
	imageDirs := strings.Fields(made[1])

	f := loadCompose(t)
	image := composeImage(f)
	for name, s := range f.Services {
		where := composePath + ": service " + name
		if s.Build.Dockerfile != "" {
			if ctx := filepath.Join(composeDir, s.Build.Context); filepath.Clean(ctx) != filepath.Clean(root) {
				t.Errorf("%s: build context %s is not the repository root", where, s.Build.Context)
			}
			if _, err := os.Stat(filepath.Join(root, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: dockerfile: %v", where, err)
			}
		}
		for _, v := range s.Volumes {
			src, dst := splitMount(v)
			switch {
			case strings.HasPrefix(src, "."):
				if _, err := os.Stat(filepath.Join(composeDir, src)); err != nil {
					t.Errorf("%s: bind mount %s: %v", where, v, err)
				}
			case f.Volumes == nil || !hasKey(f.Volumes, src):
				t.Errorf("%s: volume %s is not declared under volumes:", where, src)
			case s.Image == image && !contains(imageDirs, dst):
				t.Errorf("%s: volume %s on %s, which the image does not make for its user (it makes %v): Docker would make it root's", where, src, dst, imageDirs)
			}
		}
		if s.Image != image {
			continue
		}
		listens := listenPorts(s.Command)
		for _, p := range s.Ports {
			container := p[strings.LastIndex(p, ":")+1:]
			if !contains(listens, container) {
				t.Errorf("%s: publishes port %s, but listens on %v", where, container, listens)
			}
		}
		if len(s.Healthcheck.Test) > 0 {
			u, err := url.Parse(healthURL(s.Healthcheck.Test))
			if err != nil || u.Host == "" {
				t.Errorf("%s: the health check %q names no http:// URL", where, s.Healthcheck.Test)
				continue
			}
			if u.Path != "/readyz" && u.Path != "/healthz" {
				t.Errorf("%s: the health check asks %s; the automator answers /healthz and /readyz", where, u.Path)
			}
			host, port, _ := net.SplitHostPort(flagValue(s.Command, "--http-listen"))
			if port != u.Port() || (host != "" && host != "0.0.0.0" && host != u.Hostname()) {
				t.Errorf("%s: the health check asks %s, but --http-listen is %q", where, u.Host, flagValue(s.Command, "--http-listen"))
			}
		}
	}
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// splitMount splits a short-syntax volume, SOURCE:TARGET[:MODE].
func splitMount(v string) (src, dst string) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 {
		return "", v
	}
	return parts[0], parts[1]
}

// flagValue is the value of --name in argv, or "".
func flagValue(argv []string, name string) string {
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

var listenFlags = []string{"--listen", "--http-listen"}

// listenPorts are the ports of the --listen and --http-listen of argv.
func listenPorts(argv []string) []string {
	var ports []string
	for _, f := range listenFlags {
		if _, port, err := net.SplitHostPort(flagValue(argv, f)); err == nil {
			ports = append(ports, port)
		}
	}
	return ports
}

// healthURL is the http:// URL a health check's command asks.
func healthURL(test []string) string {
	for _, a := range test {
		if strings.HasPrefix(a, "http://") {
			return a
		}
	}
	return ""
}

// ---- compose.yaml as local processes ----

// localCompose runs the services of a compose file as processes on this
// host: what each container sees is mapped to what stands for it here.
type localCompose struct {
	f       composeFile
	root    string                    // volumes live under it
	ports   map[string]map[string]int // service -> container port -> loopback port
	aliases map[string]string         // network alias:port -> its relay's address
	pgHost  string                    // the PostgreSQL service's name
	pgAddr  string                    // the throwaway cluster, host:port
	pgRole  string                    // its role and database for this run
	procs   map[string]*proctest.Proc
	mu      sync.Mutex // guards ports, which the alias relays read
}

var composeDSN = regexp.MustCompile(`postgres(?:ql)?://([^@/\s'"]+)@([a-z0-9-]+):5432/([^?\s'"]+)`)

// mapped rewrites s as service svc would see it here: its mounts' paths,
// the database URL, other services' and aliases' host:port, its own
// loopback addresses.
func (c *localCompose) mapped(t *testing.T, svc, s string) string {
	t.Helper()
	mounts := append([]string(nil), c.f.Services[svc].Volumes...)
	sort.Slice(mounts, func(i, j int) bool {
		_, a := splitMount(mounts[i])
		_, b := splitMount(mounts[j])
		return len(a) > len(b)
	})
	for _, m := range mounts {
		src, dst := splitMount(m)
		host := filepath.Join(c.root, "volumes", src)
		if strings.HasPrefix(src, ".") {
			abs, err := filepath.Abs(filepath.Join(composeDir, src))
			if err != nil {
				t.Fatal(err)
			}
			host = abs
		}
		s = strings.ReplaceAll(s, dst, host)
	}
	pg := c.f.Services[c.pgHost].Environment
	s = composeDSN.ReplaceAllStringFunc(s, func(dsn string) string {
		m := composeDSN.FindStringSubmatch(dsn)
		if m[1] != pg["POSTGRES_USER"] || m[2] != c.pgHost || m[3] != pg["POSTGRES_DB"] {
			t.Errorf("service %s: %s is not the role %s and database %s of service %s", svc, dsn, pg["POSTGRES_USER"], pg["POSTGRES_DB"], c.pgHost)
		}
		return "postgres://" + c.pgRole + "@" + c.pgAddr + "/" + c.pgRole
	})
	s = regexp.MustCompile(`\b([a-z][a-z0-9-]*):(\d+)\b`).ReplaceAllStringFunc(s, func(hp string) string {
		host, port, _ := net.SplitHostPort(hp)
		if a, ok := c.aliases[hp]; ok {
			return a
		}
		if p, ok := c.ports[host][port]; ok {
			return "127.0.0.1:" + strconv.Itoa(p)
		}
		return hp
	})
	for port, p := range c.ports[svc] {
		local := "127.0.0.1:" + strconv.Itoa(p)
		for _, own := range []string{"127.0.0.1:" + port, "localhost:" + port} {
			s = strings.ReplaceAll(s, own, local)
		}
		if s == ":"+port || s == "0.0.0.0:"+port {
			s = local
		}
	}
	return s
}

// env is service svc's environment: this process's less libpq's, with
// the test's binaries first on the PATH, and the service's own.
func (c *localCompose) env(t *testing.T, svc string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	for k, v := range c.f.Services[svc].Environment {
		env = append(env, k+"="+c.mapped(t, svc, v))
	}
	return env
}

// start starts service svc's command, mapped.
func (c *localCompose) start(t *testing.T, svc string) *proctest.Proc {
	t.Helper()
	argv := c.f.Services[svc].Command
	if len(argv) == 0 {
		t.Fatalf("service %s has no command", svc)
	}
	args := make([]string, len(argv)-1)
	for i, a := range argv[1:] {
		args[i] = c.mapped(t, svc, a)
	}
	path := map[string]string{"automator": bin.automator, "proxy": bin.proxy}[binaryName(argv)]
	if path == "" {
		var err error
		if path, err = exec.LookPath(argv[0]); err != nil {
			t.Fatalf("service %s: %v", svc, err)
		}
	}
	p := proctest.StartEnv(t, svc, c.env(t, svc), path, args...)
	c.procs[svc] = p
	return p
}

// run runs a command to its end in service svc's environment.
func (c *localCompose) run(t *testing.T, svc, path string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = c.env(t, svc)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{Code: -1, Stdout: stdout.String(), Stderr: stderr.String()}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	} else if err != nil {
		r.Stderr += err.Error()
	}
	return r
}

// waitHealthy waits for service svc's health check, an HTTP GET, to answer
// 200.
func (c *localCompose) waitHealthy(t *testing.T, svc string) {
	t.Helper()
	u := c.mapped(t, svc, healthURL(c.f.Services[svc].Healthcheck.Test))
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	p := c.procs[svc]
	waitFor(t, 30*time.Second, "service "+svc+" to be healthy ("+u+")", func() bool {
		if p.Exited() {
			return true
		}
		resp, err := client.Get(u)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if p.Exited() {
		t.Fatalf("service %s exited with %d before it was healthy: %s", svc, p.ExitCode(), p.Tail(10))
	}
}

// order is the services in an order depends_on allows.
func (c *localCompose) order(t *testing.T) []string {
	t.Helper()
	var out []string
	done := map[string]bool{}
	var visit func(string, int)
	visit = func(s string, depth int) {
		if done[s] {
			return
		}
		if depth > len(c.f.Services) {
			t.Fatalf("%s: depends_on has a cycle through %s", composePath, s)
		}
		deps := make([]string, 0, len(c.f.Services[s].DependsOn))
		for d := range c.f.Services[s].DependsOn {
			if _, ok := c.f.Services[d]; !ok {
				t.Fatalf("%s: service %s depends on %s, which is no service", composePath, s, d)
			}
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			visit(d, depth+1)
		}
		done[s] = true
		out = append(out, s)
	}
	names := make([]string, 0, len(c.f.Services))
	for n := range c.f.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		visit(n, 0)
	}
	return out
}

// aliasRelay stands in for a network alias that names several services:
// Docker's DNS answers with all their addresses, and a gRPC client
// connects to the first that accepts. Each connection goes to the first
// backend that accepts it.
type aliasRelay struct {
	l        net.Listener
	backends func() []string // asked at each connection
	mu       sync.Mutex
	conns    map[net.Conn]bool
	closing  bool
	wg       sync.WaitGroup
}

func startAliasRelay(t *testing.T, backends func() []string) *aliasRelay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &aliasRelay{l: l, backends: backends, conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() { defer r.wg.Done(); r.serve(in) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		r.mu.Lock()
		r.closing = true
		for c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		waittest.Group(t, &r.wg, "the alias relay's connections to end")
	})
	return r
}

// track adds c to the connections closed when the test ends; once they
// are closed, it closes c at once.
func (r *aliasRelay) track(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		c.Close()
	}
	r.conns[c] = true
}

func (r *aliasRelay) serve(in net.Conn) {
	r.track(in)
	defer in.Close()
	for _, b := range r.backends() {
		out, err := net.DialTimeout("tcp", b, 2*time.Second)
		if err != nil {
			continue
		}
		r.track(out)
		defer out.Close()
		done := make(chan struct{}, 2)
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			done <- struct{}{}
		}
		go pipe(out, in)
		go pipe(in, out)
		<-done
		<-done
		return
	}
}

// TestComposeTopologyRunsAsLocalProcesses: compose.yaml, which cannot run
// under Docker on the build machine, runs here as local processes: its
// commands as they stand, with PostgreSQL a throwaway cluster (its role and
// database as the postgres service's environment makes them), each named
// volume a temporary directory, each container port a loopback port the
// kernel picks (the service listens on port 0 and serving.yaml names it),
// the alias both replicas answer to a relay to the first that accepts. Then
// a unit is run through each replica to the proxy, both replicas list each
// other, and once the replica the proxy polls is stopped, the proxy polls
// the other through the alias and runs a unit queued there.
func TestComposeTopologyRunsAsLocalProcesses(t *testing.T) {
	t.Parallel()
	c := &localCompose{f: loadCompose(t), root: t.TempDir(), ports: map[string]map[string]int{}, aliases: map[string]string{}, procs: map[string]*proctest.Proc{}}
	for name, s := range c.f.Services {
		if strings.HasPrefix(s.Image, "postgres:") {
			c.pgHost = name
		}
	}
	if c.pgHost == "" {
		t.Fatalf("%s has no postgres service", composePath)
	}
	c.setUpPostgres(t)
	for name := range c.f.Volumes {
		if err := os.MkdirAll(filepath.Join(c.root, "volumes", name), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	// Ports and aliases.
	byAlias := map[string][]string{}
	var serves []string
	for _, name := range c.order(t) {
		s := c.f.Services[name]
		for _, port := range listenPorts(s.Command) {
			if c.ports[name] == nil {
				c.ports[name] = map[string]int{}
			}
			c.ports[name][port] = 0 // listen on port 0; learnPorts reads the port it got
		}
		for _, n := range s.Networks {
			for _, a := range n.Aliases {
				byAlias[a] = append(byAlias[a], name)
			}
		}
		if binaryName(s.Command) == "automator" && s.Command[1] == "serve" {
			serves = append(serves, name)
		}
	}
	if len(serves) < 2 {
		t.Fatalf("%s: %d automator replicas (automator serve), want at least 2", composePath, len(serves))
	}
	for alias, svcs := range byAlias {
		_, port, _ := net.SplitHostPort(flagValue(c.f.Services[svcs[0]].Command, "--listen"))
		// The backends' ports are known only once they serve.
		backends := func() []string {
			c.mu.Lock()
			defer c.mu.Unlock()
			var out []string
			for _, s := range svcs {
				if p := c.ports[s][port]; p != 0 {
					out = append(out, fmt.Sprintf("127.0.0.1:%d", p))
				}
			}
			return out
		}
		r := startAliasRelay(t, backends)
		c.aliases[alias+":"+port] = r.l.Addr().String()
	}

	// Up, in depends_on order: a one-shot service (restart "no") runs to
	// its end, a service with a health check is waited for.
	for _, name := range c.order(t) {
		s := c.f.Services[name]
		if name == c.pgHost {
			continue
		}
		p := c.start(t, name)
		c.learnPorts(t, name)
		switch {
		case s.Restart == "no":
			if code := p.Wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("one-shot service %s exited with %d:\n%s", name, code, p.Log())
			}
		case len(s.Healthcheck.Test) > 0:
			c.waitHealthy(t, name)
		}
	}
	proxySvc := ""
	for name, s := range c.f.Services {
		if binaryName(s.Command) == "proxy" {
			proxySvc = name
		}
	}
	if proxySvc == "" {
		t.Fatalf("%s runs no proxy", composePath)
	}
	proctest.WaitPolling(t, c.procs[proxySvc], 30*time.Second)
	instance := flagValue(c.f.Services[proxySvc].Command, "--instance-id")
	account := ""
	for _, s := range c.f.Services {
		if script, ok := shellScript(s.Command); ok {
			if m := regexp.MustCompile(`account create (\S+)`).FindStringSubmatch(script); m != nil {
				account = m[1]
			}
		}
	}
	if account == "" {
		t.Fatalf("%s creates no account", composePath)
	}

	dataDir := func(svc string) string {
		return c.mapped(t, svc, flagValue(c.f.Services[svc].Command, "--data-dir"))
	}
	run := func(svc, word string) {
		t.Helper()
		r := runCLI(bin.automator, "exec", "--data-dir", dataDir(svc), "--account", account, "--timeout", "30s", "hello.sh", word)
		if want := "hello " + word + " from instance " + instance + " "; r.Code != 0 || !strings.HasPrefix(r.Stdout, want) {
			t.Fatalf("automator exec through replica %s: %v; want %q...", svc, r, want)
		}
	}
	// A unit through each replica, run by the proxy (polling the first).
	for _, svc := range serves {
		run(svc, "via-"+svc)
	}
	// As `docker compose exec automator-a automator replicas ...` runs it:
	// in the service's environment, which has the database's password.
	out := c.run(t, serves[0], bin.automator, "replicas", "--data-dir", dataDir(serves[0]))
	for _, svc := range serves {
		id := flagValue(c.f.Services[svc].Command, "--replica-id")
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s.*\syes$`).MatchString(out.Stdout) {
			t.Errorf("automator replicas does not list replica %s of service %s alive: %v", id, svc, out)
		}
	}
	// The first replica stops; the proxy reconnects through the alias to
	// another, which runs what is queued on it.
	first := byAlias["automator"]
	if len(first) < 2 {
		t.Fatalf("%s: alias automator names %v, want both replicas", composePath, first)
	}
	c.procs[first[0]].Signal(t, syscall.SIGTERM)
	if code := c.procs[first[0]].Wait(t, 30*time.Second); code != 0 {
		t.Errorf("replica %s exited with %d on SIGTERM", first[0], code)
	}
	run(first[1], "after-"+first[0]+"-stopped")
}

// learnPorts waits for service svc, if it listens (automator serve, told
// to listen on port 0), to write serving.yaml into its data directory, and
// records the ports it got: no port is picked ahead for another process
// to take before the service binds it.
func (c *localCompose) learnPorts(t *testing.T, svc string) {
	t.Helper()
	argv := c.f.Services[svc].Command
	if len(listenPorts(argv)) == 0 {
		return
	}
	dir := c.mapped(t, svc, flagValue(argv, "--data-dir"))
	p := c.procs[svc]
	var serving config.Serving
	waitFor(t, 30*time.Second, "service "+svc+" to write "+config.FileServing, func() bool {
		var ok bool
		serving, ok, _ = config.ReadServing(dir)
		return ok || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("service %s exited with %d before it served: %s", svc, p.ExitCode(), p.Tail(10))
	}
	got := map[string]string{"--listen": serving.GRPC, "--http-listen": serving.HTTP}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range listenFlags {
		_, port, err := net.SplitHostPort(flagValue(argv, f))
		if err != nil {
			continue
		}
		_, bound, err := net.SplitHostPort(got[f])
		n, err2 := strconv.Atoi(bound)
		if err != nil || err2 != nil || n == 0 {
			t.Fatalf("service %s: %s says it serves %s on %q", svc, config.FileServing, f, got[f])
		}
		c.ports[svc][port] = n
	}
}

// setUpPostgres makes what the postgres image makes of its environment
// (a role with its password, owning a database), under a name of this
// run's in the shared cluster.
func (c *localCompose) setUpPostgres(t *testing.T) {
	t.Helper()
	base := pgtest.URL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c.pgAddr = u.Host
	c.pgRole = fmt.Sprintf("compose_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	env := c.f.Services[c.pgHost].Environment
	for _, k := range []string{"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"} {
		if env[k] == "" {
			t.Fatalf("%s: service %s sets no %s", composePath, c.pgHost, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", c.pgRole, strings.ReplaceAll(env["POSTGRES_PASSWORD"], "'", "''")),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", c.pgRole, c.pgRole),
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping database %s: %v", c.pgRole, err)
			return
		}
		defer conn.Close(ctx)
		for _, sql := range []string{"DROP DATABASE " + c.pgRole + " WITH (FORCE)", "DROP ROLE " + c.pgRole} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
}
