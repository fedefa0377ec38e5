package kvm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// Flood draining: the libvirt channel is read all the time, whether a
// call awaits a reply or not, into a bounded buffer, so that a peer that
// sends what nobody asked for ends its own session instead of filling the
// exporter's memory or stalling the SSH connection.

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
