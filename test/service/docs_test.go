//go:build linux

package service

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The operator's pages of issue 5, the replicas' page (its compose
// commands), and their titles.
var docPages = map[string]string{
	"install-proxy.md":      "Install the proxy",
	"active-active.md":      "Run two proxies active/active",
	"warm-standby.md":       "Keep a warm standby and fail over",
	"upgrade-proxy.md":      "Upgrade a proxy",
	"several-automators.md": "Run several automators",
	"backup.md":             "Back up and restore the automator",
}

type codeBlock struct {
	lang  string
	lines []string
}

func codeBlocks(text string) []codeBlock {
	var blocks []codeBlock
	var cur *codeBlock
	for _, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "```") {
			if cur != nil {
				cur.lines = append(cur.lines, t)
			}
			continue
		}
		if cur == nil {
			cur = &codeBlock{lang: strings.TrimPrefix(t, "```")}
		} else {
			blocks = append(blocks, *cur)
			cur = nil
		}
	}
	return blocks
}

var (
	// A proxy or automator command: the program (its path, .exe, quotes
	// aside), the `--service NAME` of a service's command line, the verb and
	// what follows up to a shell separator.
	cliCall = regexp.MustCompile(`(?:^|[\s'"/\\&;(])(proxy|automator)(?:\.exe)?['"]?\s+(?:(--service)\s+\S+\s+)?(install|start|stop|status|uninstall|run|exec|account (?:create|list|rotate-token|rotate-key|delete)|apikey (?:create|list|revoke)|audit|cert renew|instances|work (?:list|show|wait|cancel)|init|serve|replicas|backup|restore)\b([^;&|>]*)`)
	flagRef = regexp.MustCompile(`(?:^|\s)(--?[a-z][a-z-]*)`)
)

// cliHelps holds the usage of each `PROG VERB -h` of the built binaries,
// asked once.
type cliHelps map[string]string

func (h cliHelps) usage(prog, verb string) string {
	key := prog + " " + verb
	if u, ok := h[key]; ok {
		return u
	}
	path := bin.proxy
	if prog == "automator" {
		path = bin.automator
	}
	r := runCLI(path, append(strings.Fields(verb), "-h")...)
	h[key] = r.Stderr + r.Stdout
	return h[key]
}

// checkCLICalls checks every proxy or automator command in line, found in
// where: it names a verb and flags the binaries accept (`--service NAME`
// only before the proxy's run and the automator's serve, as a service runs
// them). It returns how many it found.
func (h cliHelps) checkCLICalls(t *testing.T, where, line string) int {
	t.Helper()
	calls := cliCall.FindAllStringSubmatch(line, -1)
	for _, m := range calls {
		prog, service, verb, rest := m[1], m[2], m[3], m[4]
		usage := h.usage(prog, verb)
		if !strings.Contains(usage, "Usage of") && !strings.Contains(usage, "-") {
			t.Errorf("%s: %s %s: no usage from the binary: %q", where, prog, verb, usage)
		}
		if want := map[string]string{"proxy": "run", "automator": "serve"}[prog]; service != "" && verb != want {
			t.Errorf("%s: `%s` gives --service to %s: only `%s --service NAME %s` runs as a service", where, strings.TrimSpace(line), verb, prog, want)
		}
		for _, f := range flagRef.FindAllStringSubmatch(rest, -1) {
			name := strings.TrimLeft(f[1], "-")
			// The flag package's list ("  -name string") or a usage line ("[--name NAME]").
			known := regexp.MustCompile(`(^|[\s\[])--?` + regexp.QuoteMeta(name) + `([\s=\]]|$)`)
			if !known.MatchString(usage) {
				t.Errorf("%s: `%s` uses %s, which `%s %s` does not accept", where, strings.TrimSpace(line), f[1], prog, verb)
			}
		}
	}
	return len(calls)
}

// TestDocsPagesExistAndTheirCommandsMatchTheCLI: the pages exist, every
// command block is Linux shell (run on the build host) or PowerShell marked
// Windows only, and every proxy or automator command in them names a verb
// and flags the binaries accept.
func TestDocsPagesExistAndTheirCommandsMatchTheCLI(t *testing.T) {
	t.Parallel()
	helps := cliHelps{}
	for page, title := range docPages {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
		if err != nil {
			t.Errorf("docs/%s: %v", page, err)
			continue
		}
		text := string(data)
		if first, _, _ := strings.Cut(text, "\n"); first != "# "+title {
			t.Errorf("docs/%s starts with %q, want the title %q", page, first, "# "+title)
		}
		calls := 0
		for _, b := range codeBlocks(text) {
			switch b.lang {
			case "sh", "": // shell, or sample output
			case "powershell":
				if !strings.Contains(text, "**Windows only.**") {
					t.Errorf("docs/%s has a PowerShell block but nothing marked **Windows only.**", page)
				}
			default:
				t.Errorf("docs/%s: a %q block: use sh (run on Linux) or powershell (Windows only)", page, b.lang)
			}
			if b.lang == "" {
				continue
			}
			for _, line := range b.lines {
				calls += helps.checkCLICalls(t, "docs/"+page, line)
			}
		}
		if calls == 0 {
			t.Errorf("docs/%s shows no proxy or automator command", page)
		}
	}
}

// inlineCode finds the code spans of a Markdown text (without its fenced
// blocks); a span may go on over a line break.
var inlineCode = regexp.MustCompile("`([^`]+)`")

// prose is a Markdown text without its fenced code blocks.
func prose(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// referencePages are the README and the reference pages, whose commands an
// operator runs as written.
func referencePages() []string {
	pages := []string{"README.md"}
	for _, p := range []string{"api.md", "security.md", "failure-semantics.md", "guarantees.md", "backup.md",
		"several-automators.md", "install-proxy.md", "active-active.md", "warm-standby.md", "upgrade-proxy.md"} {
		pages = append(pages, filepath.Join("docs", p))
	}
	return pages
}

// TestEveryCommandTheDocsNameMatchesTheCLI: every proxy or automator
// command in the README and the reference pages, in a shell block or a code
// span of the prose (`automator work list [--account A]`), names a verb and
// flags the binaries accept, so a flag renamed or dropped cannot linger in
// the docs.
func TestEveryCommandTheDocsNameMatchesTheCLI(t *testing.T) {
	t.Parallel()
	helps := cliHelps{}
	for _, page := range referencePages() {
		data, err := os.ReadFile(filepath.Join("..", "..", page))
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		for _, b := range codeBlocks(string(data)) {
			if b.lang == "sh" {
				for _, line := range b.lines {
					calls += helps.checkCLICalls(t, page, line)
				}
			}
		}
		for _, m := range inlineCode.FindAllStringSubmatch(prose(string(data)), -1) {
			calls += helps.checkCLICalls(t, page, strings.ReplaceAll(m[1], "\n", " "))
		}
		if calls == 0 {
			t.Errorf("%s names no proxy or automator command", page)
		}
	}
}

// rotationRow is a row of docs/security.md's table of rotations: its first
// cell is a command.
var rotationRow = regexp.MustCompile("^\\| `(automator [^`]+)` \\|")

// TestDocsRotationTableShowsEachCommandAsHelpDoes: the first column of
// docs/security.md's table of rotations is each command's full form, as
// `automator help` lists it (its comment aside), so a flag added to a
// command (--db) shows there too, not only in the help.
func TestDocsRotationTableShowsEachCommandAsHelpDoes(t *testing.T) {
	t.Parallel()
	help := runCLI(bin.automator, "help")
	forms := map[string]bool{}
	for _, l := range strings.Split(help.Stdout+help.Stderr, "\n") {
		l, _, _ = strings.Cut(l, "#")
		if l = strings.Join(strings.Fields(l), " "); strings.HasPrefix(l, "automator ") {
			forms[l] = true
		}
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(data), "\n## Rotation without downtime\n")
	table, _, _ = strings.Cut(table, "\n\n")
	rows := 0
	for _, row := range strings.Split(table, "\n") {
		m := rotationRow.FindStringSubmatch(row)
		if m == nil {
			continue
		}
		rows++
		if form := strings.ReplaceAll(m[1], `\|`, "|"); !forms[form] {
			t.Errorf("docs/security.md's rotation table shows `%s`, which is not a form `automator help` lists", form)
		}
	}
	if rows == 0 {
		t.Error("docs/security.md's rotation table: no command found")
	}
}

var (
	// shellVarUse is a variable a shell line expands: $NAME or ${NAME...}.
	shellVarUse = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	// shellVarSet is a variable a shell line sets: NAME=..., export
	// NAME=..., for NAME in ..., read NAME.
	shellVarSet = regexp.MustCompile(`(?:^|[\s;(&|])(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=|\bfor\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b|\bread\s+(?:-r\s+)?([A-Za-z_][A-Za-z0-9_]*)`)
	// commentWord is a name a comment may give a variable.
	commentWord = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// shellVarsKnown are set in every operator's shell.
var shellVarsKnown = map[string]bool{"HOME": true, "PATH": true, "PWD": true, "USER": true, "TMPDIR": true}

// TestEveryVariableTheDocsCommandsUseIsSetOrExplained: a variable a shell
// block of the README or a reference page expands is set in one of the
// page's shell blocks (`DB=...`, `export PGPASSWORD=...`), or named in a
// comment of one or in a code span of the prose, which says what to put
// there; a command using a variable the page never explains
// ("$AUTOMATOR_DB_URL") cannot be run as written.
func TestEveryVariableTheDocsCommandsUseIsSetOrExplained(t *testing.T) {
	t.Parallel()
	for _, page := range referencePages() {
		data, err := os.ReadFile(filepath.Join("..", "..", page))
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		explained := map[string]bool{}
		for _, m := range inlineCode.FindAllStringSubmatch(prose(text), -1) {
			explained[m[1]] = true
		}
		type use struct{ name, line string }
		var uses []use
		for _, b := range codeBlocks(text) {
			if b.lang != "sh" {
				continue
			}
			for _, line := range b.lines {
				code, comment, _ := strings.Cut(line, "#")
				if strings.HasPrefix(line, "#") {
					code, comment = "", line
				}
				for _, name := range commentWord.FindAllString(comment, -1) {
					explained[name] = true
				}
				for _, m := range shellVarSet.FindAllStringSubmatch(code, -1) {
					explained[m[1]+m[2]+m[3]] = true
				}
				for _, m := range shellVarUse.FindAllStringSubmatch(code, -1) {
					uses = append(uses, use{m[1], line})
				}
			}
		}
		for _, u := range uses {
			if !explained[u.name] && !shellVarsKnown[u.name] {
				t.Errorf("%s: `%s` uses $%s, which the page neither sets in a shell block nor names in a comment or the prose", page, u.line, u.name)
			}
		}
	}
}
