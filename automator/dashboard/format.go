package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/printable"
)

var funcs = template.FuncMap{
	"ago":    ago,
	"age":    age,
	"dur":    dur,
	"clock":  clock,
	"stamp":  stamp,
	"plural": plural,
	"slug":   slug,
	"shown":  printable.Shown,
	// text: a script's output, which may be any bytes, on a page served
	// as UTF-8: bytes that are not UTF-8 are shown as U+FFFD (a review
	// found raw ones in a page, which a strict reader refuses).
	"text":    func(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") },
	"isState": func(a store.State, b string) bool { return string(a) == b },
	// deleted: the name a unit of a deleted account keeps (no account
	// page is it).
	"deleted": func(account string) bool { _, ok := store.DeletedAccount(account); return ok },
	"stranded": func(s server.AccountStatus) bool {
		return s == server.StatusStranded
	},
	"refusedStatus": func(s server.AccountStatus) bool {
		return s == server.StatusRefused
	},
}

// dur renders a duration for people: 20ms, 1.2s, 3m4s, 2h5m.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd", d/(24*time.Hour))
}

// age is how long before now t was, rounded to seconds; "" for zero.
func age(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := max(now.Sub(t), 0)
	if d < time.Second {
		return "0s"
	}
	if d < time.Hour {
		return d.Round(time.Second).String()
	}
	return dur(d)
}

// ago says when t was, relative to now: "never" for zero.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	if now.Sub(t) < time.Second {
		return "just now"
	}
	return age(now, t) + " ago"
}

// clock is t's time of day, in UTC like every time shown, and saying so.
func clock(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05Z")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// slug turns a word into a CSS class part: "no instances" → "no-instances".
func slug(v any) string {
	return strings.ReplaceAll(strings.ToLower(fmt.Sprint(v)), " ", "-")
}
