package cli

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/filelock"
)

// lockForServe takes the data directory's serve lock, shared: several
// serves of one directory may run (replicas of a PostgreSQL database, say),
// but none while a restore holds it. The OS drops it when serve ends,
// however it ends.
func lockForServe(dir string) (*filelock.Lock, error) {
	path := filepath.Join(dir, config.FileServeLock)
	l, err := filelock.Shared(path)
	if errors.Is(err, filelock.ErrLocked) {
		return nil, fmt.Errorf("a restore is under way in %s (it holds %s); start serve once it has finished", dir, config.FileServeLock)
	}
	if err != nil {
		return nil, err
	}
	return l, ownLock(path, dir, l)
}

// lockForRestore takes the data directory's serve lock, exclusive: it is
// refused while any serve of the directory runs, and keeps any from
// starting until released.
func lockForRestore(dir string) (*filelock.Lock, error) {
	path := filepath.Join(dir, config.FileServeLock)
	l, err := filelock.Exclusive(path)
	if errors.Is(err, filelock.ErrLocked) {
		where := ""
		if s, ok, _ := config.ReadServing(dir); ok {
			where = fmt.Sprintf(" (gRPC on %s, HTTP on %s)", s.GRPC, s.HTTP)
		}
		return nil, fmt.Errorf("an automator serve is running on %s%s or another restore is; stop it first (restore replaces the database it has open)", dir, where)
	}
	if err != nil {
		return nil, err
	}
	return l, ownLock(path, dir, l)
}

// ownLock gives the lock file the data directory's owner (when root made
// it), so that a serve run as the service's user can open it afterwards.
func ownLock(path, dir string, l *filelock.Lock) error {
	if err := keepOwner(path, dir); err != nil {
		l.Release()
		return fmt.Errorf("giving %s the owner of %s: %w", path, dir, err)
	}
	return nil
}
