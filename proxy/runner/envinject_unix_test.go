//go:build !windows

package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCommandEnvCannotMakeBashRunOtherCode: a command may name only a
// deployed script, and its arguments never reach a shell (DESIGN: "The
// proxy runs only deployed scripts"; docs/security.md: an API key holder
// "cannot run anything outside scripts_dir"). The command's env must not
// undo that: BASH_ENV names a file bash runs before the script (stdin, the
// command's own, will do), and a BASH_FUNC_name%% variable replaces a
// command the script calls with a function of the caller's making.
func TestCommandEnvCannotMakeBashRunOtherCode(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for name, tc := range map[string]struct {
		env   map[string]string
		stdin string
	}{
		"BASH_ENV":      {env: map[string]string{"BASH_ENV": "/dev/stdin"}, stdin: "touch injected\n"},
		"BASH_FUNC_%%":  {env: map[string]string{"BASH_FUNC_echo%%": "() { touch injected; }"}},
		"SHELLOPTS+PS4": {env: map[string]string{"SHELLOPTS": "xtrace", "PS4": "$(touch injected)"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := writeFileNoFork(filepath.Join(dir, "deployed.sh"), []byte("#!"+bash+"\necho deployed\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			runRefused(t, Spec{ScriptsDir: dir, Script: "deployed.sh", Env: tc.env, Stdin: []byte(tc.stdin)},
				filepath.Join(dir, "injected"), fmt.Sprintf("env %v", tc.env), "bash")
		})
	}
}

// runRefused runs spec, whose env (what) would make interpreter run code
// that is not the deployed script's, and fails the test unless the run was
// refused (ErrStart) and the file injected, which that code would make, is
// not there.
func runRefused(t *testing.T, spec Spec, injected, what, interpreter string) {
	t.Helper()
	spec.Deadline = time.Now().Add(10 * time.Second)
	_, err := Run(context.Background(), spec)
	if _, serr := os.Stat(injected); serr == nil {
		t.Errorf("the command's %s made %s run code that is not the deployed script", what, interpreter)
	}
	if !errors.Is(err, ErrStart) {
		t.Errorf("Run = %v, want ErrStart refusing the variable, and nothing run", err)
	}
}

// TestCommandEnvCannotMakePythonRunOtherCode: python runs the .pth files
// of its user site-packages before the script: under PYTHONUSERBASE, or
// without it under HOME (~/.local), so a command naming a directory that
// holds one (any writable directory of the host will do) would run code
// that is not the deployed script.
func TestCommandEnvCannotMakePythonRunOtherCode(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	// The interpreter itself, not a wrapper (pyenv's shims are scripts
	// that want an environment of their own).
	out, err := exec.Command(python, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3 does not run: %v", err)
	}
	python = strings.TrimSpace(string(out))
	for _, name := range []string{"PYTHONUSERBASE", "HOME"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			cmd := exec.Command(python, "-c", "import site; print(site.getusersitepackages())")
			cmd.Env = []string{name + "=" + base}
			out, err := cmd.Output()
			if err != nil {
				t.Skipf("python3 has no user site: %v", err)
			}
			site := strings.TrimSpace(string(out))
			if !strings.HasPrefix(site, base+"/") {
				t.Fatalf("python3's user site with %s=%s is %s, not under it", name, base, site)
			}
			dir := t.TempDir()
			injected := filepath.Join(dir, "injected")
			if err := os.MkdirAll(site, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := writeFileNoFork(filepath.Join(site, "x.pth"), []byte("import os; open("+strconv.Quote(injected)+", 'w')\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := writeFileNoFork(filepath.Join(dir, "deployed.py"), []byte("#!"+python+"\nprint('deployed')\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			runRefused(t, Spec{ScriptsDir: dir, Script: "deployed.py", Env: map[string]string{name: base}}, injected, name, "python")
		})
	}
}

// TestCommandEnvCannotMovePythonsStandardLibrary: python builds the
// directory of its standard library from PYTHONPLATLIBDIR, relative to its
// prefix ("../.." leads out of it), and imports its encodings package from
// there as it starts: a command naming a directory that holds one would
// run code that is not the deployed script.
func TestCommandEnvCannotMovePythonsStandardLibrary(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	out, err := exec.Command(python, "-c", "import sys; print(sys.executable); print(sys.prefix); print('python%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		t.Skipf("python3 does not run: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 3 {
		t.Fatalf("python3 said %q", out)
	}
	python, prefix, version := lines[0], lines[1], lines[2]
	dir, planted := t.TempDir(), t.TempDir()
	injected := filepath.Join(dir, "injected")
	rel, err := filepath.Rel(prefix, planted)
	if err != nil {
		t.Fatal(err)
	}
	encodings := filepath.Join(planted, version, "encodings")
	if err := os.MkdirAll(encodings, 0o755); err != nil {
		t.Fatal(err)
	}
	// Too early for open(), which needs the codecs: posix is built in.
	code := "import posix\nposix.close(posix.open(" + strconv.Quote(injected) + ", posix.O_WRONLY | posix.O_CREAT, 0o644))\n"
	if err := writeFileNoFork(filepath.Join(encodings, "__init__.py"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFileNoFork(filepath.Join(dir, "deployed.py"), []byte("#!"+python+"\nprint('deployed')\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The planted package works: python run so imports it.
	check := exec.Command(filepath.Join(dir, "deployed.py"))
	check.Env = []string{"PYTHONPLATLIBDIR=" + rel}
	_ = check.Run() // it fails once the planted package has run: no codecs
	if err := os.Remove(injected); err != nil {
		t.Skipf("this python does not take its standard library from PYTHONPLATLIBDIR (%v): nothing to refuse", err)
	}
	runRefused(t, Spec{ScriptsDir: dir, Script: "deployed.py", Env: map[string]string{"PYTHONPLATLIBDIR": rel}}, injected, "PYTHONPLATLIBDIR", "python")
}

// TestCommandEnvCannotChooseWhereLuaFindsModules: lua's require finds a
// module through LUA_PATH (LUA_PATH_5_4, …), as python's import does
// through PYTHONPATH: a command naming a directory that holds a module of
// the name a deployed script requires would run it instead.
func TestCommandEnvCannotChooseWhereLuaFindsModules(t *testing.T) {
	t.Parallel()
	var lua string
	for _, name := range []string{"lua", "lua5.4", "lua5.3", "lua5.1"} {
		if p, err := exec.LookPath(name); err == nil {
			lua = p
			break
		}
	}
	if lua == "" {
		t.Skip("no lua")
	}
	for _, name := range []string{"LUA_PATH", "LUA_PATH_5_4"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir, planted := t.TempDir(), t.TempDir()
			injected := filepath.Join(dir, "injected")
			if err := writeFileNoFork(filepath.Join(planted, "helpers.lua"), []byte("io.open("+strconv.Quote(injected)+", 'w'):close()\nreturn {}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := writeFileNoFork(filepath.Join(dir, "deployed.lua"), []byte("#!"+lua+"\npcall(require, 'helpers')\nprint('deployed')\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			value := filepath.Join(planted, "?.lua")
			check := exec.Command(filepath.Join(dir, "deployed.lua"))
			check.Env = []string{name + "=" + value}
			if out, err := check.CombinedOutput(); err != nil {
				t.Skipf("lua does not run here: %v: %s", err, out)
			}
			if err := os.Remove(injected); err != nil {
				t.Skipf("this lua does not read %s (%v): nothing to refuse", name, err)
			}
			runRefused(t, Spec{ScriptsDir: dir, Script: "deployed.lua", Env: map[string]string{name: value}}, injected, name, "lua")
		})
	}
}

// TestCommandEnvCannotMakeGitRunOtherCode: a deployed script that calls
// git has it read the user's config under HOME or XDG_CONFIG_HOME, and
// core.fsmonitor there is a command git runs (git status will do). A
// command naming a directory that holds such a config would run code that
// is not the deployed script's.
func TestCommandEnvCannotMakeGitRunOtherCode(t *testing.T) {
	t.Parallel()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	for _, tc := range []struct{ name, config string }{
		{"HOME", ".gitconfig"},
		{"XDG_CONFIG_HOME", "git/config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, planted := t.TempDir(), t.TempDir()
			injected := filepath.Join(dir, "injected")
			config := filepath.Join(planted, tc.config)
			if err := os.MkdirAll(filepath.Dir(config), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := writeFileNoFork(config, []byte("[core]\n\tfsmonitor = \": >"+injected+"; false\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			script := "#!/bin/sh\ncd " + dir + " && " + git + " init -q repo && cd repo && " + git + " status --short\n"
			if err := writeFileNoFork(filepath.Join(dir, "deployed.sh"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			// The planted config works: git run so runs it.
			check := exec.Command("/bin/sh", filepath.Join(dir, "deployed.sh"))
			check.Env = []string{"PATH=/usr/bin:/bin", tc.name + "=" + planted}
			if out, err := check.CombinedOutput(); err != nil {
				t.Skipf("git does not run here: %v: %s", err, out)
			}
			if err := os.Remove(injected); err != nil {
				t.Skipf("this git does not run core.fsmonitor (%v): nothing to refuse", err)
			}
			if err := os.RemoveAll(filepath.Join(dir, "repo")); err != nil {
				t.Fatal(err)
			}
			runRefused(t, Spec{ScriptsDir: dir, Script: "deployed.sh", Env: map[string]string{tc.name: planted}}, injected, tc.name, "git")
		})
	}
}

// TestCommandEnvCannotChooseTheScriptsPrograms: a script's "#!/usr/bin/env
// sh" line, and every command it calls by name, find their program through
// PATH, before the script's first line can set it. A command's PATH naming
// a directory that holds a program of that name (any directory some user
// of the host may write to will do) would run it, as the proxy's user,
// instead of the deployed script. The run is refused and nothing runs.
func TestCommandEnvCannotChooseTheScriptsPrograms(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/env"); err != nil {
		t.Skip("no /usr/bin/env")
	}
	dir, planted := t.TempDir(), t.TempDir()
	injected := filepath.Join(dir, "injected")
	if err := writeFileNoFork(filepath.Join(planted, "sh"), []byte("#!/bin/sh\n: >"+injected+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFileNoFork(filepath.Join(dir, "deployed.sh"), []byte("#!/usr/bin/env sh\necho deployed\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"PATH", "Path"} {
		_, err := Run(context.Background(), Spec{
			ScriptsDir: dir, Script: "deployed.sh", Env: map[string]string{name: planted},
			Deadline: time.Now().Add(10 * time.Second),
		})
		if _, serr := os.Stat(injected); serr == nil {
			t.Fatalf("the command's %s made the deployed script's #! line run a program of the caller's choosing", name)
		}
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), strconv.Quote(name)) {
			t.Errorf("Run with %s = %v, want ErrStart naming the variable, and nothing run", name, err)
		}
	}
	// Without it, the proxy's own PATH finds the system's sh.
	res, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "deployed.sh", Deadline: time.Now().Add(10 * time.Second)})
	if err != nil || string(res.Stdout) != "deployed\n" {
		t.Errorf("Run without PATH: stdout %q, %v; want the deployed script's output", res.Stdout, err)
	}
}

// TestCommandEnvCannotChooseWhereTheScriptChangesDirectory: a shell's cd
// to a relative directory looks in CDPATH first, the current directory
// only when CDPATH lists it. A deployed script that runs "cd lib &&
// ./run.sh" would, given a command's CDPATH naming a directory that holds
// lib/run.sh (any directory some user of the host may write to will do),
// run that program instead of the deployed lib/run.sh. The run is refused
// and nothing runs.
func TestCommandEnvCannotChooseWhereTheScriptChangesDirectory(t *testing.T) {
	t.Parallel()
	dir, planted := t.TempDir(), t.TempDir()
	injected := filepath.Join(dir, "injected")
	for path, body := range map[string]string{
		filepath.Join(planted, "lib", "run.sh"): "#!/bin/sh\n: >" + injected + "\n",
		filepath.Join(dir, "lib", "run.sh"):     "#!/bin/sh\necho deployed\n",
		filepath.Join(dir, "deployed.sh"):       "#!/bin/sh\ncd lib >/dev/null && ./run.sh\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeFileNoFork(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Run(context.Background(), Spec{
		ScriptsDir: dir, Script: "deployed.sh", Env: map[string]string{"CDPATH": planted},
		Deadline: time.Now().Add(10 * time.Second),
	})
	if _, serr := os.Stat(injected); serr == nil {
		t.Fatal("the command's CDPATH made the deployed script run a program of the caller's choosing")
	}
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), `"CDPATH"`) {
		t.Errorf("Run with CDPATH = %v, want ErrStart naming the variable, and nothing run", err)
	}
	res, err := Run(context.Background(), Spec{ScriptsDir: dir, Script: "deployed.sh", Deadline: time.Now().Add(10 * time.Second)})
	if err != nil || string(res.Stdout) != "deployed\n" {
		t.Errorf("Run without CDPATH: stdout %q, %v; want the deployed script's output", res.Stdout, err)
	}
}

// TestCommandEnvCannotMakeGitOrTarRunACommand: git takes its config from
// variables with no file needed (GIT_CONFIG_COUNT/KEY/VALUE,
// GIT_CONFIG_PARAMETERS) or from a file one names (GIT_CONFIG_GLOBAL), and
// runs its core.fsmonitor at a script's git status; GNU tar takes options
// from TAR_OPTIONS, and runs --checkpoint-action=exec's command. A command
// setting them would run a command of the caller's choosing as the
// proxy's user, through a deployed script that calls git or tar. The run is
// refused, and nothing runs. Before, all of them ran it (a review, as
// root).
func TestCommandEnvCannotMakeGitOrTarRunACommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, tool, script string
		env                func(t *testing.T, injected, dir string) map[string]string
	}{
		{"GIT_CONFIG_COUNT", "git", "git init -q repo && cd repo && git status --short", func(_ *testing.T, injected, _ string) map[string]string {
			return map[string]string{"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": ": >" + injected + "; false"}
		}},
		{"GIT_CONFIG_PARAMETERS", "git", "git init -q repo && cd repo && git status --short", func(_ *testing.T, injected, _ string) map[string]string {
			return map[string]string{"GIT_CONFIG_PARAMETERS": "'core.fsmonitor'=': >" + injected + "; false'"}
		}},
		{"GIT_CONFIG_GLOBAL", "git", "git init -q repo && cd repo && git status --short", func(t *testing.T, injected, dir string) map[string]string {
			planted := filepath.Join(dir, "planted.cfg")
			if err := writeFileNoFork(planted, []byte("[core]\n\tfsmonitor = \": >"+injected+"; false\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return map[string]string{"GIT_CONFIG_GLOBAL": planted}
		}},
		// git runs EDITOR, when GIT_EDITOR and core.editor are unset, for
		// a commit without a message (a review).
		{"EDITOR", "git", "git init -q repo && cd repo && git -c user.email=a@b -c user.name=a commit -q --allow-empty", func(_ *testing.T, injected, _ string) map[string]string {
			return map[string]string{"EDITOR": ": >" + injected + "; echo message >"}
		}},
		{"TAR_OPTIONS", "tar", "tar -cf archive.tar deployed.sh", func(_ *testing.T, injected, _ string) map[string]string {
			return map[string]string{"TAR_OPTIONS": "--checkpoint=1 --checkpoint-action=exec=touch\\ " + injected}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool, err := exec.LookPath(tc.tool)
			if err != nil {
				t.Skipf("no %s", tc.tool)
			}
			dir := t.TempDir()
			injected := filepath.Join(dir, "injected")
			env := tc.env(t, injected, dir)
			script := "#!/bin/sh\ncd " + dir + " && PATH=" + filepath.Dir(tool) + ":$PATH && " + tc.script + "\n"
			if err := writeFileNoFork(filepath.Join(dir, "deployed.sh"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			// The variable works: the script run with it runs the command.
			check := exec.Command("/bin/sh", filepath.Join(dir, "deployed.sh"))
			check.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
			for k, v := range env {
				check.Env = append(check.Env, k+"="+v)
			}
			if out, err := check.CombinedOutput(); err != nil {
				t.Skipf("%s does not run here: %v: %s", tc.tool, err, out)
			}
			if err := os.Remove(injected); err != nil {
				t.Skipf("this %s does not run the command (%v): nothing to refuse", tc.tool, err)
			}
			for _, f := range []string{"repo", "archive.tar"} {
				if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
			}
			runRefused(t, Spec{ScriptsDir: dir, Script: "deployed.sh", Env: env}, injected, tc.name, tc.tool)
		})
	}
}
