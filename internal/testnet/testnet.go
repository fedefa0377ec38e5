// Package testnet gives tests loopback addresses they can rely on while
// other tests and processes open and close ports around them.
package testnet

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr is a loopback address where connections are refused for the
// whole test. A socket bound to it and never listening holds the port: the
// kernel refuses connections to it, and no other socket can bind it, as one
// could a port found free with a listener and closed again (the listener of
// a parallel test, or a process a test starts, may be given that port).
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("getsockname: %T, want an IPv4 address", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
