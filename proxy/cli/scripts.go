package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/opsgate/opsgate/proxy/runner"
)

// maxScriptsDigested bounds what scriptsDigest reads: status stays quick
// on a scripts directory that holds large files.
const maxScriptsDigested = 64 << 20

var errScriptsTooLarge = errors.New("more than 64 MiB of scripts: not digested")

// scriptsDigest returns how many scripts a unit may name in dir (each
// entry the runner would run: runner.ResolveScript) and a digest of their
// names and contents, so that `status` on a standby and on the active
// instance show whether they run the same scripts. Any script added,
// removed, renamed or changed changes the digest; the files' times and
// modes (beyond being runnable) do not.
func scriptsDigest(dir string) (n int, digest string, err error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	var total int64
	for _, e := range entries {
		path, err := runner.ResolveScript(dir, e.Name())
		if err != nil {
			continue // not runnable: a unit naming it fails wherever it is
		}
		f, err := os.Open(path)
		if err != nil {
			return 0, "", err
		}
		fi, err := f.Stat()
		if err == nil && total+fi.Size() > maxScriptsDigested {
			err = errScriptsTooLarge
		}
		if err == nil {
			total += fi.Size()
			// Name and length first, so no two sets of files hash alike.
			fmt.Fprintf(h, "%s\x00%s\x00", strconv.Quote(e.Name()), strconv.FormatInt(fi.Size(), 10))
			_, err = io.CopyN(h, f, fi.Size())
		}
		f.Close()
		if err != nil {
			return 0, "", err
		}
		n++
	}
	return n, hex.EncodeToString(h.Sum(nil))[:16], nil
}
