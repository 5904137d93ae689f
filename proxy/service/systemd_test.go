package service

import (
	"strings"
	"testing"
	"time"
)

func testSpec() Spec {
	return Spec{
		Name:        "proxy",
		Description: "opsgate proxy proxy",
		Executable:  "/usr/local/bin/proxy",
		Arguments:   []string{Flag, "proxy", "run", "--config", "/etc/proxy/proxy.yaml"},
		StopTimeout: 90 * time.Second,
	}
}

// TestSystemdUnitKeepsTheProxyRunningAndStopsItGracefully: the properties
// the proxy relies on, each a line of the unit.
func TestSystemdUnitKeepsTheProxyRunningAndStopsItGracefully(t *testing.T) {
	unit := SystemdUnit(testSpec())
	for _, want := range []string{
		"\nWants=network-online.target\n",
		"\nAfter=network-online.target\n",
		"\nStartLimitIntervalSec=0\n",
		"\nExecStart=/usr/local/bin/proxy --service proxy run --config /etc/proxy/proxy.yaml\n",
		"\nRestart=always\n",
		"\nKillMode=mixed\n",
		"\nTimeoutStopSec=90\n",
		"\nNoNewPrivileges=yes\n",
		"\nProtectSystem=full\n",
		"\nPrivateTmp=yes\n",
		"\nWantedBy=multi-user.target\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", strings.TrimSpace(want), unit)
		}
	}
	if strings.Contains(unit, "User=") {
		t.Errorf("a unit without a user names one:\n%s", unit)
	}
	s := testSpec()
	s.User, s.WritablePaths = "opsgate", []string{"/etc/my data"}
	unit = SystemdUnit(s)
	for _, want := range []string{"\nUser=opsgate\n", "\nReadWritePaths=\"/etc/my data\"\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", strings.TrimSpace(want), unit)
		}
	}
}

func TestSystemdQuoteEscapesSpecifiersVariablesAndSpaces(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/proxy":      "/usr/bin/proxy",
		"--config=/etc/x.yml": "--config=/etc/x.yml",
		"/opt/my proxy/proxy": `"/opt/my proxy/proxy"`,
		"100%":                "100%%",
		"$HOME":               "$$HOME",
		`a"b\c`:               `"a\"b\\c"`,
		"":                    `""`,
		"a;b":                 `"a;b"`,
	} {
		if got := systemdQuote(in); got != want {
			t.Errorf("systemdQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestInstallHandsKardianosTheRenderedDefinitions: what the tests render is
// what Install writes. The definitions hold no template action, so
// kardianos's engine copies them unchanged.
func TestInstallHandsKardianosTheRenderedDefinitions(t *testing.T) {
	s := testSpec()
	s.Description = "50% $x {braces}"
	s.User = "opsgate"
	cfg := kardianosConfig(s)
	unit, _ := cfg.Option["SystemdScript"].(string)
	script, _ := cfg.Option["SysvScript"].(string)
	if unit != SystemdUnit(s) || script != SysVScript(s) {
		t.Fatal("kardianos does not get the rendered definitions")
	}
	for name, text := range map[string]string{"unit": unit, "script": script} {
		if strings.Contains(text, "{{") {
			t.Errorf("the %s holds a template action, which kardianos would expand:\n%s", name, text)
		}
	}
	if cfg.Option["StartType"] != "automatic" || cfg.Option["OnFailure"] != "restart" {
		t.Errorf("windows options %v, want automatic start and restart on failure", cfg.Option)
	}
	s.ManualStart = true
	if got := kardianosConfig(s).Option["StartType"]; got != "manual" {
		t.Errorf("a manual-start service has StartType %v", got)
	}
}

// TestInstallRefusesTemplateActions: "{{" in a path or description would be
// expanded by kardianos, so Install refuses it rather than write something
// else than asked.
func TestInstallRefusesTemplateActions(t *testing.T) {
	s := testSpec()
	if err := s.check(); err != nil {
		t.Fatalf("a plain spec: %v", err)
	}
	s.Arguments = append(s.Arguments, "/etc/{{Path}}/x")
	if err := s.check(); err == nil || !strings.Contains(err.Error(), "{{") {
		t.Fatalf("check: %v, want a refusal of {{", err)
	}
	if err := Install(s); err == nil || !strings.Contains(err.Error(), "{{") {
		t.Fatalf("Install: %v, want a refusal of {{", err)
	}
}

func TestCheckNameRefusesPathsAndOddCharacters(t *testing.T) {
	for _, ok := range []string{"proxy", "proxy-acme", "proxy_2", "p.1", "P"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", `a\b`, "-x", "a b", "a$", strings.Repeat("x", 65)} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
}

func TestSplitServiceFlag(t *testing.T) {
	for _, args := range [][]string{
		{"--service", "p1", "run", "--config", "c"},
		{"--service=p1", "run", "--config", "c"},
		{"-service", "p1", "run", "--config", "c"},
	} {
		name, rest, ok, err := SplitServiceFlag(args)
		if err != nil || !ok || name != "p1" || strings.Join(rest, " ") != "run --config c" {
			t.Errorf("SplitServiceFlag(%q) = %q %q %v %v", args, name, rest, ok, err)
		}
	}
	if _, _, ok, err := SplitServiceFlag([]string{"run", "--service", "x"}); ok || err != nil {
		t.Errorf("a command without the leading flag: %v %v", ok, err)
	}
	for _, args := range [][]string{{"--service"}, {"--service", "p1"}, {"--service", "../x", "run"}} {
		if _, _, _, err := SplitServiceFlag(args); err == nil {
			t.Errorf("SplitServiceFlag(%q) accepted it", args)
		}
	}
}
