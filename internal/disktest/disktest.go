//go:build linux

// Package disktest gives tests a small real file system to fill, or one
// mounted noexec: a tmpfs mounted for the test alone. Mounting needs root; without it the test is
// skipped, saying why.
package disktest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Small mounts a tmpfs of size bytes on a new directory and returns the
// directory. It is unmounted when the test ends.
func Small(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system to fill needs root: run as root to run this test")
	}
	return mount(t, syscall.MS_NOSUID|syscall.MS_NODEV, size)
}

// NoExec mounts a tmpfs with noexec, from which the system runs no
// program, on a new directory and returns the directory. It is unmounted
// when the test ends.
func NoExec(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a file system noexec needs root: run as root to run this test")
	}
	return mount(t, syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, 1<<20)
}

// mount mounts a tmpfs of size bytes with flags on a new directory and
// returns the directory, unmounted when the test ends.
func mount(t testing.TB, flags uintptr, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mounting a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	// Registered after t.TempDir, so it runs before the directory's removal;
	// lazily, in case a process of the test still holds a file open.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file into dir until its file system has no space left, and
// returns a function that removes the file again.
func Fill(t testing.TB, dir string) (free func()) {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		t.Fatalf("filling %s: %v", dir, err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	name := f.Name()
	return func() {
		t.Helper()
		if err := os.Remove(name); err != nil {
			t.Fatalf("freeing %s: %v", dir, err)
		}
	}
}
