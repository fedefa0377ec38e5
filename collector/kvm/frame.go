package kvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Bounds of libvirt's RPC protocol (src/rpc/virnetprotocol.x). Every frame is
// a 4-byte length that counts itself, a 24-byte header and an XDR payload.
const (
	frameLenSize    = 4  // VIR_NET_MESSAGE_LEN_MAX
	frameHeaderSize = 24 // VIR_NET_MESSAGE_HEADER_MAX
	minFrameLen     = frameLenSize + frameHeaderSize
	protocolMaxLen  = 33554432 + frameLenSize // VIR_NET_MESSAGE_MAX, which does not count the length field
	// maxReplyLen is libvirt's initial message buffer (VIR_NET_MESSAGE_INITIAL).
	// Every reply to the calls a check makes is far smaller (an error's
	// message is at most 1024 bytes), so a larger frame is refused before
	// it is read: a hostile peer cannot make the exporter hold more than
	// this per frame. The two lists the promised-resource keys read (a
	// host's domains, a pool's volumes) may have up to maxListReplyLen,
	// and only a host with those keys calls them (procedures). What it sends unasked is bounded by the drain of the
	// channel (drainedChannel, maxUnread).
	maxReplyLen = 65536 + frameLenSize

	remoteProgram         = 0x20008086 // REMOTE_PROGRAM
	remoteProtocolVersion = 1          // REMOTE_PROTOCOL_VERSION

	frameCall  = 0 // VIR_NET_CALL
	frameReply = 1 // VIR_NET_REPLY

	statusOK    = 0 // VIR_NET_OK
	statusError = 1 // VIR_NET_ERROR

	// remoteStringMax is REMOTE_STRING_MAX; authTypeListMax is
	// REMOTE_AUTH_TYPE_LIST_MAX.
	remoteStringMax = 4194304
	authTypeListMax = 20
)

// frameError is a frame from the libvirt peer that breaks libvirt's protocol
// or is not a reply to a call in flight. The connection is closed when one
// is seen: what follows it cannot be trusted to be framed right.
type frameError struct {
	msg string
}

func (e *frameError) Error() string {
	return "malformed libvirt frame, connection closed: " + e.msg
}

func badFrame(format string, args ...any) error {
	return &frameError{msg: fmt.Sprintf(format, args...)}
}

// frameConn sits between the libvirt socket opened over SSH and the libvirt
// client (rpcClient). The peer is not trusted: a frame length below the
// header size, or a huge one, or a length inside the payload that claims
// more than was sent, would make a client that believed it misread the
// stream or allocate what it claims (go-libvirt, which the exporter used
// before, panicked in its reader goroutine on the first and allocated the
// others). frameConn hands out only whole frames that answer the call in
// flight, with a payload of the shape that call's reply has, so every
// length the client then reads is one the peer actually sent.
type frameConn struct {
	// conn is not embedded: its Read would hand out unchecked bytes.
	conn net.Conn

	// rmu guards the read side; the client has one reader at a time.
	rmu sync.Mutex

	// wmu guards the parser of our own calls; the client writes a call
	// as one frame, but Write takes a frame in several writes too.
	wmu  sync.Mutex
	whdr []byte // the part of an outgoing frame's length and header seen so far
	wpay int    // payload bytes of the outgoing frame still to pass

	mu    sync.Mutex
	calls map[int32]uint32 // serial -> procedure of each call awaiting its reply
	err   error            // the first violation; every later read returns it

	// awaited counts the calls sent whose reply has not been read whole:
	// while it is 0, nothing the peer sends was asked for (awaiting).
	awaited atomic.Int32
	// limit is the reply limit of the last call sent (unreadLimit).
	limit atomic.Uint32
}

// awaiting tells whether a call sent awaits its reply, or the rest of it.
func (c *frameConn) awaiting() bool { return c.awaited.Load() > 0 }

// unreadLimit is how many bytes of the reply awaited may arrive before the
// client reads them: the reply limit of the last call sent (the client
// makes one call at a time), 0 while no call awaits a reply.
func (c *frameConn) unreadLimit() int {
	if !c.awaiting() {
		return 0
	}
	return int(c.limit.Load())
}

func newFrameConn(conn net.Conn) *frameConn {
	return &frameConn{conn: conn, calls: map[int32]uint32{}}
}

// violation returns the first protocol violation seen, or nil.
func (c *frameConn) violation() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail records err as the violation and closes the connection.
func (c *frameConn) fail(err error) error {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	err = c.err
	c.mu.Unlock()
	_ = c.conn.Close()
	return err
}

// Close closes the connection.
func (c *frameConn) Close() error { return c.conn.Close() }

// Write notes the serial and procedure of every call the client sends, so a
// reply can be matched to it, and passes the bytes on unchanged.
func (c *frameConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.note(p)
	c.wmu.Unlock()
	return c.conn.Write(p)
}

func (c *frameConn) note(p []byte) {
	for len(p) > 0 {
		if c.wpay > 0 {
			n := min(c.wpay, len(p))
			c.wpay -= n
			p = p[n:]
			continue
		}
		n := min(minFrameLen-len(c.whdr), len(p))
		c.whdr = append(c.whdr, p[:n]...)
		p = p[n:]
		if len(c.whdr) < minFrameLen {
			return
		}
		h := parseHeader(c.whdr)
		c.whdr = c.whdr[:0]
		c.wpay = max(int(h.length)-minFrameLen, 0)
		if h.typ == frameCall && h.program == remoteProgram {
			c.mu.Lock()
			c.calls[h.serial] = h.procedure
			c.mu.Unlock()
			c.limit.Store(replyLimit(h.procedure))
			c.awaited.Add(1)
		}
	}
}

// reply is a checked reply to a call in flight, decoded.
type reply struct {
	proc uint32
	// vals is an ok reply's value; err the error of an error reply,
	// as the call returns it.
	vals values
	err  error
}

// next reads the next frame whole, checks it and decodes it: the frame
// must answer a call in flight, with a payload of the shape of that
// call's reply (procedures).
func (c *frameConn) next() (reply, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if err := c.violation(); err != nil {
		return reply{}, err
	}
	r, started, err := c.readFrame()
	if started && err == nil {
		c.awaited.Add(-1) // the reply was read whole
	}
	if err != nil {
		if started {
			// Nothing after a bad or cut-off frame can be trusted to be
			// framed right; the error is kept to say why every later
			// call fails.
			return reply{}, c.fail(err)
		}
		return reply{}, err
	}
	return r, nil
}

type header struct {
	length                      uint32
	program, version, procedure uint32
	typ                         uint32
	serial                      int32
	status                      uint32
}

// parseHeader decodes the length and header at the start of b, which holds
// at least minFrameLen bytes.
func parseHeader(b []byte) header {
	be := binary.BigEndian
	return header{
		length:    be.Uint32(b[0:4]),
		program:   be.Uint32(b[4:8]),
		version:   be.Uint32(b[8:12]),
		procedure: be.Uint32(b[12:16]),
		typ:       be.Uint32(b[16:20]),
		serial:    int32(be.Uint32(b[20:24])),
		status:    be.Uint32(b[24:28]),
	}
}

// readFrame reads one frame from the peer, checks it and decodes it.
// started tells whether the error came after the frame's first byte.
// Everything the peer got wrong is a *frameError; a transport error is
// wrapped as it is.
func (c *frameConn) readFrame() (r reply, started bool, err error) {
	var hb [minFrameLen]byte
	if _, err := io.ReadFull(c.conn, hb[:frameLenSize]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return r, true, fmt.Errorf("libvirt frame cut off in its length: %w", err)
		}
		return r, false, err // between frames: the connection ended
	}
	length := binary.BigEndian.Uint32(hb[:frameLenSize])
	if err := checkLength(length); err != nil {
		return r, true, err
	}
	if _, err := io.ReadFull(c.conn, hb[frameLenSize:]); err != nil {
		return r, true, fmt.Errorf("libvirt frame of %d bytes cut off in its header: %w", length, noEOF(err))
	}
	h := parseHeader(hb[:])
	proc, err := c.match(h)
	if err != nil {
		return r, true, err
	}
	if limit := replyLimit(proc); length > limit {
		return r, true, replyTooLong(length, limit, proc)
	}
	payload := make([]byte, length-minFrameLen)
	if n, err := io.ReadFull(c.conn, payload); err != nil {
		return r, true, fmt.Errorf("libvirt frame of %d bytes cut off after %d: %w", length, minFrameLen+n, noEOF(err))
	}
	r.proc = proc
	if h.status == statusError {
		r.err, err = decodeError(proc, payload)
	} else {
		r.vals, err = decodeReply(proc, payload)
	}
	return r, true, err
}

// replyTooLong is readFrame's error for a reply longer than any reply to
// its procedure. Not inlined: its arguments would take room in readFrame's
// frame, which is on every check's stack (values).
//
//go:noinline
func replyTooLong(length, limit, proc uint32) error {
	return badFrame("length %d is above the %d bytes of any reply to %s", length, limit, procName(proc))
}

// noEOF turns a clean EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// checkLength checks a frame's length field against libvirt's bounds and the
// size of the largest reply a check can get.
func checkLength(length uint32) error {
	switch {
	case length < minFrameLen:
		return badFrame("length %d is below the %d bytes of libvirt's length and header", length, minFrameLen)
	case length > protocolMaxLen:
		return badFrame("length %d is above libvirt's maximum message size of %d bytes", length, protocolMaxLen)
	case length > maxListReplyLen:
		return badFrame("length %d is above the %d bytes of any reply to the calls this exporter makes", length, maxListReplyLen)
	}
	return nil
}

// match checks the header of a reply and returns the procedure of the call
// it answers, which is then no longer in flight.
func (c *frameConn) match(h header) (uint32, error) {
	switch {
	case h.program != remoteProgram:
		return 0, badFrame("program %#x, want libvirt's remote program %#x", h.program, remoteProgram)
	case h.version != remoteProtocolVersion:
		return 0, badFrame("protocol version %d, want %d", h.version, remoteProtocolVersion)
	case h.typ != frameReply:
		// The exporter never asks for keepalives, events or streams:
		// libvirtd pings only a client that asked whether it supports
		// keepalive (ConnectSupportsFeature with
		// VIR_DRV_FEATURE_PROGRAM_KEEPALIVE), sends events only after a
		// callback is registered, and streams only for a procedure that
		// opens one, and no procedure of the table does any of these. So
		// a frame of any other type than a reply is a peer that breaks
		// the protocol. TestIntegrationIdlePastKeepalive pins, against
		// the real libvirtd, that a connection left idle past its
		// keepalive timeout gets no frame and is kept.
		return 0, badFrame("message type %d, want a reply (%d)", h.typ, frameReply)
	case h.status != statusOK && h.status != statusError:
		return 0, badFrame("reply status %d, want ok (%d) or error (%d)", h.status, statusOK, statusError)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	proc, ok := c.calls[h.serial]
	if !ok {
		return 0, badFrame("reply with serial %d answers no call in flight", h.serial)
	}
	if proc != h.procedure {
		return 0, badFrame("reply to call %d names procedure %d, the call was procedure %d", h.serial, h.procedure, proc)
	}
	delete(c.calls, h.serial)
	return proc, nil
}

// xdrReader walks XDR data, stopping at the first field that does not fit.
type xdrReader struct {
	b   []byte
	err error
}

// uint32s reads n 4-byte words and returns the last.
func (r *xdrReader) uint32s(n int) uint32 {
	var v uint32
	for range n {
		if r.err != nil {
			return 0
		}
		if len(r.b) < 4 {
			r.err = fmt.Errorf("%d bytes left where a 4-byte word is due", len(r.b))
			return 0
		}
		v = binary.BigEndian.Uint32(r.b)
		r.b = r.b[4:]
	}
	return v
}

// uint64 reads an unsigned hyper: two 4-byte words, the high one first.
func (r *xdrReader) uint64() uint64 {
	hi := r.uint32s(1)
	lo := r.uint32s(1)
	return uint64(hi)<<32 | uint64(lo)
}

// string reads a variable-length string: its length, then the bytes padded
// to a multiple of 4.
func (r *xdrReader) string(what string) string {
	n := r.uint32s(1)
	if r.err != nil {
		return ""
	}
	if n > remoteStringMax {
		r.err = fmt.Errorf("%s of %d bytes is above libvirt's limit of %d", what, n, remoteStringMax)
		return ""
	}
	return string(r.opaque(int(n), what))
}

// opaque reads n bytes padded to a multiple of 4.
func (r *xdrReader) opaque(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	padded := n + (4-n%4)%4
	if padded > len(r.b) {
		r.err = fmt.Errorf("%s of %d bytes with only %d bytes left", what, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[padded:]
	return v
}
