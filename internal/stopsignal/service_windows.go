package stopsignal

import (
	"sync"

	"golang.org/x/sys/windows/svc"
)

// inWindowsService: the Service Control Manager started this process.
var inWindowsService = sync.OnceValue(func() bool {
	ok, err := svc.IsWindowsService()
	return err == nil && ok
})
