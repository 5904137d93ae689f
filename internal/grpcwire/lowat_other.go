//go:build !linux && !darwin

package grpcwire

// setNotSentLowat does nothing: the system has no TCP_NOTSENT_LOWAT.
func setNotSentLowat(uintptr, int) {}
