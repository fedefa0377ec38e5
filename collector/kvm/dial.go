package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// stage names the step of a dial that failed (docs/configuration.md: "KVM"); the reason is
// derived from the stage and the cause.
type stage string

const (
	stageMaterial  stage = "ssh-material"
	stageTCP       stage = "tcp"
	stageHandshake stage = "ssh-handshake"
	stageLibvirt   stage = "libvirt-connect"
)

// dialError tags a dial failure with its stage.
type dialError struct {
	Stage stage
	Err   error
}

func (e *dialError) Error() string { return string(e.Stage) + ": " + e.Err.Error() }
func (e *dialError) Unwrap() error { return e.Err }

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

// maxUnread is the most the libvirt channel may hold that the client has
// not read while the call in flight is not known (before the client judges
// arriving data: askedBy): the largest reply the frame checker lets through
// for any call but the two list calls a host with a promised-resource key
// makes, whose replies may be up to maxListReplyLen while one of them is
// in flight (frameConn.unreadLimit). The client reads a reply only while
// its call is in flight, one call at a time, and the exporter never asks
// for anything libvirtd would send unasked (frameConn.match), so more
// unread bytes than one whole reply are a peer that sends what nobody
// asked for (docs/security.md: "What the exporter bounds").
const maxUnread = maxReplyLen

// drainMinRead is the least room the drain reads into at a time.
const drainMinRead = 512

// drainKeep is the most buffer a drained channel keeps while it holds
// nothing unread: a steady check's reply is a few hundred bytes.
const drainKeep = 4 << 10

// floodError ends a libvirt channel that brought data while no call
// awaited a reply, more than maxUnread bytes nobody read, or any extended
// data.
type floodError struct {
	unread int
	limit  int // the unread bytes the call in flight allowed
	idle   bool
	stderr bool
}

func (e *floodError) Error() string {
	switch {
	case e.stderr:
		return "the libvirt socket's SSH channel sent extended (stderr) data, which a socket forward never does; the connection was closed"
	case e.idle:
		return fmt.Sprintf("the libvirt socket's SSH channel sent %d bytes that no call asked for, while no call awaited a reply; the connection was closed", e.unread)
	}
	return fmt.Sprintf("the libvirt socket's SSH channel sent %d bytes that no call asked for, more than the %d of any reply; the connection was closed", e.unread, e.limit)
}

// drainedChannel is the libvirt channel as the client reads it. x/crypto/ssh
// buffers whatever a channel's peer sends, up to the channel's 2 MiB window,
// until it is read, in one allocation per SSH packet: a peer pushing data
// between checks (or one byte per packet) would make the exporter hold
// megabytes per host for nothing. x/crypto/ssh has no setting for the
// window, so a goroutine reads the channel continuously into a buffer the
// client reads from, and closes the connection (flooded) when more than
// maxUnread bytes are unread; another reads the channel's extended data,
// which a socket forward never sends, and closes the connection on the
// first byte. A flooding host thus costs at most maxUnread bytes of buffer
// and what x/crypto/ssh holds between two reads of the drain.
type drainedChannel struct {
	channelConn
	flooded func(error)
	// asked, once set (askedBy), tells how many bytes the call that
	// awaits its reply may have unread, 0 while no call awaits one: data
	// that arrives then ends the channel at once.
	asked atomic.Pointer[func() int]

	mu   sync.Mutex
	cond sync.Cond
	// buf[off:] is unread. Only the drain goroutine changes buf's
	// backing array or reads into it past len(buf), and only while it
	// holds mu or into room past len(buf), which the reader never
	// touches.
	buf []byte
	off int
	err error // why draining ended; the client gets it once buf is read
}

func newDrainedChannel(c channelConn, flooded func(error)) *drainedChannel {
	d := &drainedChannel{channelConn: c, flooded: flooded}
	d.cond.L = &d.mu
	go d.drain()
	go d.drainStderr()
	return d
}

// askedBy makes f the judge of whether arriving data was asked for, and
// how much of it may be unread.
func (d *drainedChannel) askedBy(f func() int) { d.asked.Store(&f) }

// limit is how many bytes may be unread now: what the judge says, or
// maxUnread before there is one.
func (d *drainedChannel) limit() int {
	if asked := d.asked.Load(); asked != nil {
		return (*asked)()
	}
	return maxUnread
}

// room returns the free room past the unread bytes, compacting or growing
// the buffer first; called with mu held.
func (d *drainedChannel) room() []byte {
	unread := len(d.buf) - d.off
	if unread == 0 && cap(d.buf) > drainKeep {
		d.buf, d.off = nil, 0
	}
	if cap(d.buf)-len(d.buf) >= drainMinRead {
		return d.buf[len(d.buf):cap(d.buf)]
	}
	size := min(max(2*unread, unread+drainMinRead, drainMinRead), max(d.limit(), maxUnread)+drainMinRead)
	if unread == 0 && d.buf != nil && cap(d.buf) >= size {
		d.buf, d.off = d.buf[:0], 0
	} else {
		b := make([]byte, unread, size)
		copy(b, d.buf[d.off:])
		d.buf, d.off = b, 0
	}
	return d.buf[len(d.buf):cap(d.buf)]
}

// drain reads the channel until it ends or floods.
func (d *drainedChannel) drain() {
	for {
		d.mu.Lock()
		if d.err != nil {
			d.mu.Unlock()
			return
		}
		room := d.room()
		d.mu.Unlock()
		n, err := d.Channel.Read(room)
		d.mu.Lock()
		if d.err != nil {
			// Extended data ended the channel while this read waited.
			d.mu.Unlock()
			discard(d.Channel)
			return
		}
		d.buf = d.buf[:len(d.buf)+n]
		// Checked before the client can see the bytes: a reply's bytes
		// arrive only after its call was counted, and are read whole
		// before it is uncounted.
		limit := d.limit()
		idle := n > 0 && limit == 0
		if unread := len(d.buf) - d.off; unread > limit || idle {
			err := &floodError{unread: unread, limit: limit, idle: idle}
			d.err = err
			d.buf, d.off = nil, 0
			d.cond.Broadcast()
			d.mu.Unlock()
			d.flooded(err)
			discard(d.Channel)
			return
		}
		if err != nil {
			d.err = err
		}
		d.cond.Broadcast()
		d.mu.Unlock()
	}
}

// drainStderr reads the channel's extended data, and ends the connection on
// its first byte.
func (d *drainedChannel) drainStderr() {
	var b [64]byte
	n, _ := d.Stderr().Read(b[:])
	if n == 0 {
		return // the channel closed
	}
	err := &floodError{stderr: true}
	d.mu.Lock()
	if d.err == nil {
		d.err = err
		d.buf, d.off = nil, 0
	}
	d.cond.Broadcast()
	d.mu.Unlock()
	d.flooded(err)
	discard(d.Stderr())
}

// discard reads r until it ends: what x/crypto/ssh queued of a flood before
// its connection was closed is let go at once, not when the session is.
func discard(r io.Reader) {
	var b [512]byte
	for {
		if _, err := r.Read(b[:]); err != nil {
			return
		}
	}
}

// Read hands out what the drain read, waiting for it; a flood ends it at
// once, any other end after the bytes read before it.
func (d *drainedChannel) Read(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.off == len(d.buf) && d.err == nil {
		d.cond.Wait()
	}
	var flood *floodError
	if !errors.As(d.err, &flood) && d.off < len(d.buf) {
		n := copy(p, d.buf[d.off:])
		d.off += n
		return n, nil
	}
	return 0, d.err
}

// channelConn is an SSH channel as the net.Conn the libvirt client reads
// and writes. Like x/crypto/ssh's own, it has no deadlines: the session is
// closed when a call must end (session.bound).
type channelConn struct {
	ssh.Channel
	local, remote net.Addr
}

func (c channelConn) LocalAddr() net.Addr  { return c.local }
func (c channelConn) RemoteAddr() net.Addr { return c.remote }

var errNoDeadline = errors.New("an SSH channel has no deadlines")

func (channelConn) SetDeadline(time.Time) error      { return errNoDeadline }
func (channelConn) SetReadDeadline(time.Time) error  { return errNoDeadline }
func (channelConn) SetWriteDeadline(time.Time) error { return errNoDeadline }

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

// bound runs fn, a call that takes no context, and closes the session when
// ctx ends first: an SSH channel has no deadlines (channelConn), so closing
// the session is what ends a call waiting for its reply. It returns ctx's error when ctx ended,
// whatever fn said, because the session is then gone.
func (s *session) bound(ctx context.Context, fn func() error) error {
	stop := context.AfterFunc(ctx, s.close)
	err := fn()
	if !stop() {
		s.close() // waits for the close started by AfterFunc
		if err == nil {
			err = errors.New("session closed")
		}
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return err
}

// lateAnswerGrace is how long a check's libvirt call may go on past the
// check's deadline before its connection is closed. The verdict is Timeout
// at the deadline either way; the grace only decides whether the connection
// is kept. A libvirtd that answers a little late (a busy host, or the
// exporter itself busy dialing a fleet at a cold start) keeps its
// connection, instead of costing a redial; one that does not answer within
// the grace is taken for wedged. It is well within the engine's
// AbandonGrace, so the check still returns before it is abandoned.
const lateAnswerGrace = provider.AbandonGrace / 2

// call runs fn, a libvirt call for a check bound to ctx, on s (bound's
// counterpart for checks on a kept connection). When ctx has ended by the
// time fn returns, call returns ctx's error whatever fn said; the session is
// closed only if fn has not returned lateAnswerGrace after ctx's deadline
// (after its end, for a context without one). Callers tell the two apart
// with isDead.
func (s *session) call(ctx context.Context, fn func() error) error {
	w := &lateCall{s: s, grace: s.grace}
	if w.grace <= 0 {
		w.grace = lateAnswerGrace
	}
	var stop func() bool
	if d, ok := ctx.Deadline(); ok {
		// One timer at the deadline plus the grace: registering with the
		// context (context.AfterFunc) cost several times more, at one call
		// per host and scrape.
		w.timer = time.AfterFunc(time.Until(d)+w.grace, w.expire)
	} else {
		stop = context.AfterFunc(ctx, w.arm)
	}
	err := fn()
	if stop != nil {
		stop()
	}
	if w.finish() {
		s.close() // waits for the close the grace timer started
		if err == nil {
			err = errors.New("session closed")
		}
		return fmt.Errorf("%w: no answer within %s after it, connection closed: %w", endedCause(ctx), w.grace, err)
	}
	switch {
	case !provider.Ended(ctx):
		return err
	case err != nil:
		return fmt.Errorf("%w: %w", endedCause(ctx), err)
	}
	return fmt.Errorf("%w: libvirtd answered after it; the connection is kept", endedCause(ctx))
}

// endedCause is why ctx ended: its cause, or DeadlineExceeded when its
// deadline has passed but its timer has not fired yet, as happens on a
// loaded machine (provider.Ended).
func endedCause(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// lateCall closes a session whose call goes on lateAnswerGrace past the
// deadline (or the end) of its context.
type lateCall struct {
	s      *session
	grace  time.Duration
	mu     sync.Mutex
	done   bool // the call returned
	closed bool // the grace ran out first
	timer  *time.Timer
}

// arm starts the grace; called when a context without a deadline ends.
func (w *lateCall) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.timer = time.AfterFunc(w.grace, w.expire)
	}
}

func (w *lateCall) expire() {
	w.mu.Lock()
	expired := !w.done
	w.closed = expired
	w.mu.Unlock()
	if expired {
		w.s.close()
	}
}

// finish marks the call returned and tells whether the grace had run out.
func (w *lateCall) finish() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil && !w.closed {
		w.timer.Stop()
	}
	return w.closed
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

// dialTimeoutError is the cause of a dial cut by dial_timeout while the
// scrape still had time: the verdict is Timeout all the same.
type dialTimeoutError struct{ d time.Duration }

func (e *dialTimeoutError) Error() string {
	return fmt.Sprintf("dial_timeout (%s) reached", e.d)
}

// Is makes every dialTimeoutError match, whatever its duration.
func (e *dialTimeoutError) Is(target error) bool {
	_, ok := target.(*dialTimeoutError)
	return ok
}

// dial makes a new session in stages, every blocking step bound to ctx and
// the network stages together to dial_timeout; reading the material is not
// (decrypting a key is CPU, not waiting on a host). The session it returns
// is bound to neither: it lives until a check or Close ends it.
func (c *Checker) dial(ctx context.Context, logger *slog.Logger, set settings) (*session, error) {
	// Material is looked up on every dial so that rotated files are
	// picked up without a reload; it is parsed only when it changed.
	cfg, hosts, err := clientConfig(set, c.material)
	if err != nil {
		return nil, &dialError{stageMaterial, err}
	}
	cause := &dialTimeoutError{c.dialTimeout}
	dctx, cancel := context.WithTimeoutCause(ctx, c.dialTimeout, cause)
	defer cancel()
	s, err := c.dialNetwork(dctx, logger, set, cfg, hosts)
	var de *dialError
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(dctx), cause) && !errors.Is(err, cause) && errors.As(err, &de) {
		// The TCP stage reports only "i/o timeout"; say which bound it was.
		de.Err = fmt.Errorf("%w: %w", cause, de.Err)
	}
	return s, err
}

// identificationShare is the part of dial_timeout a server has to send its
// first bytes after the TCP connection is up (docs/configuration.md: "KVM"). An SSH server
// sends its identification line as soon as it accepts, one round trip
// after the connect; a host that accepts TCP and then says nothing (a
// wedged sshd, a half-dead host) is known for what it is after a quarter
// of dial_timeout instead of holding a dial slot for all of it.
const identificationShare = 4

// silentServerError is the cause of a dial to a server that accepted TCP
// and sent nothing within its share of dial_timeout; the verdict is
// Timeout.
type silentServerError struct{ d, dialTimeout time.Duration }

func (e *silentServerError) Error() string {
	return fmt.Sprintf("the server accepted TCP but sent no SSH identification within %s (a quarter of dial_timeout, %s)", e.d, e.dialTimeout)
}

// awaitIdentification waits for the server's first bytes, at most a
// quarter of dial_timeout, and returns a conn that hands them to the SSH
// handshake before the rest. Only the raw TCP conn gets a read deadline,
// and it is cleared before SSH uses it.
func (c *Checker) awaitIdentification(conn net.Conn) (net.Conn, error) {
	d := c.dialTimeout / identificationShare
	if err := conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return conn, fmt.Errorf("set read deadline: %w", err)
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if n == 0 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return conn, &silentServerError{d, c.dialTimeout}
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		return conn, fmt.Errorf("read the server's identification: %w", err)
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return conn, fmt.Errorf("clear read deadline: %w", err)
	}
	return &replayConn{Conn: conn, first: buf[:n]}, nil
}

// replayConn gives back the bytes awaitIdentification read before reading
// on.
type replayConn struct {
	net.Conn
	first []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		if len(c.first) == 0 {
			c.first = nil // let the buffer go
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// dialNetwork makes the TCP connection, the SSH handshake and the libvirt
// connection, every blocking step bound to ctx.
func (c *Checker) dialNetwork(ctx context.Context, logger *slog.Logger, set settings, cfg *ssh.ClientConfig, hosts *knownHostsDB) (*session, error) {
	logger.Debug("dialing", "stage", stageTCP, "address", set.address)
	conn, err := c.dialer.DialContext(ctx, "tcp", set.address)
	if err != nil {
		return nil, &dialError{stageTCP, err}
	}

	if hosts != nil {
		cfg.HostKeyAlgorithms = hosts.algorithms(set.address, conn.RemoteAddr())
	}
	logger.Debug("dialing", "stage", stageHandshake, "user", set.user, "hostKeyAlgorithms", cfg.HostKeyAlgorithms)
	// ssh.ClientConfig.Timeout bounds only the TCP connect: closing the
	// conn is what makes a handshake with a silent server return.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	conn, err = c.awaitIdentification(conn)
	if err != nil {
		stop()
		_ = conn.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		return nil, &dialError{stageHandshake, err}
	}
	sc, chans, reqs, err := ssh.NewClientConn(conn, set.address, cfg)
	if !stop() {
		if err == nil {
			_ = sc.Close()
			err = errors.New("connection closed")
		}
		return nil, &dialError{stageHandshake, fmt.Errorf("%w: %w", context.Cause(ctx), err)}
	}
	if err != nil {
		return nil, &dialError{stageHandshake, err}
	}
	s := newSession(sc, chans, reqs)
	s.grace = c.lateGrace

	logger.Debug("dialing", "stage", stageLibvirt, "socket", set.socket, "uri", set.uri)
	err = s.bound(ctx, func() error {
		ch, err := s.openSocket(set.socket)
		if err != nil {
			return fmt.Errorf("open %s over ssh: %w", set.socket, err)
		}
		s.lv = c.newClient(watchedConn{Conn: ch, s: s})
		if a, ok := s.lv.(interface{ unreadLimit() int }); ok {
			// Data that arrives while no call awaits a reply was not
			// asked for: the connection ends at its first byte.
			ch.(*drainedChannel).askedBy(a.unreadLimit)
		}
		lv := loggedClient{next: s.lv, logger: logger}
		if err := lv.ConnectToURI(libvirt.ConnectURI(set.uri)); err != nil {
			return fmt.Errorf("connect %s: %w", set.uri, err)
		}
		v, err := lv.ConnectGetLibVersion()
		if err != nil {
			return fmt.Errorf("get libvirt version: %w", err)
		}
		s.version = formatVersion(v)
		return nil
	})
	if err != nil {
		s.close()
		return nil, &dialError{stageLibvirt, err}
	}
	return s, nil
}
