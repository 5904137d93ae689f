//go:build windows

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockOffset is where the locked byte lies, past anything written to the
// file (a holder's pid, say): a byte range locked with LockFileEx cannot be
// read by others.
const lockOffset = 1 << 32

// TryLock locks one byte of f, shared or exclusive, without waiting:
// ErrLocked when another handle (of any process) holds a lock that
// excludes it. Windows drops the lock when the handle is closed or its
// process ends.
func TryLock(f *os.File, exclusive bool) error {
	var flags uint32 = windows.LOCKFILE_FAIL_IMMEDIATELY
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, overlapped())
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}

func overlapped() *windows.Overlapped {
	return &windows.Overlapped{Offset: lockOffset & 0xffffffff, OffsetHigh: lockOffset >> 32}
}

// Unlock unlocks the byte before the file is closed. Windows drops the
// lock of a closed handle too, but in its own time ("depends upon available
// system resources", LockFileEx): a service restarted at once, or a restore
// run right after a serve stopped, could find the lock still held.
func Unlock(f *os.File) {
	_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, overlapped())
}
