package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestEverySettingIsInTheREADME: the README's proxy.yaml section has a row
// for every key of Config, so an operator finds each setting the proxy
// accepts in one place.
func TestEverySettingIsInTheREADME(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### proxy.yaml\n")
	if !ok {
		t.Fatal("README.md has no \"### proxy.yaml\" section")
	}
	section, _, _ = strings.Cut(section, "\n#")
	typ := reflect.TypeOf(Config{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !strings.Contains(section, "\n| `"+name+"` |") {
			t.Errorf("README.md's proxy.yaml section has no row for %s", name)
		}
	}
}
