package runner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/disktest"
)

// TestAScriptOrInterpreterOnANoexecMountIsSaidSo: a script on a file
// system mounted noexec, mode 0755, is not said to be executable but not
// by this user (a review: "it is executable (mode -rwxr-xr-x, owner root),
// but not by root"), and a script whose #! interpreter is there names it
// and the mount: the system runs neither, whatever their modes.
func TestAScriptOrInterpreterOnANoexecMountIsSaidSo(t *testing.T) {
	t.Parallel()
	noexec := disktest.NoExec(t)
	dir := t.TempDir()
	for path, body := range map[string]string{
		filepath.Join(noexec, "there.sh"): "#!/bin/sh\necho hi\n",
		filepath.Join(noexec, "interp"):   "#!/bin/sh\nexec /bin/sh \"$@\"\n",
		filepath.Join(dir, "via.sh"):      "#!" + filepath.Join(noexec, "interp") + "\necho hi\n",
	} {
		if err := writeFileNoFork(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ResolveScript(noexec, "there.sh")
	// Said first, so that a table's reason cut short says it (a review).
	if !errors.Is(err, ErrNotAllowed) || !errors.Is(err, ErrNoExec) || !strings.HasPrefix(err.Error(), `script "there.sh" is on a file system mounted noexec,`) || strings.Contains(err.Error(), "but not by") {
		t.Errorf("ResolveScript of a script on a noexec mount = %v, want ErrNotAllowed saying first that the mount is noexec", err)
	}
	_, err = Run(context.Background(), Spec{ScriptsDir: dir, Script: "via.sh", Deadline: time.Now().Add(10 * time.Second)})
	if want := `its #! interpreter "` + filepath.Join(noexec, "interp") + `" is on a file system mounted noexec`; !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), want) {
		t.Errorf("Run of a script whose interpreter is on a noexec mount = %v, want ErrStart saying %q", err, want)
	}
}
