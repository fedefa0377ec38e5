package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
)

// The dial: a new session in stages (the SSH material, TCP, the SSH
// handshake, the libvirt connect), each failure tagged with its stage,
// which the reason is derived from.

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
