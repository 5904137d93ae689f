package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/readmetest"
)

// TestEverySettingIsInTheREADME: the README's automator.yaml section has a
// row for every setting of Config, and names every limit, so an operator
// finds each setting the automator accepts.
func TestEverySettingIsInTheREADME(t *testing.T) {
	section := readmetest.Section(t, "../../README.md", "automator.yaml")
	for _, name := range readmetest.YAMLNames(reflect.TypeOf(Config{})) {
		if !readmetest.HasRow(section, name) {
			t.Errorf("README.md's automator.yaml section has no row for %s", name)
		}
	}
	for _, name := range readmetest.YAMLNames(reflect.TypeOf(Limits{})) {
		if !strings.Contains(section, "`"+name+"`") {
			t.Errorf("README.md's automator.yaml section does not name limits.%s", name)
		}
	}
}
