//go:build windows

package closedport

import "syscall"

// hold binds a TCP socket to a port of 127.0.0.1 the system picks, without
// listening on it.
func hold() (port int, release func(), err error) {
	h, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_TCP)
	if err != nil {
		return 0, nil, err
	}
	if err := syscall.Bind(h, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Closesocket(h)
		return 0, nil, err
	}
	sa, err := syscall.Getsockname(h)
	if err != nil {
		syscall.Closesocket(h)
		return 0, nil, err
	}
	return sa.(*syscall.SockaddrInet4).Port, func() { syscall.Closesocket(h) }, nil
}
