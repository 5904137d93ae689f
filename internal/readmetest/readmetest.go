// Package readmetest checks that the README documents every setting of a
// config file, so an operator finds each setting a program accepts in one
// place. The automator's and the proxy's config tests share it.
//
// Only tests import it (test/deps checks that).
package readmetest

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// Section returns the section of the README at path under the heading
// "### title", up to the next heading; the test fails if there is none.
func Section(t testing.TB, path, title string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### "+title+"\n")
	if !ok {
		t.Fatalf("README.md has no \"### %s\" section", title)
	}
	section, _, _ = strings.Cut(section, "\n#")
	return section
}

// YAMLNames returns the YAML keys of the fields of struct type typ, in
// their order, leaving out fields without a key or tagged "-".
func YAMLNames(typ reflect.Type) []string {
	var names []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// HasRow reports whether section has a table row for key: a line that
// starts "| `key` |".
func HasRow(section, key string) bool {
	return strings.Contains(section, "\n| `"+key+"` |")
}
