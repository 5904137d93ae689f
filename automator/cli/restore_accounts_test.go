package cli

import (
	"regexp"
	"strings"
	"testing"
)

// TestRestoreSaysWhatToRunForAnAccountRotatedOrMadeAfterTheBackup: an
// account whose token was rotated after the backup was taken, and one made
// after it, are named by the restore with the command that mends each; the
// operator runs that command as printed, and it works (it once lacked
// --data-dir, which every account command requires, and was refused).
func TestRestoreSaysWhatToRunForAnAccountRotatedOrMadeAfterTheBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	file := takeBackup(t, dir)
	for _, args := range [][]string{
		{"account", "rotate-token", "acme", "--data-dir", dir},
		{"account", "create", "later", "--data-dir", dir},
	} {
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("%v after the backup: exit %d: %s", args, code, stderr)
		}
	}

	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	command := regexp.MustCompile("`(automator [^`]*)`")
	for _, account := range []string{"acme", "later"} {
		var line string
		for _, l := range strings.Split(stdout, "\n") {
			if strings.HasPrefix(l, "warning: account "+account+" ") {
				line = l
			}
		}
		m := command.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("restore printed:\n%s\nwant a warning naming account %s and the command to run", stdout, account)
			continue
		}
		args := strings.Fields(m[1])[1:]
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Errorf("the command the restore printed for account %s, `%s`, run as printed: exit %d: %s", account, m[1], code, stderr)
		}
	}
}
