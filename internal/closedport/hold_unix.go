//go:build unix

package closedport

import "syscall"

// hold binds a TCP socket to a port of 127.0.0.1 the kernel picks, without
// listening on it.
func hold() (port int, release func(), err error) {
	// Made close-on-exec as the net package makes its sockets, under
	// ForkLock: SOCK_CLOEXEC is not defined on every Unix (macOS).
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return 0, nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return 0, nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return 0, nil, err
	}
	return sa.(*syscall.SockaddrInet4).Port, func() { syscall.Close(fd) }, nil
}
