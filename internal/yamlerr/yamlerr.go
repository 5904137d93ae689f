// Package yamlerr words the errors of a strict YAML decode for the operator
// who wrote the file: the YAML library names Go types ("field x not found in
// type config.Config", "cannot unmarshal !!str `abc` into time.Duration") and
// puts each problem on a line of its own.
package yamlerr

import (
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

var (
	// (?s): a quoted key or value may hold a line break.
	unknownField = regexp.MustCompile(`(?s)^(line \d+: )field (.+) not found in type .+$`)
	wrongType    = regexp.MustCompile("(?s)^(line \\d+: )cannot unmarshal !!\\w+ `(.*)` into (.+)$") // a backquote inside
	// A list or a mapping has no text of its own to quote.
	wrongShape = regexp.MustCompile(`^(line \d+: )cannot unmarshal !!(seq|map) into (.+)$`)
)

// shapes names a list and a mapping as a YAML writer knows them.
var shapes = map[string]string{
	"seq": "a list",
	"map": "a mapping (key: value pairs)",
}

// kind names the Go type t as a YAML writer knows it: a type outside
// kinds is a section of settings (a struct: the file itself, or limits:).
func kind(t string) string {
	if k, ok := kinds[t]; ok {
		return k
	}
	return "a section of settings, one key: value per line"
}

// kinds names the Go types of the configs' settings as a YAML writer knows them.
var kinds = map[string]string{
	"time.Duration": "a duration such as 30s, 5m or 24h",
	"int":           "a whole number",
	"int64":         "a whole number",
	"bool":          "true or false",
	"string":        "a text",
	"[]string":      "a list",
}

// Word returns err reworded in one line when it is a yaml.TypeError, and err
// unchanged otherwise.
func Word(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if g := unknownField.FindStringSubmatch(m); g != nil {
			name := g[2]
			if strings.ContainsFunc(name, unicode.IsControl) {
				name = strconv.Quote(name)
			}
			m = g[1] + "unknown setting " + name
		} else if g := wrongType.FindStringSubmatch(m); g != nil {
			m = g[1] + strconv.Quote(g[2]) + " is not " + kind(g[3])
		} else if g := wrongShape.FindStringSubmatch(m); g != nil {
			m = g[1] + shapes[g[2]] + " is not " + kind(g[3])
		}
		// Whatever else the library says stays on the line too.
		m = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(m)
		msgs = append(msgs, m)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Rest reads what dec holds after the first document. An empty document
// (a trailing "---", with nothing or only comments after it) is accepted;
// one with content is refused, naming the line where it begins, since a
// decode of the first document alone would ignore its settings silently.
func Rest(dec *yaml.Decoder) error {
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return Word(err)
		}
		if !emptyDocument(&doc) {
			return fmt.Errorf("line %d: more than one YAML document: what follows this \"---\" would be ignored; move the settings above it, or remove it", doc.Line)
		}
	}
}

// emptyDocument: a document of nothing (or comments only), which the
// parser reads as a null without text.
func emptyDocument(doc *yaml.Node) bool {
	for _, n := range doc.Content {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!null" || n.Value != "" {
			return false
		}
	}
	return true
}

// WholeNumbers refuses a number with a fraction (4.5, 0.5) given where v,
// a pointer to the struct the document decodes into, takes a whole number:
// the YAML library cuts the fraction off without a word, so max_concurrency:
// 4.5 would run 4 units, and 0.5 would be 0, which reads as left out.
// A whole number written as a float (4.0, 1e3) passes, as the library
// decodes it exactly. It names the line, as Word does; data that does not
// parse is Decode's to report, not this.
func WholeNumbers(data []byte, v any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil
	}
	return wholeNumbers(&doc, reflect.TypeOf(v))
}

func wholeNumbers(n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := wholeNumbers(c, t); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		if t.Kind() != reflect.Struct {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if f, ok := fieldByYAMLName(t, n.Content[i].Value); ok {
				if err := wholeNumbers(n.Content[i+1], f.Type); err != nil {
					return err
				}
			}
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, c := range n.Content {
				if err := wholeNumbers(c, t.Elem()); err != nil {
					return err
				}
			}
		}
	case yaml.ScalarNode:
		var f float64
		if n.Tag == "!!float" && isWhole(t) && n.Decode(&f) == nil && f != math.Trunc(f) {
			return fmt.Errorf("line %d: %q is not a whole number", n.Line, n.Value)
		}
	}
	return nil
}

// isWhole: t holds a whole number. A time.Duration is not decoded from a
// number at all: the library refuses one.
func isWhole(t reflect.Type) bool {
	if t == reflect.TypeFor[time.Duration]() {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// fieldByYAMLName returns the exported field of struct t that the key name
// decodes into: its yaml tag's name, or its name in lower case.
func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
