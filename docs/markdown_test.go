package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// separator is a table's delimiter row: cells of dashes, each with an
// optional colon at either end.
var separator = regexp.MustCompile(`^\|(\s*:?-+:?\s*\|)+\s*$`)

// cells counts a table row's cells, leaving escaped pipes alone.
func cells(row string) int {
	row = strings.TrimSpace(strings.ReplaceAll(row, `\|`, ""))
	return strings.Count(strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|"), "|") + 1
}

// tableErrors reports each table of a Markdown text whose header row is
// not followed by a delimiter row of as many cells: GitHub then renders
// no table at all.
func tableErrors(name, text string) []string {
	var errs []string
	lines := strings.Split(text, "\n")
	fence := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(l, "|") || (i > 0 && strings.HasPrefix(lines[i-1], "|")) {
			continue
		}
		switch {
		case i+1 >= len(lines) || !separator.MatchString(lines[i+1]):
			errs = append(errs, fmt.Sprintf("%s:%d: a table's header row without a delimiter row (|---|---|) under it: %s", name, i+1, short(l)))
		case cells(lines[i+1]) != cells(l):
			errs = append(errs, fmt.Sprintf("%s:%d: a table's header row has %d cells, its delimiter row %d", name, i+1, cells(l), cells(lines[i+1])))
		}
	}
	return errs
}

func short(s string) string {
	if r := []rune(s); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return s
}

// TestEveryTableHasItsDelimiterRow checks the tables of README.md and of
// every page under docs/.
func TestEveryTableHasItsDelimiterRow(t *testing.T) {
	files := []string{"../README.md"}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v: the test runs in the wrong directory", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tableErrors(f, string(b)) {
			t.Error(e)
		}
	}
}

func TestTableErrorsFindsAHeaderWithoutItsDelimiterRow(t *testing.T) {
	good := "text\n\n| a | b |\n|---|:--:|\n| 1 | 2 |\n"
	if errs := tableErrors("good.md", good); len(errs) != 0 {
		t.Errorf("a well-formed table: %v", errs)
	}
	fenced := "```\n| a | b |\n| 1 | 2 |\n```\n"
	if errs := tableErrors("fenced.md", fenced); len(errs) != 0 {
		t.Errorf("pipes in a code block are not a table: %v", errs)
	}
	missing := "text\n\n| a | b |\n| 1 | 2 |\n"
	if errs := tableErrors("missing.md", missing); len(errs) != 1 || !strings.Contains(errs[0], "missing.md:3: a table's header row without a delimiter row") {
		t.Errorf("a table without its delimiter row: %v", errs)
	}
	narrow := "| a | b | c |\n|---|---|\n"
	if errs := tableErrors("narrow.md", narrow); len(errs) != 1 || !strings.Contains(errs[0], "3 cells, its delimiter row 2") {
		t.Errorf("a delimiter row of fewer cells: %v", errs)
	}
}
