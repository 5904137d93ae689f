package yamlerr

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type settings struct {
	Window time.Duration `yaml:"window"`
	Max    int           `yaml:"max"`
}

func decode(text string) error {
	var s settings
	dec := yaml.NewDecoder(bytes.NewReader([]byte(text)))
	dec.KnownFields(true)
	return dec.Decode(&s)
}

// TestWordSaysWhatAndWhereInOneLine: an unknown key and a value of the
// wrong kind are named with their line, in the file's words rather than Go
// type names, all on one line.
func TestWordSaysWhatAndWhereInOneLine(t *testing.T) {
	for text, want := range map[string]string{
		"max: 1\nbogus: 2\n":              `line 2: unknown setting bogus`,
		"window: banana\n":                `line 1: "banana" is not a duration such as 30s, 5m or 24h`,
		"max: many\nwindow: 5m\nfoo: 1\n": `line 1: "many" is not a whole number; line 3: unknown setting foo`,
	} {
		if got := Word(decode(text)); got == nil || got.Error() != want {
			t.Errorf("%q: %v, want %s", text, got, want)
		}
	}
	other := errors.New("yaml: line 1: did not find expected node content")
	if got := Word(other); got != other {
		t.Errorf("a syntax error was changed: %v", got)
	}
}
