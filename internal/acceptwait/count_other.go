//go:build !linux

package acceptwait

import "errors"

// countable: the process's descriptors are not counted here, and its
// listeners keep no reserve.
const countable = false

// openFiles cannot count the process's open files here.
func openFiles() (int, error) { return 0, errors.ErrUnsupported }
