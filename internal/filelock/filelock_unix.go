//go:build !windows

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// TryLock takes a flock on f, shared or exclusive, without waiting:
// ErrLocked when another open file (of any process) holds one that
// excludes it. A flock belongs to the open file, so it ends when the file
// is closed or its process ends.
func TryLock(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	return flock(f, how)
}

// Unlock lets f's flock go before the file is closed (closing drops it
// too).
func Unlock(f *os.File) { _ = flock(f, unix.LOCK_UN) }

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return ErrLocked
		}
		return err
	}
}
