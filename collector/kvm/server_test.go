package kvm

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// serverMode is how the in-process SSH server behaves on a new connection.
type serverMode int32

const (
	modeSSH    serverMode = iota // a working SSH server
	modeSilent                   // accepts TCP and never says a word
	modeEOF                      // sends a banner and hangs up mid-handshake
)

// sshServer is an in-process SSH server on 127.0.0.1 that forwards
// direct-streamlocal@openssh.com channels for one socket path to a unix
// socket, as sshd does for the libvirt socket.
type sshServer struct {
	t          testing.TB
	ln         net.Listener
	addr       string
	hostKey    ssh.Signer
	authMu     sync.Mutex
	authorized ssh.PublicKey
	socket     string // the only path forwarded; others are rejected like sshd does for a missing socket
	// answer, when set, answers the forwarded socket's channel in this
	// process instead of connecting to the socket: a fleet of thousands
	// of hosts would otherwise spend two more descriptors per host.
	answer   func(net.Conn)
	mode     atomic.Int32
	accepted atomic.Int64 // TCP connections accepted: the number of dials

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newSSHServer(t testing.TB, authorized ssh.PublicKey, socket string) *sshServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	s := &sshServer{t: t, ln: ln, addr: ln.Addr().String(), hostKey: hostKey, authorized: authorized,
		socket: socket, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *sshServer) setMode(m serverMode) { s.mode.Store(int32(m)) }

func (s *sshServer) authorize(k ssh.PublicKey) {
	s.authMu.Lock()
	s.authorized = k
	s.authMu.Unlock()
}

func (s *sshServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		if !s.track(c) {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			s.handle(c)
		}()
	}
}

func (s *sshServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *sshServer) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// killConns drops every open connection: a transport failure.
func (s *sshServer) killConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

func (s *sshServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *sshServer) handle(c net.Conn) {
	switch serverMode(s.mode.Load()) {
	case modeSilent:
		_, _ = io.Copy(io.Discard, c) // until the client gives up
		return
	case modeEOF:
		_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"))
		return
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.authMu.Lock()
			ok := s.authorized != nil && string(key.Marshal()) == string(s.authorized.Marshal())
			s.authMu.Unlock()
			if ok {
				return nil, nil
			}
			return nil, errors.New("key not authorized")
		},
	}
	cfg.AddHostKey(s.hostKey)
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "direct-streamlocal@openssh.com" {
			_ = nc.Reject(ssh.UnknownChannelType, "not supported")
			continue
		}
		var msg struct {
			SocketPath string
			Reserved0  string
			Reserved1  uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &msg); err != nil || msg.SocketPath != s.socket {
			_ = nc.Reject(ssh.ConnectionFailed, "open failed")
			continue
		}
		if s.answer != nil {
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(creqs)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer ch.Close()
				s.answer(channelConn{Channel: ch, local: sc.LocalAddr(), remote: sc.RemoteAddr()})
			}()
			continue
		}
		uc, err := net.Dial("unix", msg.SocketPath)
		if err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, "open failed")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			uc.Close()
			continue
		}
		go ssh.DiscardRequests(creqs)
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			_, _ = io.Copy(uc, ch)
			uc.Close()
		}()
		go func() {
			defer s.wg.Done()
			_, _ = io.Copy(ch, uc)
			ch.Close()
		}()
	}
}

// stubMode is how the unix socket behind the SSH server answers the fake
// libvirt's round trips.
type stubMode int32

const (
	stubEcho stubMode = iota // answers every byte
	stubHang                 // reads and never answers, like a wedged libvirtd
	stubDrop                 // hangs up on the next byte, like libvirtd dying
)

// socketStub stands where libvirtd's socket would be. The fake libvirt does
// one byte of round trip per call through it, so transport failures and
// hangs are real I/O on the SSH channel.
type socketStub struct {
	*unixServer
	mode atomic.Int32
}

func newSocketStub(t testing.TB) *socketStub {
	t.Helper()
	st := &socketStub{}
	st.unixServer = listenUnix(t, 0o700, st.handle)
	return st
}

func (st *socketStub) setMode(m stubMode) { st.mode.Store(int32(m)) }

// handle answers one byte per byte read, or not, as the mode says.
func (st *socketStub) handle(c net.Conn) {
	var b [1]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
		switch stubMode(st.mode.Load()) {
		case stubHang:
			continue
		case stubDrop:
			return
		}
		if _, err := c.Write(b[:]); err != nil {
			return
		}
	}
}

// encrypted is one passphrase-protected key shared by the tests that need
// one: encrypting it runs bcrypt's KDF, which takes seconds under -race.
var encrypted struct {
	once   sync.Once
	pem    []byte
	signer ssh.Signer
	err    error
}

const testPassphrase = "s3cret"

// writeEncryptedKey writes a key encrypted with testPassphrase and returns
// its signer.
func writeEncryptedKey(t testing.TB, path string) ssh.Signer {
	t.Helper()
	encrypted.once.Do(func() {
		var priv ed25519.PrivateKey
		if _, priv, encrypted.err = ed25519.GenerateKey(rand.Reader); encrypted.err != nil {
			return
		}
		var block *pem.Block
		if block, encrypted.err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(testPassphrase)); encrypted.err != nil {
			return
		}
		encrypted.pem = pem.EncodeToMemory(block)
		encrypted.signer, encrypted.err = ssh.NewSignerFromKey(priv)
	})
	if encrypted.err != nil {
		t.Fatal(encrypted.err)
	}
	if err := os.WriteFile(path, encrypted.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return encrypted.signer
}

// writeKey writes an unencrypted OpenSSH private key file and returns its
// signer.
func writeKey(t testing.TB, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

func knownHostsLine(address string, key ssh.PublicKey) string {
	return knownhosts.Line([]string{address}, key) + "\n"
}
