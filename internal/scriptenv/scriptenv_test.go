package scriptenv

import (
	"strconv"
	"strings"
	"testing"
)

// TestRefusesVariablesThatMakeAnInterpreterRunOtherCode: each of these
// makes a shell, an interpreter or the loader run code that is not the
// deployed script's (see names), or chooses the programs it runs (PATH,
// PATHEXT; CDPATH, CD: the directory its relative paths name; HOME and
// its windows twins: where programs find their user's configuration and
// code); a lower-case twin is refused too.
func TestRefusesVariablesThatMakeAnInterpreterRunOtherCode(t *testing.T) {
	for _, k := range []string{
		"BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "BASH_FUNC_echo%%", "ZDOTDIR",
		"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "GCONV_PATH", "GLIBC_TUNABLES",
		"PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB",
		"PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONWARNINGS", "PYTHONUSERBASE",
		"PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX",
		"NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB", "RUBYGEMS_GEMDEPS",
		"LUA_INIT", "LUA_INIT_5_4", "LUA_PATH", "LUA_PATH_5_4", "LUA_CPATH", "LUA_CPATH_5_4", "PHPRC", "PHP_INI_SCAN_DIR",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "COMSPEC", "PSModulePath",
		"COR_ENABLE_PROFILING", "COR_PROFILER", "COR_PROFILER_PATH", "COR_PROFILER_PATH_64",
		"CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER_PATH", "DOTNET_ENABLE_PROFILING", "DOTNET_PROFILER_PATH",
		"DOTNET_STARTUP_HOOKS", "cor_profiler_path",
		"SystemRoot", "SYSTEMROOT", "windir", "ProgramFiles", "ProgramFiles(x86)", "ProgramW6432",
		"CommonProgramFiles", "CommonProgramFiles(x86)", "CommonProgramW6432",
		"COMPlus_InstallRoot", "COMPLUS_VERSION",
		"ld_preload", "rubygems_gemdeps",
		"PATH", "Path", "PATHEXT",
		"CDPATH", "cdpath", "CD", "Cd", "__CD__",
		"HOME", "home", "XDG_CONFIG_HOME", "USERPROFILE", "UserProfile", "HOMEDRIVE", "HOMEPATH", "APPDATA", "LocalAppData",
		"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
		"GIT_DIR", "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "GIT_TRACE",
		"GIT_TRACE_PACKET", "GIT_ALLOW_PROTOCOL", "GIT_REDIRECT_STDERR", "git_dir",
		"TAR_OPTIONS", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "RSYNC_RSH", "RSYNC_CONNECT_PROG", "SSH_ASKPASS", "WGETRC",
		"SUDO_ASKPASS", "LESSOPEN", "MAKEFLAGS", "MAKEFILES", "GOFLAGS", "CLASSPATH", "RUSTC_WRAPPER", "BUNDLE_GEMFILE",
		"SHELL", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "FTP_PROXY", "HOSTALIASES", "RESOLV_HOST_CONF",
		"PYTHONBREAKPOINT", "GEM_HOME", "GEM_PATH", "LOCPATH", "NLSPATH",
		"KUBECONFIG", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "npm_config_script_shell", "PIP_INDEX_URL", "PIP_CONFIG_FILE",
		"GIT_SSL_NO_VERIFY", "GIT_SSL_CAINFO", "GNUMAKEFLAGS", "GOENV", "RUSTC", "CARGO_BUILD_RUSTC_WRAPPER", "KUBECTL_EXTERNAL_DIFF",
		"BUNDLE_APP_CONFIG", "SUDO_EDITOR", "LESSKEYIN", "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER", "RUSTDOC", "RUSTFLAGS",
		"CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
		"EDITOR", "VISUAL", "PSQLRC", "PSQL_EDITOR", "KUBE_EDITOR", "SYSTEMD_EDITOR", "GH_EDITOR", "SVN_EDITOR", "HGEDITOR",
		"TF_CLI_ARGS", "TF_CLI_ARGS_plan", "PGSSLKEYLOGFILE", "ANSIBLE_LIBRARY", "ANSIBLE_ROLES_PATH", "ANSIBLE_ACTION_PLUGINS",
		"ANSIBLE_COLLECTIONS_PATHS", "ANSIBLE_MODULE_UTILS", "ANSIBLE_VAULT_PASSWORD_FILE", "CLOUDSDK_PYTHON", "CLOUDSDK_PYTHON_ARGS", "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES",
		"TF_CLI_CONFIG_FILE", "TERRAFORM_CONFIG", "ANSIBLE_CONFIG", "AZURE_EXTENSION_DIR", "SSLKEYLOGFILE", "editor",
	} {
		err := Refused(k)
		if err == nil {
			t.Errorf("Refused(%q) = nil, want it refused", k)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(k)) {
			t.Errorf("Refused(%q) = %q, which does not name the variable", k, err)
		}
	}
}

// TestAcceptsCommonNames: names a command commonly sets, some of them
// read by an interpreter without making it run other code, pass.
func TestAcceptsCommonNames(t *testing.T) {
	for _, k := range []string{
		"ENV", "PROMPT_COMMAND", "LANG", "LC_ALL", "TZ", "TMPDIR", "IFS",
		"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "NODE_ENV", "RUBY_ENV", "RAILS_ENV",
		"DEPLOY_TARGET", "LUA", "PHP_VERSION", "PROXY_WORK_ID",
		"DOTNET_ENVIRONMENT", "DOTNET_CLI_TELEMETRY_OPTOUT", "CORS_ORIGIN", "CD_TARGET", "CDN_URL",
		"GITHUB_TOKEN", "GITLAB_URL", "TAR_FILE", "OPENSSL_VERSION", "RSYNC_TARGET", "SSH_HOST",
		// Names git does not read, which CI systems set and deploys pass on.
		"GIT_COMMIT", "GIT_BRANCH", "GIT_SHA", "GIT_TAG", "GIT_URL", "GIT_AUTHOR_NAME", "MAKE_TARGET", "AWS_REGION", "PIPELINE_ID",
		// Settings of the same tools that run nothing.
		"CLOUDSDK_CORE_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS", "PGHOST", "TF_VAR_region", "ANSIBLE_HOST_KEY_CHECKING",
		// Pagers run only on a terminal, and callers set these to turn
		// paging off.
		"PAGER", "AWS_PAGER", "GH_PAGER", "PSQL_PAGER", "MANPAGER", "ANSIBLE_FORCE_COLOR", "EDITOR_X", "PAGE_SIZE",
	} {
		if err := Refused(k); err != nil {
			t.Errorf("Refused(%q) = %v, want it accepted", k, err)
		}
	}
}

// TestValidName: a name no environment block can hold is refused, and
// only that (docs/api.md, docs/security.md): empty, or holding '=' or a NUL
// byte anywhere, windows' hidden per-drive "=C:" included. Anything else
// a process can take passes, though no shell could name it in a script: a
// leading digit, white space, punctuation, letters beyond ASCII.
func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"", false},
		{"=", false},
		{"==", false},
		{"A=", false},
		{"=A", false},
		{"A=B", false},
		{"=C:", false}, // windows' current directory of drive C:
		{"\x00", false},
		{"\x00A", false},
		{"A\x00", false},
		{"A\x00B", false},
		{"A=\x00", false},

		{"A", true},
		{"_", true},
		{"PATH", true},
		{"lower_case", true},
		{"1", true},
		{"9LIVES", true},
		{" ", true},
		{"A B", true},
		{"\tA", true},
		{"A-B.C:D", true},
		{"ProgramFiles(x86)", true}, // windows sets it
		{"ÉTÉ", true},
		{"名前", true},
		{"A\u2260B", true}, // '≠', not '='
		{"A\uFF1DB", true}, // fullwidth '＝', not '='
	} {
		if got := ValidName(tc.name); got != tc.want {
			t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAllowlist: allowed_env allows the names it lists, and those its
// NAME_* entries begin, and nothing else ("*" every name); an empty list
// allows none.
// An entry that names no variable (empty, '=', a '*' inside) is refused,
// saying why; one that allows nothing a command could set (a name refused
// everywhere, NAME_* inside a family refused as a whole) is told as
// useless, not refused, so that a proxy's config stays valid when a newer
// release refuses more.
func TestAllowlist(t *testing.T) {
	l := Allowlist{"DEPLOY_TARGET", "APP_*"}
	for k, want := range map[string]bool{
		"DEPLOY_TARGET": true, "APP_MODE": true, "APP_": true,
		"APP": false, "DEPLOY_TARGET2": false, "OTHER": false, "DEPLOY": false,
	} {
		if got := l.Allows(k); got != want {
			t.Errorf("%v.Allows(%q) = %v, want %v", l, k, got, want)
		}
	}
	if (Allowlist{}).Allows("ANY") || (Allowlist{}).AllowsAny() {
		t.Error("an empty list allows a name; want none allowed")
	}
	if any := (Allowlist{"DEPLOY_TARGET", "*"}); !any.Allows("ANY") || !any.AllowsAny() || any.Check() != nil || len(any.Useless()) != 0 {
		t.Errorf(`%v: Allows("ANY") = %v, AllowsAny() = %v, Check() = %v, Useless() = %q; want every name allowed, told, valid and not useless`, any, any.Allows("ANY"), any.AllowsAny(), any.Check(), any.Useless())
	}
	if l.AllowsAny() {
		t.Errorf("%v.AllowsAny() = true", l)
	}
	if err, useless := l.Check(), l.Useless(); err != nil || len(useless) != 0 {
		t.Errorf("%v: Check() = %v, Useless() = %q; want neither", l, err, useless)
	}
	for _, tc := range []struct{ entry, says string }{
		{"", "not a variable name"},
		{"A=B", "not a variable name"},
		{"A*B", "'*' may only end an entry"},
	} {
		err := Allowlist{"DEPLOY_TARGET", tc.entry}.Check()
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Check of %q = %v, want an error saying %q", tc.entry, err, tc.says)
		}
	}
	for _, tc := range []struct{ entry, says string }{
		{"PATH", `environment variable "PATH" is refused`},
		{"GIT_DIR", "whatever allowed_env says"},
		{"LD_*", "every name beginning LD_ is refused"},
		{"GIT_CONFIG*", "every name beginning GIT_CONFIG is refused"},
		{"pip_*", "every name beginning PIP_ is refused"},
	} {
		l := Allowlist{"DEPLOY_TARGET", tc.entry, "GIT_*"}
		if err := l.Check(); err != nil {
			t.Errorf("Check of %q = %v, want it valid (told as useless)", tc.entry, err)
		}
		if u := l.Useless(); len(u) != 1 || !strings.Contains(u[0], tc.says) {
			t.Errorf("Useless of %q = %q, want one line saying %q", tc.entry, u, tc.says)
		}
	}
}
