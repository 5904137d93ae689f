// Package filelock holds an OS lock on a file, shared or exclusive, without
// waiting: flock on Unix, LockFileEx on Windows. The OS drops a lock when
// its process ends, however it ends, so a dead holder never keeps a lock.
// Shared and Exclusive open the file and hold its lock; TryLock and Unlock
// lock a file its caller opened (the proxy's state_dir lock, which also
// holds its holder's pid).
package filelock

import (
	"errors"
	"fmt"
	"os"
)

// ErrLocked: another open file (of any process) holds a lock that excludes
// the one asked for.
var ErrLocked = errors.New("locked by another process")

// Lock is a held lock; Release lets it go.
type Lock struct {
	f *os.File
}

// Shared takes a shared lock on the file at path (made, mode 0600, if
// missing): any number of shared locks are held together, and none while
// an exclusive one is. ErrLocked when an exclusive one is held.
func Shared(path string) (*Lock, error) { return take(path, false) }

// Exclusive takes an exclusive lock on the file at path (made, mode 0600,
// if missing). ErrLocked when any other lock on it is held.
func Exclusive(path string) (*Lock, error) { return take(path, true) }

// take opens the lock file with OpenRegular: it lies in a data directory
// that may be a service user's, where a command run as root must not
// create or lock a file a link names (/etc/nologin, say).
func take(path string, exclusive bool) (*Lock, error) {
	// 0600: whoever can open the file can take its lock.
	f, err := OpenRegular(path, os.O_RDWR|os.O_CREATE, 0o600, "a data directory")
	if err != nil {
		return nil, fmt.Errorf("opening lock file %s: %w", path, err)
	}
	if err := TryLock(f, exclusive); err != nil {
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release lets the lock go. The file stays, for the next holder.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	Unlock(l.f)
	err := l.f.Close() // closing drops the lock
	l.f = nil
	return err
}
