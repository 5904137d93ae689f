package cli

import (
	"fmt"
	"io"
	"os"
)

// secretOut refuses, before anything is changed, to print a secret
// printed only once (what) to a stdout that is the null device: one
// closed when the command started (Go then opens the null device in its
// place) or sent there. The write would succeed, and the secret go
// nowhere. A stdout that is a file others may read (a shell's umask 022
// made it) is made readable by its owner only, and the command says so on
// stderr (restrictSecretFile).
func secretOut(w, stderr io.Writer, what string) error {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	if fi.Mode().IsRegular() {
		restrictSecretFile(f, fi, stderr, what)
		return nil
	}
	null, err := os.Stat(os.DevNull)
	if err != nil || !os.SameFile(fi, null) {
		return nil
	}
	return fmt.Errorf("stdout is %s (closed, or sent there): %s, printed only this once, would go nowhere; send stdout to a file (mode 0600) or a terminal; nothing was changed", os.DevNull, what)
}
