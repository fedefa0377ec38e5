package kvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
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

// unreadLimit is how much of a reply may arrive unread, 0 while no call
// awaits one: what drainedChannel asks of data that arrives.
func (c *rpcClient) unreadLimit() int { return c.frames.unreadLimit() }

// call sends procedure proc with its XDR-encoded arguments and returns the
// values of libvirtd's reply, decoded by the shape procedures gives proc.
// An error reply is returned as the error libvirtd sent (decodeError).
func (c *rpcClient) call(proc uint32, args []byte) (values, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.frames.violation(); err != nil {
		// The frame checker closed the connection: say why.
		return values{}, err
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
		return values{}, fmt.Errorf("libvirt call %s not sent: %w", procName(proc), err)
	}
	r, err := c.frames.next()
	if err != nil {
		var fe *frameError
		if errors.As(err, &fe) {
			return values{}, err
		}
		return values{}, fmt.Errorf("libvirt call %s unanswered, the connection ended: %w", procName(proc), err)
	}
	// The frame checker matched the reply's serial and procedure with
	// this call, and decoded it by the shape of the call's reply.
	return r.vals, r.err
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

// The auth types of remote_auth_type.
const (
	authNone   = 0
	authPolkit = 2
)

// ConnectToURI runs libvirt's handshake as go-libvirt did: the auth list,
// which libvirtd requires before anything else, polkit's check when that is
// the first type offered that needs no exchange, then the connect open.
func (c *rpcClient) ConnectToURI(uri libvirt.ConnectURI) error {
	v, err := c.call(procAuthList, nil)
	if err != nil {
		return err
	}
	for _, t := range v.auths() {
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

// The methods below read the values of a reply in the order of its shape
// in procedures.

func (c *rpcClient) ConnectGetLibVersion() (uint64, error) {
	v, err := c.call(procConnectGetLibVersion, nil)
	return v.nums[0], err
}

func (c *rpcClient) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	v, err := c.call(procStoragePoolLookupByName, xdrArgs(nil).string(name))
	if err != nil {
		return libvirt.StoragePool{}, err
	}
	return libvirt.StoragePool{Name: v.strs[0], UUID: v.uuid}, nil
}

func (c *rpcClient) StoragePoolGetInfo(pool libvirt.StoragePool) (state uint8, capacity, allocation, available uint64, err error) {
	v, err := c.call(procStoragePoolGetInfo, xdrArgs(nil).string(pool.Name).uuid(pool.UUID))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	// The frame checker refused a state above 255.
	return uint8(v.nums[0]), v.nums[1], v.nums[2], v.nums[3], nil
}

func (c *rpcClient) NodeGetFreeMemory() (uint64, error) {
	v, err := c.call(procNodeGetFreeMemory, nil)
	return v.nums[0], err
}

func (c *rpcClient) StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	v, err := c.call(procStorageVolLookupByName, xdrArgs(nil).string(pool.Name).uuid(pool.UUID).string(name))
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	return libvirt.StorageVol{Pool: v.strs[0], Name: v.strs[1], Key: v.strs[2]}, nil
}

func (c *rpcClient) NetworkLookupByName(name string) (libvirt.Network, error) {
	v, err := c.call(procNetworkLookupByName, xdrArgs(nil).string(name))
	if err != nil {
		return libvirt.Network{}, err
	}
	return libvirt.Network{Name: v.strs[0], UUID: v.uuid}, nil
}

func (c *rpcClient) NetworkIsActive(n libvirt.Network) (int32, error) {
	v, err := c.call(procNetworkIsActive, xdrArgs(nil).string(n.Name).uuid(n.UUID))
	return int32(v.nums[0]), err
}

// nodeInfo is what the capacity reads of NodeGetInfo: the host's active
// CPUs and its memory in KiB.
type nodeInfo struct {
	cpus, memoryKiB uint64
}

func (c *rpcClient) NodeGetInfo() (nodeInfo, error) {
	v, err := c.call(procNodeGetInfo, nil)
	// memory, then cpus: the model was read and dropped.
	return nodeInfo{memoryKiB: v.nums[0], cpus: v.nums[1]}, err
}

// The stats groups and flag of the domain stats call: VIR_DOMAIN_STATS_VCPU
// and VIR_DOMAIN_STATS_BALLOON, whose vcpu.maximum and balloon.maximum
// libvirt's QEMU driver reports from the domain's definition for running
// and shut-off domains alike; no filter flag, so every domain, whatever its
// state; VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT, so that a domain busy
// with a job (a migration, a snapshot) is reported without the statistics
// that need its monitor instead of holding the call up.
const (
	domainStatsVCPU    = 8
	domainStatsBalloon = 4
	domainStatsNowait  = 1 << 29
)

func (c *rpcClient) ConnectGetAllDomainStats() ([]domainStat, error) {
	// remote_connect_get_all_domain_stats_args: no domains (all of
	// them), the stats groups, the flags.
	v, err := c.call(procConnectGetAllDomainStats, xdrArgs(nil).uint32(0).uint32(domainStatsVCPU|domainStatsBalloon).uint32(domainStatsNowait))
	return v.doms(), err
}

func (c *rpcClient) ConnectListAllDomains() ([]string, error) {
	// remote_connect_list_all_domains_args: need_results (1: the list,
	// not only its length), flags (0: every domain, running or not).
	v, err := c.call(procConnectListAllDomains, xdrArgs(nil).uint32(1).uint32(0))
	return v.names(), err
}

func (c *rpcClient) StoragePoolListAllVolumes(pool libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	// remote_storage_pool_list_all_volumes_args: the pool, need_results
	// (1: the list, not only its length), flags (none are defined).
	v, err := c.call(procStoragePoolListAllVolumes, xdrArgs(nil).string(pool.Name).uuid(pool.UUID).uint32(1).uint32(0))
	return v.vols(), err
}

func (c *rpcClient) StorageVolGetInfo(vol libvirt.StorageVol) (uint64, error) {
	v, err := c.call(procStorageVolGetInfo, xdrArgs(nil).string(vol.Pool).string(vol.Name).string(vol.Key))
	// type, capacity (the virtual size), allocation
	return v.nums[1], err
}

func (c *rpcClient) ConnectClose() error {
	_, err := c.call(procConnectClose, nil)
	return err
}
