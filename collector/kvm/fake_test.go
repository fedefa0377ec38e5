package kvm

import (
	"io"
	"maps"
	"net"
	"slices"
	"sync"

	"github.com/digitalocean/go-libvirt"
)

// fakeLibvirt plays libvirtd behind libvirtClient. Every call makes one byte
// of round trip over the SSH channel it was given (to the socket stub), so a
// dropped or hung transport fails or blocks the call as it would with the
// real client; the answers themselves are scripted here.
type fakeLibvirt struct {
	mu         sync.Mutex
	connectErr error
	version    uint64
	lookupErr  error
	infoErr    error
	state      uint8
	capacity   uint64
	allocation uint64
	available  uint64
	freeMemory uint64
	// node, domains and volCaps are what the promised-resource calls
	// answer: the host's CPUs and memory, the defined domains, the
	// pool's volumes' capacities by name.
	node    nodeInfo
	domains []domainStat
	volCaps map[string]uint64
	// listErr, when set, is the answer to ConnectListAllDomains.
	listErr error
	// goneVols are listed volumes whose info is answered with
	// VIR_ERR_NO_STORAGE_VOL: deleted between a check's list and its
	// info. volInfos counts the info calls per volume, and volInfoHook,
	// when set, is called after each (the lock not held).
	goneVols    map[string]bool
	volInfos    map[string]int
	volInfoHook func(name string)
	// poolGen is the generation of the pool: the first byte of its
	// UUID. Redefining the pool under the same name (poolGen++) makes
	// the handles of the old one stale, as libvirtd does: the info call
	// on one is answered with VIR_ERR_NO_STORAGE_POOL.
	poolGen byte
	// poolGoneAtVolume makes the next volume lookup find the pool gone
	// (VIR_ERR_NO_STORAGE_POOL) and the pool defined again under a new
	// UUID: a pool undefined and defined again between a check's pool
	// info and its volume lookup.
	poolGoneAtVolume bool
	// volumes are the volumes the pool holds.
	volumes map[string]bool
	// networks are the networks defined, each with its generation and
	// whether it is active.
	networks map[string]*fakeNetwork
	calls    map[string]int
	// gate, when set, holds every ConnectToURI until it is closed: a
	// dial that takes longer than the check that started it.
	gate chan struct{}
	// infoGate, when set, holds every StoragePoolGetInfo until it is
	// closed, and infoHeld is told each time one is held: a libvirtd
	// that answers late.
	infoGate chan struct{}
	infoHeld chan struct{}
}

func newFakeLibvirt() *fakeLibvirt {
	return &fakeLibvirt{
		version:    9000000,
		state:      uint8(libvirt.StoragePoolRunning),
		capacity:   100 << 30,
		allocation: 30 << 30,
		available:  70 << 30,
		volumes:    map[string]bool{},
		networks:   map[string]*fakeNetwork{},
		calls:      map[string]int{},
		node:       nodeInfo{cpus: 8, memoryKiB: 32 << 20},
		volCaps:    map[string]uint64{},
		goneVols:   map[string]bool{},
		volInfos:   map[string]int{},
	}
}

func (c *fakeClient) NodeGetInfo() (nodeInfo, error) {
	if err := c.roundTrip("NodeGetInfo"); err != nil {
		return nodeInfo{}, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.node, nil
}

func (c *fakeClient) ConnectGetAllDomainStats() ([]domainStat, error) {
	if err := c.roundTrip("ConnectGetAllDomainStats"); err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return slices.Clone(c.f.domains), nil
}

func (c *fakeClient) ConnectListAllDomains() ([]string, error) {
	if err := c.roundTrip("ConnectListAllDomains"); err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.listErr != nil {
		return nil, c.f.listErr
	}
	names := make([]string, len(c.f.domains))
	for i, d := range c.f.domains {
		names[i] = d.name
	}
	return names, nil
}

func (c *fakeClient) StoragePoolListAllVolumes(p libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	if err := c.roundTrip("StoragePoolListAllVolumes"); err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	var out []libvirt.StorageVol
	names := slices.Collect(maps.Keys(c.f.volCaps))
	for name := range c.f.goneVols {
		if _, ok := c.f.volCaps[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		out = append(out, libvirt.StorageVol{Pool: p.Name, Name: name, Key: "/pool/" + name})
	}
	return out, nil
}

func (c *fakeClient) StorageVolGetInfo(v libvirt.StorageVol) (uint64, error) {
	if err := c.roundTrip("StorageVolGetInfo"); err != nil {
		return 0, err
	}
	c.f.mu.Lock()
	c.f.volInfos[v.Name]++
	hook := c.f.volInfoHook
	c.f.mu.Unlock()
	if hook != nil {
		defer hook(v.Name)
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	n, ok := c.f.volCaps[v.Name]
	if !ok || c.f.goneVols[v.Name] {
		return 0, libvirt.Error{Code: uint32(libvirt.ErrNoStorageVol), Message: "Storage volume not found"}
	}
	return n, nil
}

type fakeNetwork struct {
	gen    byte
	active bool
}

func (f *fakeLibvirt) client(conn net.Conn) libvirtClient { return &fakeClient{f: f, conn: conn} }

func (f *fakeLibvirt) set(fn func(f *fakeLibvirt)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeLibvirt) callCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.calls {
		out[k] = v
	}
	return out
}

type fakeClient struct {
	f    *fakeLibvirt
	conn net.Conn
	// rt serialises the round trips of concurrent checks sharing this
	// connection, as rpcClient does. Without it several
	// goroutines read the SSH channel at once, and at EOF x/crypto/ssh
	// wakes only one of them: the others would block forever.
	rt sync.Mutex
}

var _ libvirtClient = (*fakeClient)(nil)

func (c *fakeClient) roundTrip(call string) error {
	c.f.mu.Lock()
	c.f.calls[call]++
	c.f.mu.Unlock()
	c.rt.Lock()
	defer c.rt.Unlock()
	if _, err := c.conn.Write([]byte{'?'}); err != nil {
		return err
	}
	var b [1]byte
	_, err := io.ReadFull(c.conn, b[:])
	return err
}

func (c *fakeClient) ConnectToURI(libvirt.ConnectURI) error {
	c.f.mu.Lock()
	gate := c.f.gate
	c.f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err := c.roundTrip("ConnectToURI"); err != nil {
		return err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.connectErr
}

func (c *fakeClient) ConnectGetLibVersion() (uint64, error) {
	if err := c.roundTrip("ConnectGetLibVersion"); err != nil {
		return 0, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.version, nil
}

func (c *fakeClient) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	if err := c.roundTrip("StoragePoolLookupByName"); err != nil {
		return libvirt.StoragePool{}, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.lookupErr != nil {
		return libvirt.StoragePool{}, c.f.lookupErr
	}
	return libvirt.StoragePool{Name: name, UUID: libvirt.UUID{c.f.poolGen}}, nil
}

func (c *fakeClient) StoragePoolGetInfo(p libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	c.f.mu.Lock()
	gate, held := c.f.infoGate, c.f.infoHeld
	c.f.mu.Unlock()
	if gate != nil {
		held <- struct{}{}
		<-gate
	}
	if err := c.roundTrip("StoragePoolGetInfo"); err != nil {
		return 0, 0, 0, 0, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.lookupErr != nil || p.UUID[0] != c.f.poolGen {
		return 0, 0, 0, 0, libvirt.Error{Code: uint32(libvirt.ErrNoStoragePool), Message: "Storage pool not found: no storage pool with matching uuid"}
	}
	if c.f.infoErr != nil {
		return 0, 0, 0, 0, c.f.infoErr
	}
	return c.f.state, c.f.capacity, c.f.allocation, c.f.available, nil
}

func (c *fakeClient) StorageVolLookupByName(p libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	if err := c.roundTrip("StorageVolLookupByName"); err != nil {
		return libvirt.StorageVol{}, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.poolGoneAtVolume {
		c.f.poolGoneAtVolume = false
		c.f.poolGen++
	}
	if c.f.lookupErr != nil || p.UUID[0] != c.f.poolGen {
		return libvirt.StorageVol{}, libvirt.Error{Code: uint32(libvirt.ErrNoStoragePool), Message: "Storage pool not found: no storage pool with matching uuid"}
	}
	if !c.f.volumes[name] {
		return libvirt.StorageVol{}, libvirt.Error{Code: uint32(libvirt.ErrNoStorageVol), Message: "Storage volume not found: no storage vol with matching name '" + name + "'"}
	}
	return libvirt.StorageVol{Pool: p.Name, Name: name, Key: "/pool/" + name}, nil
}

func (c *fakeClient) NetworkLookupByName(name string) (libvirt.Network, error) {
	if err := c.roundTrip("NetworkLookupByName"); err != nil {
		return libvirt.Network{}, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	n := c.f.networks[name]
	if n == nil {
		return libvirt.Network{}, libvirt.Error{Code: uint32(libvirt.ErrNoNetwork), Message: "Network not found: no network with matching name '" + name + "'"}
	}
	return libvirt.Network{Name: name, UUID: libvirt.UUID{n.gen}}, nil
}

func (c *fakeClient) NetworkIsActive(net libvirt.Network) (int32, error) {
	if err := c.roundTrip("NetworkIsActive"); err != nil {
		return 0, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	n := c.f.networks[net.Name]
	if n == nil || n.gen != net.UUID[0] {
		return 0, libvirt.Error{Code: uint32(libvirt.ErrNoNetwork), Message: "Network not found: no network with matching uuid"}
	}
	if n.active {
		return 1, nil
	}
	return 0, nil
}

func (c *fakeClient) ConnectClose() error {
	return c.roundTrip("ConnectClose")
}
