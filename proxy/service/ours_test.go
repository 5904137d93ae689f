package service

import (
	"errors"
	"strings"
	"testing"
)

// TestEveryDefinitionInstallWritesSaysWhatItRuns: a service is ours when
// its definition runs `--service NAME CMD`, which is how Query tells a
// proxy's or an automator's service from another program's of the same
// name. The systemd unit and the init script Install renders, and a
// Windows command line as the control manager keeps it, each give their
// command for their own name and none for another name that starts the
// same; another program's definitions give none.
func TestEveryDefinitionInstallWritesSaysWhatItRuns(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "serve"} {
		spec := Spec{Name: "proxy-acme", Executable: "/usr/local/bin/opsgate", Arguments: []string{Flag, "proxy-acme", cmd, "--config", "/etc/proxy acme/proxy.yaml"}}
		for what, def := range map[string]string{
			"systemd unit": SystemdUnit(spec),
			"init script":  SysVScript(spec),
			"Windows":      `"C:\Program Files\opsgate\opsgate.exe" --service proxy-acme ` + cmd + ` --config "C:\ProgramData\opsgate\proxy-acme\proxy.yaml"`,
		} {
			if got := runsAfterFlag(def, "proxy-acme"); got != cmd {
				t.Errorf("%s of service proxy-acme running %s: runs %q, want %q:\n%s", what, cmd, got, cmd, def)
			}
			if got := runsAfterFlag(def, "proxy"); got != "" {
				t.Errorf("%s of service proxy-acme, asked for service proxy: runs %q, want none", what, got)
			}
		}
	}
	for what, def := range map[string]string{
		"a package's systemd unit": "[Unit]\nDescription=OpenBSD Secure Shell server\n[Service]\nExecStart=/usr/sbin/sshd -D $SSHD_OPTS\n",
		"a package's init script":  "#!/bin/sh\n### BEGIN INIT INFO\n# Provides: proxy\n### END INIT INFO\nDAEMON=/usr/sbin/squid\ncase \"$1\" in start) $DAEMON --service proxy ;; status) $DAEMON --service proxy status ;; esac\n",
		"nothing":                  "",
	} {
		if got := runsAfterFlag(def, "proxy"); got != "" {
			t.Errorf("%s: runs %q, want none", what, got)
		}
	}
}

// TestExpectTellsWhoseAServiceIs: a command of one program refuses the
// other's service, and another program's, saying whose it is; its own, or
// no service at all, passes.
func TestExpectTellsWhoseAServiceIs(t *testing.T) {
	t.Parallel()
	def := "/etc/init.d/x"
	for _, c := range []struct {
		st   Status
		cmd  string
		want string // "" for no error
	}{
		{Status{Name: "x", Definition: def}, "run", ""},
		{Status{Name: "x", Definition: def, Installed: true, Runs: "run"}, "run", ""},
		{Status{Name: "x", Definition: def, Installed: true, Runs: "serve"}, "serve", ""},
		{Status{Name: "x", Definition: def, Installed: true, Runs: "serve"}, "run", "service \"x\" (/etc/init.d/x) is an automator's (it runs `serve`), not a proxy's: manage it with `automator`, or choose another --name"},
		{Status{Name: "x", Definition: def, Installed: true, Runs: "run"}, "serve", "service \"x\" (/etc/init.d/x) is a proxy's (it runs `run`), not an automator's: manage it with `proxy`, or choose another --name"},
		{Status{Name: "x", Definition: def, Installed: true}, "run", "service \"x\" (/etc/init.d/x) is not one that `proxy install` or `automator install` made: its definition does not run `--service x`; this command leaves another program's service alone (choose another --name)"},
	} {
		err := c.st.Expect(c.cmd)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v expecting %s: %v, want none", c.st, c.cmd, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%+v expecting %s:\n got %v\nwant %s", c.st, c.cmd, err, c.want)
		}
	}
	if err := (Status{Name: "x", Installed: true}).Expect("run"); !errors.Is(err, ErrNotOurs) {
		t.Errorf("another program's service: %v, want ErrNotOurs", err)
	}
}

// TestServiceNamesWindowsGivesAMeaningAreRefusedThere: on Windows a
// trailing dot is dropped from a folder's name, so that `--name proxy.`
// would act on %ProgramData%\proxy, the proxy service's folder; a device
// name (NUL, COM1, with or without an extension) names no folder. Both
// are refused there, and stay valid names elsewhere.
func TestServiceNamesWindowsGivesAMeaningAreRefusedThere(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"proxy.", "nul", "NUL.proxy", "com1", "Lpt9.x", "aux"} {
		if err := checkName(name, true); err == nil || !strings.Contains(err.Error(), "Windows gives it a meaning of its own") {
			t.Errorf("%q on Windows: %v; want it refused", name, err)
		}
		if err := checkName(name, false); err != nil {
			t.Errorf("%q elsewhere: %v; want it valid", name, err)
		}
	}
	for _, name := range []string{"proxy", "proxy.a", "console", "com10", "nully"} {
		if err := checkName(name, true); err != nil {
			t.Errorf("%q on Windows: %v; want it valid", name, err)
		}
	}
}
