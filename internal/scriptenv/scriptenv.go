// Package scriptenv says which environment variables a command may not set
// for its script. Both the automator (at submit) and the proxy (before it
// starts anything) refuse them: a command runs a deployed script, with
// arguments, stdin and env, and nothing else.
package scriptenv

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// names are variables whose value a shell, an interpreter or the dynamic
// loader turns into code it runs or loads before, or instead of, the
// script's own: bash sources BASH_ENV (BASH_ENV=/dev/stdin runs the
// command's stdin; its value is expanded, command substitution included),
// SHELLOPTS=xtrace makes it expand PS4 at every command, zsh sources
// $ZDOTDIR/.zshenv even for a script, PERL5OPT=-M… runs code, python runs
// the .pth files of PYTHONUSERBASE's site-packages, rubygems evaluates the
// Gemfile RUBYGEMS_GEMDEPS names, php reads the php.ini PHPRC names (whose
// auto_prepend_file runs first), and so on. (ENV and PROMPT_COMMAND are
// read by interactive shells only, never by one running a script: refusing
// them would only refuse a common name such as ENV=production.
// PYTHONSTARTUP is interactive-only too, but no other program uses the
// name, so refusing it costs nothing.)
var names = map[string]bool{
	"BASH_ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "PS4": true, "ZDOTDIR": true,
	"GCONV_PATH": true, "GLIBC_TUNABLES": true,
	"PERL5OPT": true, "PERL5LIB": true, "PERLLIB": true, "PERL5DB": true,
	"PYTHONSTARTUP": true, "PYTHONPATH": true, "PYTHONHOME": true, "PYTHONWARNINGS": true, "PYTHONUSERBASE": true,
	// python builds its standard library's directory from PYTHONPLATLIBDIR
	// (a relative path leads out of its prefix), and loads the compiled
	// modules under PYTHONPYCACHEPREFIX: both before the script's first line.
	"PYTHONPLATLIBDIR": true, "PYTHONPYCACHEPREFIX": true,
	// python calls the callable PYTHONBREAKPOINT names at a breakpoint();
	// rubygems loads gems from GEM_HOME and GEM_PATH, as RUBYLIB (a
	// review).
	"PYTHONBREAKPOINT": true, "GEM_HOME": true, "GEM_PATH": true,
	"NODE_OPTIONS": true, "NODE_PATH": true, "RUBYOPT": true, "RUBYLIB": true, "RUBYGEMS_GEMDEPS": true,
	"PHPRC": true, "PHP_INI_SCAN_DIR": true,
	"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true,
	// windows: cmd.exe runs COMSPEC for each side of a pipe in a batch
	// file; PowerShell loads modules from PSModulePath (a share will do).
	"COMSPEC": true, "PSMODULEPATH": true,
	// .NET, which powershell.exe runs on: with profiling enabled, the
	// runtime loads the profiler DLL COR_PROFILER_PATH names (a share will
	// do) into the process before any script code; a .NET (Core) program
	// loads the assemblies of DOTNET_STARTUP_HOOKS before its Main.
	"COR_ENABLE_PROFILING": true, "DOTNET_ENABLE_PROFILING": true, "DOTNET_STARTUP_HOOKS": true,
	// windows' own folders, which windows and its programs take from the
	// process's environment to find the DLLs they load: the side-by-side
	// loader, Winsock (%SystemRoot%\System32\mswsock.dll) and COM servers
	// registered as %SystemRoot%\..., %windir%\... or
	// %CommonProgramFiles%\..., and powershell.exe's module path
	// (%ProgramFiles%\WindowsPowerShell\Modules and
	// %SystemRoot%\system32\WindowsPowerShell\v1.0\Modules, as PSModulePath
	// is unset). The script gets the proxy's own SystemRoot, windir and
	// ProgramFiles.
	"SYSTEMROOT": true, "WINDIR": true,
	"PROGRAMFILES": true, "PROGRAMFILES(X86)": true, "PROGRAMW6432": true,
	"COMMONPROGRAMFILES": true, "COMMONPROGRAMFILES(X86)": true, "COMMONPROGRAMW6432": true,
}

// prefixes: the dynamic loader's variables (LD_PRELOAD, LD_AUDIT,
// LD_LIBRARY_PATH, …; DYLD_* on macOS), bash's exported functions
// (BASH_FUNC_name%%), which replace the commands a script calls, and lua's
// LUA_INIT (and LUA_INIT_5_4, …), whose value lua runs as code before the
// script, and LUA_PATH and LUA_CPATH (and LUA_PATH_5_4, …), where its
// require finds modules, as PYTHONPATH is python's, and the .NET profiler's (COR_PROFILER, COR_PROFILER_PATH,
// COR_PROFILER_PATH_64, …; CORECLR_* and, from .NET 11, DOTNET_PROFILER*
// for .NET Core), and the .NET Framework runtime's own settings (COMPlus_*:
// COMPlus_InstallRoot and COMPlus_Version choose the runtime directory
// whose DLLs powershell.exe loads).
var prefixes = []string{"LD_", "DYLD_", "BASH_FUNC_", "LUA_INIT", "LUA_PATH", "LUA_CPATH", "COR_PROFILER", "CORECLR_", "DOTNET_PROFILER", "COMPLUS_"}

// libcFiles are the variables that point the C library of every program a
// script runs at files it parses as the program starts: glibc's locale
// data (LOCPATH) and message catalogs (NLSPATH), which its parsers trust
// (a review).
var libcFiles = map[string]bool{"LOCPATH": true, "NLSPATH": true}

// searchPath are the variables that choose which program a name runs: the
// interpreter of a "#!/usr/bin/env python3" line, found before the
// script's first line runs, and every command the script calls by name.
// Set by a command, a directory of its choosing (one that any user of the
// proxy's host may write to will do) would run that user's programs as the
// proxy's user, root or LocalSystem as often as not. The script gets the
// proxy's own PATH; one that wants another sets it itself. PATHEXT is
// windows' list of the extensions a name is tried with.
var searchPath = map[string]bool{"PATH": true, "PATHEXT": true}

// workingDir are the variables that choose the directory a script's
// relative paths name, hence the programs it runs by one: a shell's cd to
// a relative directory ("cd lib && ./run.sh") looks in CDPATH first (the
// current directory only if CDPATH lists it), and cmd.exe expands %CD%
// and %__CD__% to a variable of that name, when one is set, instead of
// the current directory ("%CD%\tool.exe").
var workingDir = map[string]bool{"CDPATH": true, "CD": true, "__CD__": true}

// homeDir are the variables that choose the folders where programs find
// their user's own configuration and code, before the script's first line
// can set them: python runs the .pth files of the user site-packages under
// HOME (~/.local) or, on windows, APPDATA, as PYTHONUSERBASE's; git reads
// the config under HOME or XDG_CONFIG_HOME (on windows also HOMEDRIVE and
// HOMEPATH, or USERPROFILE), whose core.fsmonitor is a command it runs.
// The script gets the proxy's own HOME (USERPROFILE, APPDATA and
// LOCALAPPDATA on windows).
var homeDir = map[string]bool{
	"HOME": true, "XDG_CONFIG_HOME": true,
	"USERPROFILE": true, "HOMEDRIVE": true, "HOMEPATH": true, "APPDATA": true, "LOCALAPPDATA": true,
}

// tools are the variables of programs that scripts call all the time
// which make them run a command, or load code, of the value's choosing:
// GNU tar takes options from TAR_OPTIONS
// (--checkpoint-action=exec=CMD, --use-compress-program=CMD); every
// program linked with OpenSSL (curl, wget, python's ssl, …) loads the
// config file OPENSSL_CONF names, whose engines and providers are shared
// objects it loads, from OPENSSL_ENGINES or OPENSSL_MODULES as it says;
// rsync runs RSYNC_RSH as its remote shell and RSYNC_CONNECT_PROG as its
// connection; ssh runs SSH_ASKPASS, sudo SUDO_ASKPASS, for a password;
// wget reads the wgetrc WGETRC names, whose use_askpass is a command it
// runs; less runs LESSOPEN and LESSCLOSE; make takes options from
// MAKEFLAGS (SHELL=CMD) and reads the makefiles MAKEFILES names; go takes
// flags from GOFLAGS (-toolexec=CMD), also from the file GOENV names, and
// GNU make from GNUMAKEFLAGS too; java loads classes from CLASSPATH; cargo
// runs RUSTC, RUSTDOC and their wrappers (RUSTC_WRAPPER, and the
// CARGO_BUILD_ forms), passes RUSTFLAGS to rustc (-C linker=CMD) and runs
// the linker and runner of CARGO_TARGET_*; bundler loads BUNDLE_GEMFILE
// and the config in BUNDLE_APP_CONFIG; kubectl runs the exec plugin of
// the kubeconfig KUBECONFIG names, and KUBECTL_EXTERNAL_DIFF; the AWS CLI
// and SDKs the credential_process of AWS_CONFIG_FILE or
// AWS_SHARED_CREDENTIALS_FILE; sudoedit runs SUDO_EDITOR; less reads the
// key bindings of LESSKEY and LESSKEYIN, which may set LESSOPEN. The
// generic EDITOR and VISUAL, which git (for a commit without a message,
// a rebase, …), sudoedit, crontab and others run, through a shell, when
// their own names are unset (a review: git ran EDITOR's command, with
// GIT_EDITOR refused), and the editors of psql, kubectl (edit), systemctl
// (edit), gh, svn and hg, which run with no terminal too (pagers are run
// only when the output is a terminal, never a script's: PAGER=cat and
// AWS_PAGER="", which callers set to turn paging off, pass); psql's
// PSQLRC, whose \! lines it runs; gcloud's CLOUDSDK_PYTHON and
// CLOUDSDK_PYTHON_ARGS (its launcher runs python with them: "-c CODE"), and
// GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES, which lets Google's
// libraries run the executable a credential file names; terraform's
// TF_CLI_CONFIG_FILE (and its old name TERRAFORM_CONFIG), whose
// provider_installation runs providers from a directory it names;
// terraform's TF_CLI_ARGS (and TF_CLI_ARGS_cmd), options such as
// -plugin-dir; ansible's ANSIBLE_CONFIG, whose plugin paths are code it
// loads, and those paths themselves (ansiblePath); the az CLI's
// AZURE_EXTENSION_DIR, python it loads; and SSLKEYLOGFILE (libpq's
// PGSSLKEYLOGFILE), where programs linked with OpenSSL, curl and the like
// write the keys of their TLS sessions. SHELL, the program that flock -c,
// ssh's ProxyCommand and LocalCommand, script(1), screen and others run
// their command with (a review: flock ran perl). The proxies that curl,
// wget, pip, npm, git and most HTTP libraries send their requests through
// (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, FTP_PROXY, in either case), and
// glibc's HOSTALIASES and RESOLV_HOST_CONF, which rename the hosts they
// reach: whoever answers there serves what a script downloads over plain
// HTTP and installs or runs.
// And git, which takes its configuration from variables (GIT_CONFIG_COUNT
// with GIT_CONFIG_KEY_0 and GIT_CONFIG_VALUE_0, GIT_CONFIG_PARAMETERS:
// core.fsmonitor, core.sshCommand, … are commands it runs) or from files
// they name (GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM), its repository, whose
// hooks and config it runs (GIT_DIR, GIT_COMMON_DIR, GIT_WORK_TREE,
// GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_DISCOVERY_ACROSS_FILESYSTEM),
// its helpers (GIT_EXEC_PATH, GIT_TEMPLATE_DIR), the programs it runs
// (GIT_SSH, GIT_SSH_COMMAND, GIT_EXTERNAL_DIFF, GIT_ASKPASS,
// GIT_PROXY_COMMAND, GIT_PAGER, GIT_EDITOR, GIT_SEQUENCE_EDITOR) and the
// transports it may use (GIT_ALLOW_PROTOCOL: ext:: runs a command); it
// writes its trace to any file GIT_TRACE* names. Names git does not read
// (GIT_COMMIT, GIT_BRANCH, set by CI systems) pass.
var tools = map[string]bool{
	"TAR_OPTIONS":  true,
	"OPENSSL_CONF": true, "OPENSSL_ENGINES": true, "OPENSSL_MODULES": true,
	"RSYNC_RSH": true, "RSYNC_CONNECT_PROG": true,
	"SSH_ASKPASS": true, "SUDO_ASKPASS": true, "WGETRC": true, "LESSOPEN": true, "LESSCLOSE": true,
	"MAKEFLAGS": true, "GNUMAKEFLAGS": true, "MAKEFILES": true, "GOFLAGS": true, "GOENV": true, "CLASSPATH": true,
	"RUSTC": true, "RUSTC_WRAPPER": true, "RUSTC_WORKSPACE_WRAPPER": true, "RUSTDOC": true, "RUSTFLAGS": true, "CARGO_ENCODED_RUSTFLAGS": true,
	"CARGO_BUILD_RUSTC": true, "CARGO_BUILD_RUSTC_WRAPPER": true, "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER": true, "CARGO_BUILD_RUSTDOC": true,
	"BUNDLE_GEMFILE": true, "BUNDLE_APP_CONFIG": true, "SUDO_EDITOR": true, "LESSKEY": true, "LESSKEYIN": true,
	"KUBECONFIG": true, "KUBECTL_EXTERNAL_DIFF": true, "AWS_CONFIG_FILE": true, "AWS_SHARED_CREDENTIALS_FILE": true,
	"GIT_DIR": true, "GIT_COMMON_DIR": true, "GIT_WORK_TREE": true, "GIT_INDEX_FILE": true,
	"GIT_OBJECT_DIRECTORY": true, "GIT_ALTERNATE_OBJECT_DIRECTORIES": true, "GIT_DISCOVERY_ACROSS_FILESYSTEM": true,
	"GIT_EXEC_PATH": true, "GIT_TEMPLATE_DIR": true,
	"GIT_EXTERNAL_DIFF": true, "GIT_ASKPASS": true, "GIT_PROXY_COMMAND": true,
	"GIT_PAGER": true, "GIT_EDITOR": true, "GIT_SEQUENCE_EDITOR": true,
	"GIT_ALLOW_PROTOCOL": true, "GIT_PROTOCOL_FROM_USER": true,
	"EDITOR": true, "VISUAL": true, "PSQLRC": true,
	"PSQL_EDITOR": true, "KUBE_EDITOR": true, "SYSTEMD_EDITOR": true, "GH_EDITOR": true, "SVN_EDITOR": true, "HGEDITOR": true,
	"CLOUDSDK_PYTHON": true, "CLOUDSDK_PYTHON_ARGS": true, "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": true,
	"TF_CLI_CONFIG_FILE": true, "TERRAFORM_CONFIG": true, "ANSIBLE_CONFIG": true, "AZURE_EXTENSION_DIR": true,
	"SSLKEYLOGFILE": true, "PGSSLKEYLOGFILE": true,
	"SHELL":      true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "FTP_PROXY": true,
	"HOSTALIASES": true, "RESOLV_HOST_CONF": true,
}

// ansiblePath tells whether u names one of ansible's paths to code it
// loads: its plugins (ANSIBLE_ACTION_PLUGINS, ANSIBLE_CALLBACK_PLUGINS,
// …), modules (ANSIBLE_LIBRARY, ANSIBLE_MODULE_UTILS), roles and
// collections (ANSIBLE_ROLES_PATH, ANSIBLE_COLLECTIONS_PATH), and the
// vault password file, which it runs when it is executable.
func ansiblePath(u string) bool {
	if !strings.HasPrefix(u, "ANSIBLE_") {
		return false
	}
	for _, suffix := range []string{"_PLUGINS", "_PATH", "_PATHS", "_LIBRARY", "_MODULE_UTILS", "_PASSWORD_FILE"} {
		if strings.HasSuffix(u, suffix) {
			return true
		}
	}
	return false
}

// toolPrefixes are tools' families of names: cargo's per-target linker
// and runner (CARGO_TARGET_<TRIPLE>_LINKER, _RUNNER), git's config and trace
// variables, its ssh (GIT_SSH, GIT_SSH_COMMAND, GIT_SSH_VARIANT), its TLS
// settings (GIT_SSL_NO_VERIFY turns the server's checking off,
// GIT_SSL_CAINFO trusts another CA) and, on
// windows, the files it redirects its standard streams to; npm's config
// (npm_config_script_shell runs a command); pip's (PIP_INDEX_URL installs
// what that index serves, PIP_CONFIG_FILE).
var toolPrefixes = []string{"GIT_CONFIG", "GIT_TRACE", "GIT_SSH", "GIT_SSL", "GIT_REDIRECT_", "NPM_CONFIG_", "PIP_", "CARGO_TARGET_", "TF_CLI_ARGS"}

// Refused returns an error naming variable k when a command may not set
// it, nil otherwise. Names are compared in upper case on every OS:
// refusing a lower-case twin costs nothing, and windows names are
// case-insensitive. The list cannot be complete (a script may hand a
// variable to any program it calls): it holds those that make the common
// interpreters and the loader run code before the script's own, and
// those of the programs scripts call most that make them run a command.
// A proxy's allowed_env narrows what it takes to the names it lists.
func Refused(k string) error {
	u := strings.ToUpper(k)
	if searchPath[u] {
		return fmt.Errorf("environment variable %q is refused: it chooses the programs that the script's #! line and the commands it calls run; the script gets the proxy's own, and sets another itself if it needs one", k)
	}
	if libcFiles[u] {
		return fmt.Errorf("environment variable %q is refused: it points the C library of every program the script runs at locale or message files of the caller's choosing, which it parses as each program starts", k)
	}
	if workingDir[u] {
		return fmt.Errorf("environment variable %q is refused: it chooses the directory that the script's relative paths name (a shell's cd, cmd.exe's %%CD%%), hence the programs it runs by one", k)
	}
	if homeDir[u] {
		return fmt.Errorf("environment variable %q is refused: it chooses the folder where programs find their user's own configuration and code (python's user site-packages, whose .pth files it runs as it starts; git's config, whose core.fsmonitor it runs); the script gets the proxy's own, and sets another itself if it needs one", k)
	}
	tool := tools[u] || ansiblePath(u)
	for _, p := range toolPrefixes {
		tool = tool || strings.HasPrefix(u, p)
	}
	if tool {
		return fmt.Errorf("environment variable %q is refused: a program that scripts call (git, tar, make, go, npm, pip, rsync, ssh, flock, curl, kubectl, aws, gcloud, psql, terraform, any linked with OpenSSL, …) reads it, and may run a command, load code, trust a server, send its requests through another host or write its secrets where it says; a script that needs it sets it itself", k)
	}
	refused := names[u]
	for _, p := range prefixes {
		refused = refused || strings.HasPrefix(u, p)
	}
	if refused {
		return fmt.Errorf("environment variable %q is refused: it makes a shell, an interpreter or the dynamic loader run code of its own, and a command runs deployed scripts only", k)
	}
	return nil
}

// ValidName reports whether k can name a process's environment variable at
// all: not empty, and holding no '=' or NUL byte (an environment block is
// NUL-terminated strings of NAME=value). Its value may hold no NUL byte.
func ValidName(k string) bool {
	return k != "" && !strings.ContainsAny(k, "=\x00")
}

// Allowlist is a proxy's allowed_env: the only variables a command may set
// for its scripts, besides the PROXY_ ones the proxy sets itself. An entry
// ending in '*' allows every name it begins ("*" alone: every name); the
// others allow one name each. Names are compared as the OS does (in upper
// case on windows). It narrows what Refused lets through, and never widens
// it. An empty list allows nothing: Refused cannot be complete (zip runs
// a command from ZIPOPT, make's built-in rules one from CC), so a command
// sets only the variables the proxy's operator named (a review).
type Allowlist []string

// Allows reports whether the list lets a command set variable k.
func (l Allowlist) Allows(k string) bool {
	k = foldName(k)
	for _, e := range l {
		e = foldName(e)
		if p, prefix := strings.CutSuffix(e, "*"); prefix && strings.HasPrefix(k, p) || e == k {
			return true
		}
	}
	return false
}

// Check refuses an entry that names no variable: empty, holding '=' or
// NUL, or a '*' elsewhere than at its end.
func (l Allowlist) Check() error {
	var errs []error
	for _, e := range l {
		name, _ := strings.CutSuffix(e, "*")
		switch {
		case e == "" || strings.ContainsAny(e, "=\x00"):
			errs = append(errs, fmt.Errorf("%q is not a variable name (empty, or holding '=' or NUL)", e))
		case strings.Contains(name, "*"):
			errs = append(errs, fmt.Errorf("%q: '*' may only end an entry (NAME_* allows every name beginning NAME_)", e))
		}
	}
	return errors.Join(errs...)
}

// AllowsAny reports whether the list holds "*", which lets a command set
// every variable Refused lets through; the proxy warns of it as it starts.
func (l Allowlist) AllowsAny() bool {
	return slices.Contains(l, "*")
}

// AnyWarning is the proxy's warning of an allowed_env holding "*".
const AnyWarning = `allowed_env holds "*": a command may set any variable not refused everywhere, and the refusals cannot be complete: one that a program the scripts call reads a command or code from (zip's ZIPOPT, make's CC, ...) runs it as this proxy's user; list the names the scripts take instead`

// Useless says, for each entry that allows nothing Refused lets through
// (a name refused for every command, or NAME_* inside a family refused as
// a whole), why; the proxy warns of them as it starts. Not refused as an
// error: a proxy whose allowed_env lists a name that a newer release
// refuses starts all the same after an upgrade.
func (l Allowlist) Useless() []string {
	var out []string
	for _, e := range l {
		name, prefix := strings.CutSuffix(e, "*")
		if !prefix {
			if err := Refused(e); err != nil {
				out = append(out, fmt.Sprintf("%v, whatever allowed_env says: it only narrows what a command may set", err))
			}
			continue
		}
		for _, p := range append(slices.Clone(prefixes), toolPrefixes...) {
			if strings.HasPrefix(strings.ToUpper(name), p) {
				out = append(out, fmt.Sprintf("%q allows nothing: every name beginning %s is refused, whatever allowed_env says: it only narrows what a command may set", e, p))
				break
			}
		}
	}
	return out
}

// foldName is a variable's identity: names are case-insensitive on
// windows only.
func foldName(k string) string {
	if runtime.GOOS == "windows" {
		return strings.ToUpper(k)
	}
	return k
}
