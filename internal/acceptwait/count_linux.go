package acceptwait

import "os"

// openFiles counts the process's open file descriptors.
func openFiles() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	return len(names) - 1, nil // less the one reading the list
}

// countable: the process's descriptors are counted in /proc/self/fd.
const countable = true
