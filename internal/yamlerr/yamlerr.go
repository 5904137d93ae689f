// Package yamlerr words the errors of a strict YAML decode for the operator
// who wrote the file: the YAML library names Go types ("field x not found in
// type config.Config", "cannot unmarshal !!str `abc` into time.Duration") and
// puts each problem on a line of its own.
package yamlerr

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

var (
	// (?s): a quoted key or value may hold a line break.
	unknownField = regexp.MustCompile(`(?s)^(line \d+: )field (.+) not found in type .+$`)
	wrongType    = regexp.MustCompile("(?s)^(line \\d+: )cannot unmarshal !!\\w+ `(.*)` into (.+)$") // a backquote inside
)

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
			kind, ok := kinds[g[3]]
			if !ok {
				kind = "of the setting's kind"
			}
			m = g[1] + strconv.Quote(g[2]) + " is not " + kind
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
