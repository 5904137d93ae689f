//go:build !linux

package client

import (
	"net"
	"time"
)

// setUserTimeout does nothing here: gRPC sets TCP_USER_TIMEOUT on Linux
// only, too.
func setUserTimeout(net.Conn, time.Duration) error { return nil }
