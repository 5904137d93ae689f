package yamlerr

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type settings struct {
	Window time.Duration `yaml:"window"`
	Max    int           `yaml:"max"`
	Names  []string      `yaml:"names"`
	Limits struct {
		Size int `yaml:"size"`
	} `yaml:"limits"`
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
		// A quoted value or key may hold a line break; the error does not.
		"max: \"a\\nb\"\n": `line 1: "a\nb" is not a whole number`,
		"\"fo\\no\": 1\n":  `line 1: unknown setting "fo\no"`,
		// A list or a mapping where another kind goes is named by its
		// shape, and a section of settings as one.
		"max: [1]\n":            `line 1: a list is not a whole number`,
		"window: {a: b}\n":      `line 1: a mapping (key: value pairs) is not a duration such as 30s, 5m or 24h`,
		"names: {a: b}\n":       `line 1: a mapping (key: value pairs) is not a list`,
		"names: abc\n":          `line 1: "abc" is not a list`,
		"limits: 5\n":           `line 1: "5" is not a section of settings, one key: value per line`,
		"limits: [5]\n":         `line 1: a list is not a section of settings, one key: value per line`,
		"- a\n":                 `line 1: a list is not a section of settings, one key: value per line`,
		"abc\n":                 `line 1: "abc" is not a section of settings, one key: value per line`,
		"max: [1]\nwindow: 1\n": `line 1: a list is not a whole number; line 2: "1" is not a duration such as 30s, 5m or 24h`,
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

// TestRestAcceptsAnEmptyDocumentAndRefusesOneWithContent: a trailing
// "---" (an empty second document, also with comments) is no setting
// lost, and is accepted; a second document with anything in it would be
// ignored, and is refused, naming the line of its "---".
func TestRestAcceptsAnEmptyDocumentAndRefusesOneWithContent(t *testing.T) {
	rest := func(text string) error {
		var s settings
		dec := yaml.NewDecoder(bytes.NewReader([]byte(text)))
		dec.KnownFields(true)
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("%q: first document: %v", text, err)
		}
		return Rest(dec)
	}
	for _, text := range []string{"max: 1\n", "max: 1\n---\n", "max: 1\n---", "max: 1\n---\n# nothing more\n", "max: 1\n---\n---\n", "---\nmax: 1\n---\n"} {
		if err := rest(text); err != nil {
			t.Errorf("%q: %v; want it accepted", text, err)
		}
	}
	for text, want := range map[string]string{
		"max: 1\n---\nwindow: 5s\n":        `line 2: more than one YAML document: what follows this "---" would be ignored`,
		"max: 1\n---\n---\n- a\n":          `line 3: more than one YAML document`,
		"max: 1\n\n---\n# c\nwindow: 5s\n": `line 3: more than one YAML document`,
		"max: 1\n---\n[\n":                 `line 3: did not find expected node content`,
	} {
		if err := rest(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", text, err, want)
		}
	}
}

// TestWholeNumbersRefusesAFractionWhereAWholeNumberGoes: the YAML library
// decodes 4.5 into an int as 4, and 0.5 as 0 (read as left out): such a
// value is refused with its line, wherever a whole number goes (a nested
// section, a list, a pointer). A whole number written as a float, and a
// fraction where a text goes, pass.
func TestWholeNumbersRefusesAFractionWhereAWholeNumberGoes(t *testing.T) {
	type inner struct {
		Bytes uint64 `yaml:"bytes"`
	}
	type doc struct {
		Max    int           `yaml:"max"`
		Name   string        `yaml:"name"`
		Window time.Duration `yaml:"window"`
		Limits inner         `yaml:"limits"`
		Ports  []int         `yaml:"ports"`
		Ptr    *int          `yaml:"ptr"`
		Tagged int
	}
	for text, want := range map[string]string{
		"max: 4.5\n":                     `line 1: "4.5" is not a whole number`,
		"name: a\nmax: 0.5\n":            `line 2: "0.5" is not a whole number`,
		"limits:\n  bytes: 1.5e0\n":      `line 2: "1.5e0" is not a whole number`,
		"ports: [1, 2.5]\n":              `line 1: "2.5" is not a whole number`,
		"ptr: -3.25\n":                   `line 1: "-3.25" is not a whole number`,
		"tagged: 7.7\n":                  `line 1: "7.7" is not a whole number`,
		"max: 1\n---\nmax: 2.5\n":        "", // a second document is Rest's
		"max: 4.0\nlimits: {bytes: 1e3}": "",
		"name: 4.5\nmax: 4\n":            "",
		"window: 30s\nptr: ~\n":          "",
		"max: [\n":                       "", // Decode's to report
	} {
		err := WholeNumbers([]byte(text), &doc{})
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", text, err)
		case want != "" && (err == nil || err.Error() != want):
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
