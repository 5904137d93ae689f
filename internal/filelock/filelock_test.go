package filelock

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestSharedLocksExcludeAnExclusiveOne: serves share the lock, a restore
// takes it alone; it is free again once released.
func TestSharedLocksExcludeAnExclusiveOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.lock")
	a, err := Shared(path)
	if err != nil {
		t.Fatalf("first Shared: %v", err)
	}
	b, err := Shared(path)
	if err != nil {
		t.Fatalf("second Shared: %v", err)
	}
	if _, err := Exclusive(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("Exclusive while shared locks are held: %v, want ErrLocked", err)
	}
	a.Release()
	if _, err := Exclusive(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("Exclusive while one shared lock is held: %v, want ErrLocked", err)
	}
	b.Release()
	x, err := Exclusive(path)
	if err != nil {
		t.Fatalf("Exclusive once every shared lock is released: %v", err)
	}
	if _, err := Shared(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("Shared while the exclusive lock is held: %v, want ErrLocked", err)
	}
	x.Release()
	if s, err := Shared(path); err != nil {
		t.Fatalf("Shared once the exclusive lock is released: %v", err)
	} else {
		s.Release()
	}
}
