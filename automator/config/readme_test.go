package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestEverySettingIsInTheREADME: the README's automator.yaml section has a
// row for every setting of Config, and names every limit, so an operator
// finds each setting the automator accepts.
func TestEverySettingIsInTheREADME(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### automator.yaml\n")
	if !ok {
		t.Fatal("README.md has no \"### automator.yaml\" section")
	}
	section, _, _ = strings.Cut(section, "\n#")
	for _, name := range yamlNames(reflect.TypeOf(Config{})) {
		if !strings.Contains(section, "\n| `"+name+"` |") {
			t.Errorf("README.md's automator.yaml section has no row for %s", name)
		}
	}
	for _, name := range yamlNames(reflect.TypeOf(Limits{})) {
		if !strings.Contains(section, "`"+name+"`") {
			t.Errorf("README.md's automator.yaml section does not name limits.%s", name)
		}
	}
}

func yamlNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}
