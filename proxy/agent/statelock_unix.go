//go:build !windows

package agent

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on f without waiting: errLocked when
// another open file (of any process) holds one. A flock belongs to the open
// file, so it ends when the file is closed or its process ends.
func lockFile(f *os.File) error { return flock(f, unix.LOCK_EX) }

// probeLock tries a shared flock on f (open read-only will do) without
// waiting and lets it go again: errLocked when another open file holds the
// exclusive one.
func probeLock(f *os.File) error {
	if err := flock(f, unix.LOCK_SH); err != nil {
		return err
	}
	return flock(f, unix.LOCK_UN)
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return errLocked
		}
		return err
	}
}

// unlockFile: closing the file drops its flock at once.
func unlockFile(*os.File) {}
