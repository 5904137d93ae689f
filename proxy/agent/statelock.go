package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opsgate/opsgate/internal/filelock"
)

// LockFileName is the file in the proxy's state_dir whose OS lock says
// that a running proxy uses the directory; it holds that proxy's pid.
const LockFileName = "proxy.lock"

// ErrStateDirHeld: another running proxy holds the state_dir.
var ErrStateDirHeld = errors.New("state_dir held by another running proxy")

// StateDirHeldError says which state_dir is held, and by which process
// when its pid could be read (0 otherwise). It matches ErrStateDirHeld.
type StateDirHeldError struct {
	Dir string
	PID int
}

func (e *StateDirHeldError) Error() string {
	by := "another running proxy"
	if e.PID > 0 {
		by += fmt.Sprintf(" (pid %d)", e.PID)
	}
	return fmt.Sprintf("state_dir %s is held by %s: one state_dir serves one running proxy; stop that proxy first, or give this one a state_dir of its own", e.Dir, by)
}

func (e *StateDirHeldError) Is(target error) bool { return target == ErrStateDirHeld }

// StateLock is a proxy's hold on its state_dir: two proxies writing one
// status.json and one spool would overwrite each other's files (and post or
// delete each other's results). The hold is an OS lock on LockFileName
// (flock on Unix, LockFileEx on Windows), not the file's existence: the
// OS drops it when the process ends, however it ends (SIGKILL, a crash,
// a power cut), so a warm standby or a restarted service started on the
// directory afterwards is never refused because of a dead holder.
type StateLock struct {
	f *os.File
}

// LockStateDir takes the state_dir dir (made if missing) for this process
// until Release, or until the process ends. When another process holds it,
// the error is a *StateDirHeldError naming it; nothing in dir is changed.
// Run as root on a directory of another user's, it gives the lock file to
// that user, as the agent does with every file it makes there.
//
// The lock's file is opened close-on-exec (as Go opens every file), so the
// scripts the proxy starts do not inherit it and cannot keep it held after
// the proxy died.
func LockStateDir(dir string) (*StateLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making state_dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFileName)
	// 0600: whoever can open the file can take its lock, and so keep the
	// proxy from starting.
	f, err := openStateFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock of state_dir %s: %w", dir, err)
	}
	switch err := filelock.TryLock(f, true); {
	case errors.Is(err, filelock.ErrLocked):
		pid := readLockPID(f)
		f.Close()
		return nil, &StateDirHeldError{Dir: dir, PID: pid}
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("locking state_dir %s (%s): %w", dir, path, err)
	}
	// Held: the file is this proxy's to give to the directory's owner (a
	// service's user, when root runs a proxy on the service's directory).
	if err := ownLike(path, dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("giving the lock of state_dir %s to the directory's owner: %w", dir, err)
	}
	// The pid is written first, then the rest cut off: one that reads the
	// file meanwhile sees this pid or the last holder's on its first line,
	// never an empty file.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if _, err := f.WriteAt(pid, 0); err == nil {
		_ = f.Truncate(int64(len(pid)))
	}
	return &StateLock{f: f}, nil
}

// CheckStateDir tells whether a running proxy holds the state_dir dir,
// without creating or changing anything there: a *StateDirHeldError naming
// the holder when one does, nil when none does (no lock file means none
// ever held it, or uninstall removed it). `proxy start` and `proxy status`
// ask it about a service's directory.
//
// It opens the lock file read-only and tries a shared lock without
// waiting, which an exclusive holder refuses; a free lock is let go at
// once. For that instant a proxy starting on dir would be refused, as if
// this check were a proxy.
func CheckStateDir(dir string) error {
	path := filepath.Join(dir, LockFileName)
	f, err := openStateFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking the lock of state_dir %s: %w", dir, err)
	}
	defer f.Close()
	switch err := probeLock(f); {
	case errors.Is(err, filelock.ErrLocked):
		return &StateDirHeldError{Dir: dir, PID: readLockPID(f)}
	case err != nil:
		return fmt.Errorf("checking the lock of state_dir %s (%s): %w", dir, path, err)
	}
	return nil
}

// Release lets another proxy take the directory. The lock file stays (a
// next holder reuses it); `proxy uninstall` removes it.
func (l *StateLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	filelock.Unlock(l.f)
	err := l.f.Close() // closing drops the lock
	l.f = nil
	return err
}

// probeLock tries a shared lock on f (open read-only will do) without
// waiting and lets it go again: filelock.ErrLocked when another open file
// holds the exclusive one.
func probeLock(f *os.File) error {
	if err := filelock.TryLock(f, false); err != nil {
		return err
	}
	filelock.Unlock(f)
	return nil
}

// readLockPID reads the holder's pid from the first line of the lock file,
// 0 when it cannot.
func readLockPID(f *os.File) int {
	if _, err := f.Seek(0, 0); err != nil {
		return 0
	}
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// checkNotLinked refuses dir when it is there and is not a directory of
// its own (a symbolic link, a windows junction, a file): the spool's files
// are made, renamed and removed in it, and through a link that would be
// done in whatever directory the link names, as the proxy's user.
func checkNotLinked(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s), which the proxy does not use as its spool: remove it", dir, fi.Mode().Type())
	}
	return nil
}

// CheckSpoolDir refuses the spool of the state_dir dir when it is a link
// or not a directory (checkNotLinked); nil when it is absent.
func CheckSpoolDir(dir string) error {
	return checkNotLinked(filepath.Join(dir, SpoolDirName))
}
