package config

import (
	"reflect"
	"testing"

	"github.com/opsgate/opsgate/internal/readmetest"
)

// TestEverySettingIsInTheREADME: the README's proxy.yaml section has a row
// for every key of Config, so an operator finds each setting the proxy
// accepts in one place.
func TestEverySettingIsInTheREADME(t *testing.T) {
	section := readmetest.Section(t, "../../README.md", "proxy.yaml")
	for _, name := range readmetest.YAMLNames(reflect.TypeOf(Config{})) {
		if !readmetest.HasRow(section, name) {
			t.Errorf("README.md's proxy.yaml section has no row for %s", name)
		}
	}
}
