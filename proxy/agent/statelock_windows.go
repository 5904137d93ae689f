//go:build windows

package agent

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockOffset is where the locked byte lies, past any pid: a byte range
// locked with LockFileEx cannot be read by other processes, and the pid at
// the start of the file must stay readable.
const lockOffset = 1 << 32

// lockFile locks one byte of f exclusively without waiting: errLocked when
// another handle (of any process) holds it. Windows drops the lock when the
// handle is closed or its process ends.
func lockFile(f *os.File) error {
	return lockByte(f, windows.LOCKFILE_EXCLUSIVE_LOCK)
}

// probeLock tries a shared lock on the same byte of f (open read-only will
// do) without waiting, and unlocks it: errLocked when another handle holds
// the exclusive one.
func probeLock(f *os.File) error {
	if err := lockByte(f, 0); err != nil {
		return err
	}
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockOverlapped())
}

func lockByte(f *os.File, flags uint32) error {
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, lockOverlapped())
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return errLocked
	}
	return err
}

func lockOverlapped() *windows.Overlapped {
	return &windows.Overlapped{Offset: lockOffset & 0xffffffff, OffsetHigh: lockOffset >> 32}
}

// unlockFile unlocks the byte before the file is closed. Windows drops the
// lock of a closed handle too, but in its own time ("depends upon available
// system resources", LockFileEx): a service restarted at once could find its
// state_dir still held by the run that just stopped.
func unlockFile(f *os.File) {
	_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockOverlapped())
}
