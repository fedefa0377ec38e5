package kvm

import (
	"io"
	"net"
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
	calls      map[string]int
	// gate, when set, holds every ConnectToURI until it is closed: a
	// dial that takes longer than the check that started it.
	gate chan struct{}
}

func newFakeLibvirt() *fakeLibvirt {
	return &fakeLibvirt{
		version:    9000000,
		state:      uint8(libvirt.StoragePoolRunning),
		capacity:   100 << 30,
		allocation: 30 << 30,
		available:  70 << 30,
		calls:      map[string]int{},
	}
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
	// connection, as go-libvirt's single reader does. Without it several
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
	return libvirt.StoragePool{Name: name}, nil
}

func (c *fakeClient) StoragePoolGetInfo(libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	if err := c.roundTrip("StoragePoolGetInfo"); err != nil {
		return 0, 0, 0, 0, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.infoErr != nil {
		return 0, 0, 0, 0, c.f.infoErr
	}
	return c.f.state, c.f.capacity, c.f.allocation, c.f.available, nil
}

func (c *fakeClient) ConnectClose() error {
	return c.roundTrip("ConnectClose")
}
