package kvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/digitalocean/go-libvirt"
)

// rpcClient speaks libvirt's RPC protocol (src/rpc/virnetprotocol.x and
// remote_protocol.x) for the calls a check makes, one call at a time: the
// caller writes its call as one frame and reads the reply itself, through
// the frame checker. go-libvirt's client, which it replaces, ran two
// goroutines per connection (a reader that routed each reply to its caller
// over a channel, and a watcher of the disconnection) and encoded and
// decoded every call by reflection: a steady check's one call cost a third
// more CPU through it than the SSH connection under it (docs/scaling.md:
// "Where a steady scrape's CPU goes"). go-libvirt stays the source of the
// types (libvirt.StoragePool, libvirt.Error) the checks use.
//
// One call at a time is all a host needs: a check makes its calls in turn,
// and a call that outlives its check ends when its session is closed
// (session.call), which ends the read that holds the lock.
type rpcClient struct {
	frames *frameConn
	mu     sync.Mutex // held from a call's write to its reply's read
	serial int32
	out    []byte // the frame being written, reused from call to call
}

// newLibvirtClient speaks libvirt's RPC protocol over conn, the libvirt
// socket opened over SSH, behind a frameConn so that only frames that
// libvirt's protocol allows, answering the call made, are decoded.
func newLibvirtClient(conn net.Conn) libvirtClient {
	return &rpcClient{frames: newFrameConn(conn)}
}

var _ libvirtClient = (*rpcClient)(nil)

// procNames name the procedures in errors, as libvirt's API does.
var procNames = map[uint32]string{
	procConnectOpen:             "ConnectOpen",
	procConnectClose:            "ConnectClose",
	procAuthList:                "AuthList",
	procAuthPolkit:              "AuthPolkit",
	procStoragePoolLookupByName: "StoragePoolLookupByName",
	procStoragePoolGetInfo:      "StoragePoolGetInfo",
	procConnectGetLibVersion:    "ConnectGetLibVersion",
	procNodeGetFreeMemory:       "NodeGetFreeMemory",
	procStorageVolLookupByName:  "StorageVolLookupByName",
	procNetworkLookupByName:     "NetworkLookupByName",
	procNetworkIsActive:         "NetworkIsActive",
}

// call sends procedure proc with its XDR-encoded arguments and returns the
// payload of libvirtd's reply. A reply with an error status is returned as
// the error libvirtd sent (libvirt.Error, or libvirt.ErrUnsupported for a
// procedure libvirtd does not know, as go-libvirt returned them).
func (c *rpcClient) call(proc uint32, args []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.frames.violation(); err != nil {
		// The frame checker closed the connection: say why.
		return nil, err
	}
	c.serial++
	b := binary.BigEndian.AppendUint32(c.out[:0], uint32(minFrameLen+len(args)))
	for _, v := range []uint32{remoteProgram, remoteProtocolVersion, proc, frameCall, uint32(c.serial), statusOK} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = append(b, args...)
	c.out = b
	// The frame checker notes the call from the frame written: its reply
	// is the only frame it lets through.
	if _, err := c.frames.Write(b); err != nil {
		return nil, fmt.Errorf("libvirt call %s not sent: %w", procNames[proc], err)
	}
	frame, err := c.frames.next()
	if err != nil {
		var fe *frameError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, fmt.Errorf("libvirt call %s unanswered, the connection ended: %w", procNames[proc], err)
	}
	// The frame checker matched the reply's serial and procedure with
	// this call, and its payload's shape with the call's reply.
	h := parseHeader(frame)
	payload := frame[minFrameLen:]
	if h.status == statusError {
		return nil, replyError(payload)
	}
	return payload, nil
}

// replyError is the remote_error of an error reply: its code, domain,
// message and level (the fields the frame checker checked), as go-libvirt
// made it.
func replyError(payload []byte) error {
	r := xdrReader{b: payload}
	code := r.uint32s(1)
	r.uint32s(2) // domain, the message's presence
	msg := r.string("error message")
	if r.err != nil {
		return badFrame("error reply: %v", r.err)
	}
	switch {
	case strings.Contains(msg, "unknown procedure"):
		return libvirt.ErrUnsupported
	case libvirt.ErrorNumber(code) == libvirt.ErrOk:
		// libvirtd's "no error": go-libvirt took it for success too.
		return nil
	}
	return libvirt.Error{Code: code, Message: msg}
}

// xdrArgs builds a call's XDR arguments.
type xdrArgs []byte

func (a xdrArgs) uint32(v uint32) xdrArgs { return binary.BigEndian.AppendUint32(a, v) }

func (a xdrArgs) string(s string) xdrArgs {
	a = a.uint32(uint32(len(s)))
	a = append(a, s...)
	return append(a, make([]byte, (4-len(s)%4)%4)...)
}

// uuid appends a UUID, a fixed 16-byte opaque (no padding).
func (a xdrArgs) uuid(u libvirt.UUID) xdrArgs { return append(a, u[:]...) }

// reply decodes a reply's payload with r; a field that does not fit is a
// malformed frame (the frame checker lets none through).
func reply(proc uint32, r *xdrReader) error {
	if r.err != nil {
		return badFrame("reply to %s: %v", procNames[proc], r.err)
	}
	return nil
}

// The auth types of remote_auth_type.
const (
	authNone   = 0
	authPolkit = 2
)

// ConnectToURI runs libvirt's handshake as go-libvirt did: the auth list,
// which libvirtd requires before anything else, polkit's check when that is
// the first type offered that needs no exchange, then the connect open.
func (c *rpcClient) ConnectToURI(uri libvirt.ConnectURI) error {
	p, err := c.call(procAuthList, nil)
	if err != nil {
		return err
	}
	r := xdrReader{b: p}
	n := r.uint32s(1)
	types := make([]uint32, 0, min(n, authTypeListMax))
	for range min(n, authTypeListMax) {
		types = append(types, r.uint32s(1))
	}
	if err := reply(procAuthList, &r); err != nil {
		return err
	}
	for _, t := range types {
		if t == authPolkit {
			if _, err := c.call(procAuthPolkit, nil); err != nil {
				return err
			}
		}
		if t == authNone || t == authPolkit {
			break
		}
	}
	// remote_connect_open_args: the URI (an optional string: present),
	// then the flags.
	_, err = c.call(procConnectOpen, xdrArgs(nil).uint32(1).string(string(uri)).uint32(0))
	return err
}

func (c *rpcClient) ConnectGetLibVersion() (uint64, error) {
	p, err := c.call(procConnectGetLibVersion, nil)
	if err != nil {
		return 0, err
	}
	r := xdrReader{b: p}
	v := r.uint64()
	return v, reply(procConnectGetLibVersion, &r)
}

func (c *rpcClient) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	p, err := c.call(procStoragePoolLookupByName, xdrArgs(nil).string(name))
	if err != nil {
		return libvirt.StoragePool{}, err
	}
	var pool libvirt.StoragePool
	r := xdrReader{b: p}
	pool.Name = r.string("pool name")
	copy(pool.UUID[:], r.opaque(len(pool.UUID), "pool uuid"))
	return pool, reply(procStoragePoolLookupByName, &r)
}

func (c *rpcClient) StoragePoolGetInfo(pool libvirt.StoragePool) (state uint8, capacity, allocation, available uint64, err error) {
	p, err := c.call(procStoragePoolGetInfo, xdrArgs(nil).string(pool.Name).uuid(pool.UUID))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	r := xdrReader{b: p}
	// The state is an unsigned char, 4 bytes in XDR; the frame checker
	// refused a value above 255.
	state = uint8(r.uint32s(1))
	capacity, allocation, available = r.uint64(), r.uint64(), r.uint64()
	return state, capacity, allocation, available, reply(procStoragePoolGetInfo, &r)
}

func (c *rpcClient) NodeGetFreeMemory() (uint64, error) {
	p, err := c.call(procNodeGetFreeMemory, nil)
	if err != nil {
		return 0, err
	}
	r := xdrReader{b: p}
	v := r.uint64()
	return v, reply(procNodeGetFreeMemory, &r)
}

func (c *rpcClient) StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	p, err := c.call(procStorageVolLookupByName, xdrArgs(nil).string(pool.Name).uuid(pool.UUID).string(name))
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	r := xdrReader{b: p}
	v := libvirt.StorageVol{Pool: r.string("volume's pool"), Name: r.string("volume name"), Key: r.string("volume key")}
	return v, reply(procStorageVolLookupByName, &r)
}

func (c *rpcClient) NetworkLookupByName(name string) (libvirt.Network, error) {
	p, err := c.call(procNetworkLookupByName, xdrArgs(nil).string(name))
	if err != nil {
		return libvirt.Network{}, err
	}
	var n libvirt.Network
	r := xdrReader{b: p}
	n.Name = r.string("network name")
	copy(n.UUID[:], r.opaque(len(n.UUID), "network uuid"))
	return n, reply(procNetworkLookupByName, &r)
}

func (c *rpcClient) NetworkIsActive(n libvirt.Network) (int32, error) {
	p, err := c.call(procNetworkIsActive, xdrArgs(nil).string(n.Name).uuid(n.UUID))
	if err != nil {
		return 0, err
	}
	r := xdrReader{b: p}
	active := int32(r.uint32s(1))
	return active, reply(procNetworkIsActive, &r)
}

func (c *rpcClient) ConnectClose() error {
	_, err := c.call(procConnectClose, nil)
	return err
}
