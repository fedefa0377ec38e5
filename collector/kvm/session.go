package kvm

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
)

// A session is one SSH connection to a host and the libvirt connection
// over it, kept between checks with the handles a check reuses (a pool's,
// a network's, the node's information); a failure of its channel marks it
// dead, so that the next check redials, and the checker closes it, with a
// goodbye to libvirtd, when it is done with it.

// settings are the effective settings a kept connection was made with. Two
// hosts with equal settings can share a connection across a reload; the pool
// is not part of them because a check asks for it on every call.
type settings struct {
	address        string
	user           string
	keyFile        string
	passphraseFile string
	knownHostsFile string
	insecure       bool
	socket         string
	uri            string
}

// session is one SSH connection and the libvirt connection over it.
type session struct {
	conn    ssh.Conn
	lv      libvirtClient
	version string

	// socketReqs hands the libvirt channel's requests to serve.
	socketReqs chan (<-chan *ssh.Request)

	closeOnce sync.Once
	// fault is why the peer's data closed the session (drainedChannel);
	// onFault, when set, is told it. faultMu guards both.
	faultMu sync.Mutex
	fault   error
	onFault func(error)
	// dead is closed once the transport is known to be gone: the SSH
	// connection ended, the libvirt channel closed or failed a read or
	// write.
	dead     chan struct{}
	deadOnce sync.Once

	// The handles of the libvirt objects this connection has looked up:
	// a steady check asks about them without looking them up again
	// (docs/scaling.md: "Performance"). They belong to the connection, so
	// a redial starts without any, and are looked up again when libvirt
	// says the object a handle names is gone.
	hmu     sync.Mutex
	pool    *libvirt.StoragePool
	network *libvirt.Network
	// node is NodeGetInfo's answer: a host's cores and memory do not
	// change while libvirtd runs, so it is read once per connection.
	node *nodeInfo
	// volumes are the capacities of the pool's volumes, kept between
	// checks (volumeSizes).
	volumes volumeSizes

	// grace is how long a check's call may go on past the check's
	// deadline before the session is closed (lateAnswerGrace; tests
	// shorten or lengthen it).
	grace time.Duration
}

// poolHandle is the kept handle of the pool called name, if any.
func (s *session) poolHandle(name string) (libvirt.StoragePool, bool) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.pool == nil || s.pool.Name != name {
		return libvirt.StoragePool{}, false
	}
	return *s.pool, true
}

func (s *session) keepPool(p libvirt.StoragePool) {
	s.hmu.Lock()
	if s.pool == nil || *s.pool != p {
		s.pool = &p
	}
	s.hmu.Unlock()
}

func (s *session) forgetPool() {
	s.hmu.Lock()
	s.pool = nil
	s.hmu.Unlock()
}

// nodeInfo is the kept NodeGetInfo answer, if any.
func (s *session) nodeInfo() (nodeInfo, bool) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.node == nil {
		return nodeInfo{}, false
	}
	return *s.node, true
}

func (s *session) keepNodeInfo(n nodeInfo) {
	s.hmu.Lock()
	s.node = &n
	s.hmu.Unlock()
}

// networkHandle is the kept handle of the network called name, if any.
func (s *session) networkHandle(name string) (libvirt.Network, bool) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.network == nil || s.network.Name != name {
		return libvirt.Network{}, false
	}
	return *s.network, true
}

func (s *session) keepNetwork(n libvirt.Network) {
	s.hmu.Lock()
	if s.network == nil || *s.network != n {
		s.network = &n
	}
	s.hmu.Unlock()
}

func (s *session) forgetNetwork() {
	s.hmu.Lock()
	s.network = nil
	s.hmu.Unlock()
}

// newSession starts the one goroutine the exporter adds to a kept
// connection (docs/scaling.md: "Performance"): it answers what the server may send
// besides the libvirt channel's data — global requests (keepalives), channel
// opens, requests on the libvirt channel — all of which x/crypto/ssh hands
// out on channels that must be drained, and it marks the session dead when
// they close, which is when the connection or the libvirt channel ends.
// ssh.NewClient and Client.Dial would spend four goroutines and an 8 KiB
// copy buffer per host on the same.
func newSession(conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) *session {
	s := &session{conn: conn, socketReqs: make(chan (<-chan *ssh.Request), 1), dead: make(chan struct{})}
	go s.serve(chans, reqs)
	return s
}

func (s *session) serve(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	defer s.markDead()
	var socket <-chan *ssh.Request
	handoff := s.socketReqs
	for chans != nil || reqs != nil {
		select {
		case nc, ok := <-chans:
			if !ok {
				chans = nil
				continue
			}
			_ = nc.Reject(ssh.Prohibited, "no channels are accepted")
		case r, ok := <-reqs:
			if !ok {
				reqs = nil
				continue
			}
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
		case socket = <-handoff:
			handoff = nil
		case r, ok := <-socket:
			if !ok {
				// The libvirt channel is gone; the next check redials.
				s.markDead()
				socket = nil
				continue
			}
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
		}
	}
}

// streamLocalOpen is the payload of a direct-streamlocal@openssh.com channel
// open (OpenSSH's PROTOCOL, 2.4): the socket path and two reserved fields.
type streamLocalOpen struct {
	SocketPath string
	Reserved0  string
	Reserved1  uint32
}

// openSocket opens the unix socket at path on the host over SSH, as
// `ssh -L` to a unix socket does, and starts draining it (drainedChannel).
func (s *session) openSocket(path string) (net.Conn, error) {
	ch, reqs, err := s.conn.OpenChannel("direct-streamlocal@openssh.com", ssh.Marshal(&streamLocalOpen{SocketPath: path}))
	if err != nil {
		return nil, err
	}
	s.socketReqs <- reqs
	d := newDrainedChannel(channelConn{Channel: ch, local: s.conn.LocalAddr(), remote: s.conn.RemoteAddr()}, s.flooded)
	return d, nil
}

// flooded ends a session whose libvirt channel brought more than anyone
// asked for (drainedChannel): the connection is closed at once, and the
// session's host, if it keeps it (watch), lets it go and keeps err for its
// next check.
func (s *session) flooded(err error) {
	s.faultMu.Lock()
	s.fault = err
	f := s.onFault
	s.faultMu.Unlock()
	s.markDead()
	_ = s.conn.Close()
	if f != nil {
		f(err)
	}
}

// watch makes f be told the fault that ends s, now if it already did.
func (s *session) watch(f func(error)) {
	s.faultMu.Lock()
	s.onFault = f
	err := s.fault
	s.faultMu.Unlock()
	if err != nil {
		go f(err) // the caller holds its host's lock
	}
}

// faultErr is why the peer's data closed s, or nil.
func (s *session) faultErr() error {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.fault
}

func (s *session) markDead() { s.deadOnce.Do(func() { close(s.dead) }) }

// close tears the whole session down: closing the SSH connection closes the
// libvirt channel, which ends the read of a call waiting for its reply
// with an error. It waits for the SSH connection to be gone so nothing outlives it.
func (s *session) close() {
	s.closeOnce.Do(func() {
		_ = s.conn.Close()
		_ = s.conn.Wait()
		s.markDead()
	})
}

// goodbyeTimeout bounds the ConnectClose of a session closed on purpose;
// libvirtd answers it at once unless it is wedged.
const goodbyeTimeout = time.Second

// goodbye closes a healthy session on purpose (reload, shutdown): it tells
// libvirtd first, so libvirtd does not log "End of file while reading data"
// for every host each time the exporter restarts.
func (s *session) goodbye(logger *slog.Logger) {
	if s.lv != nil && !s.isDead() {
		ctx, cancel := context.WithTimeout(context.Background(), goodbyeTimeout)
		_ = s.bound(ctx, loggedClient{next: s.lv, logger: logger}.ConnectClose)
		cancel()
	}
	s.close()
}

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// watchedConn marks the session dead when the libvirt channel fails, so the
// next check redials instead of reporting a connection that is already
// known to be lost.
type watchedConn struct {
	net.Conn
	s *session
}

func (c watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.s.markDead()
	}
	return n, err
}

// Close is called when the frame checker refuses a frame: the session is
// then done.
func (c watchedConn) Close() error {
	c.s.markDead()
	return c.Conn.Close()
}

func (c watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.s.markDead()
	}
	return n, err
}
