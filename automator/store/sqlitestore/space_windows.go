package sqlitestore

import (
	"os"

	"golang.org/x/sys/windows"
)

// freeSpace returns the bytes of dir's volume available to this process;
// ok is false when it cannot tell.
func freeSpace(dir string) (free uint64, ok bool) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, false
	}
	var avail, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &totalFree); err != nil {
		return 0, false
	}
	return avail, true
}

// ownedByMe reports false: on windows an access list, not an owner and a
// mode, says who may write a file.
func ownedByMe(os.FileInfo) bool { return false }
