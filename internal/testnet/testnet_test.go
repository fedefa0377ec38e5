package testnet

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestRefusedAddr: a connection is refused, and the port cannot be taken
// by a listener while the test runs.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); !errors.Is(err, syscall.EADDRINUSE) {
		if l != nil {
			l.Close()
		}
		t.Errorf("listen %s: %v, want address in use", addr, err)
	}
}
