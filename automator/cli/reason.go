package cli

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/opsgate/opsgate/automator/store"
)

// maxReason bounds a reason in a table, in runes; --json and `work show`
// give it whole.
const maxReason = 80

// tableReason is reason as a table's row shows it, the row's ACCOUNT and
// CLAIMER columns naming account and instance. The reasons the automator
// words itself leave out what those columns say, and the words every
// unclaimed unit's reason begins with become "unclaimed", so that what
// tells why (the instances and what each did, when the claim was) fits:
// "unclaimed: no instance was online (p1 stopped at T; ...)", "claimed at
// T, no result before the deadline". An account with no instance at all
// keeps its advice: "unclaimed: no proxy instance in 30 days; start one
// with the account's profile"; instances refused for want of a usable key
// or for an expired account token, which the reason names first, are said
// in short, "a: no usable key, install the latest profile", "b: token
// expired, install the latest profile", so that the fix shows. Then a reason longer
// than maxReason runes is cut, ending in "…", and cut says so.
func tableReason(reason, account, instance string) (shown string, cut bool) {
	if rest, ok := strings.CutPrefix(reason, store.UnclaimedReason); ok {
		if r, ok := strings.CutPrefix(rest, ": account "+account+" has no proxy instance ("); ok {
			// The parenthesis says how long "no instance" covers, which
			// the table says in fewer words, so the advice after it fits.
			if _, advice, ok := strings.Cut(r, "); "); ok {
				rest = fmt.Sprintf(": no proxy instance in %d days; %s", store.InstanceForgetDays, advice)
			} else {
				rest = ": the account has no proxy instance (" + r
			}
		} else if r, ok := strings.CutPrefix(rest, ": account "+account+" has "); ok {
			rest = ": the account has " + r
		} else if r, ok := strings.CutPrefix(rest, ": no instance of account "+account+" was "); ok {
			rest = ": no instance was " + r
		}
		rest = refusedClause.ReplaceAllString(rest, "$1$2: no usable key, install the latest profile")
		reason = "unclaimed" + expiredClause.ReplaceAllString(rest, "$1$2: token expired, install the latest profile")
	}
	if instance != "" {
		reason = strings.Replace(reason, "claimed by instance "+instance+" at ", "claimed at ", 1)
	}
	r := []rune(reason)
	if len(r) <= maxReason {
		return reason, false
	}
	return string(r[:maxReason-1]) + "…", true
}

// refusedClause matches the store's words for the instances of an unclaimed
// unit's account that poll but are refused for want of a usable key
// (store.ExpireReasons), which opens the reason's parenthesis or follows a
// "; " in it: that opening in the first group, their ids in the second.
var refusedClause = regexp.MustCompile(`(\(|; )instances? (.+?) (?:polls but holds|poll but hold) no usable key: install the account's latest profile`)

// expiredClause is refusedClause for the instances refused because their
// account token expired (a whole profile of before a key rotation).
var expiredClause = regexp.MustCompile(`(\(|; )instances? (.+?) (?:polls but its|poll but their) account token expired: install the account's latest profile`)

// reasonColumn fills the REASON cells of a table (tableReason) and
// remembers whether it cut one, to say so under the table.
type reasonColumn struct{ cut bool }

func (c *reasonColumn) cell(reason, account, instance string) string {
	s, cut := tableReason(reason, account, instance)
	c.cut = c.cut || cut
	return orDash(s)
}

// note writes, when a reason was cut, the line under the table saying so
// and what gives them whole (whole: "--json").
func (c *reasonColumn) note(w io.Writer, whole string) error {
	if !c.cut {
		return nil
	}
	_, err := fmt.Fprintf(w, "reasons ending in … were cut to fit; %s gives them whole\n", whole)
	return err
}
