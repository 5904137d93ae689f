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
// nowhere.
func secretOut(w io.Writer, what string) error {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	null, err := os.Stat(os.DevNull)
	if err != nil || !os.SameFile(fi, null) {
		return nil
	}
	return fmt.Errorf("stdout is %s (closed, or sent there): %s, printed only this once, would go nowhere; send stdout to a file (mode 0600) or a terminal; nothing was changed", os.DevNull, what)
}
