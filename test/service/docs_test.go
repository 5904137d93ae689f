//go:build linux

package service

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The operator's pages of issue 5, and their titles.
var docPages = map[string]string{
	"install-proxy.md": "Install the proxy",
	"active-active.md": "Run two proxies active/active",
	"warm-standby.md":  "Keep a warm standby and fail over",
	"upgrade-proxy.md": "Upgrade a proxy",
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
	cliCall = regexp.MustCompile(`(?:^|[\s'/\\&;(])(proxy|automator)(?:\.exe)?'?\s+(install|start|stop|status|uninstall|run|exec|account create|init|serve)\b([^;&|>]*)`)
	flagRef = regexp.MustCompile(`(?:^|\s)(--?[a-z][a-z-]*)`)
)

// TestDocsPagesExistAndTheirCommandsMatchTheCLI: the pages exist, every
// command block is Linux shell (run on the build host) or PowerShell marked
// Windows only, and every proxy or automator command in them names a verb
// and flags the binaries accept.
func TestDocsPagesExistAndTheirCommandsMatchTheCLI(t *testing.T) {
	helps := map[string]string{}
	help := func(prog, verb string) string {
		key := prog + " " + verb
		if h, ok := helps[key]; ok {
			return h
		}
		path := bin.proxy
		if prog == "automator" {
			path = bin.automator
		}
		r := runCLI(path, append(strings.Fields(verb), "-h")...)
		helps[key] = r.Stderr + r.Stdout
		return helps[key]
	}
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
				for _, m := range cliCall.FindAllStringSubmatch(line, -1) {
					calls++
					usage := help(m[1], m[2])
					if !strings.Contains(usage, "Usage of") && !strings.Contains(usage, "-") {
						t.Errorf("docs/%s: %s %s: no usage from the binary: %q", page, m[1], m[2], usage)
					}
					for _, f := range flagRef.FindAllStringSubmatch(m[3], -1) {
						name := strings.TrimLeft(f[1], "-")
						// The flag package's list ("  -name string") or a usage line ("[--name NAME]").
						known := regexp.MustCompile(`(^|[\s\[])--?` + regexp.QuoteMeta(name) + `([\s=\]]|$)`)
						if !known.MatchString(usage) {
							t.Errorf("docs/%s: `%s` uses %s, which `%s %s` does not accept", page, strings.TrimSpace(line), f[1], m[1], m[2])
						}
					}
				}
			}
		}
		if calls == 0 {
			t.Errorf("docs/%s shows no proxy or automator command", page)
		}
	}
}
