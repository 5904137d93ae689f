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
	ol := &windows.Overlapped{Offset: lockOffset & 0xffffffff, OffsetHigh: lockOffset >> 32}
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return errLocked
	}
	return err
}
