package kvm

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// unixServer is a unix socket standing where libvirtd's would be, for the
// test peers of this package: it hands every connection to a handler and
// keeps track of them, so that close hangs up on all of them and waits for
// their handlers.
type unixServer struct {
	ln   net.Listener
	path string

	mu    sync.Mutex
	conns map[net.Conn]struct{} // nil once closed
	wg    sync.WaitGroup
}

// listenUnix listens on libvirt-sock in a new directory with mode perm (the
// socket too), serves each connection with handle, and closes at the end of
// the test.
func listenUnix(t testing.TB, perm os.FileMode, handle func(net.Conn)) *unixServer {
	t.Helper()
	// Unix socket paths are short (108 bytes); t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "kvmtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, perm); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "libvirt-sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	s := &unixServer{ln: ln, path: path, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve(handle)
	t.Cleanup(s.close)
	return s
}

func (s *unixServer) serve(handle func(net.Conn)) {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				c.Close()
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
			handle(c)
		}()
	}
}

// open is the number of connections open now.
func (s *unixServer) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// close stops listening, hangs up on every connection and waits for the
// handlers. It may be called more than once.
func (s *unixServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}
