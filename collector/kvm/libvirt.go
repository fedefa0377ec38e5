package kvm

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// libvirtClient is the narrow seam in front of go-libvirt: exactly the calls a
// check makes, so the unit tests can fake what libvirtd does and nothing more.
// *libvirt.Libvirt implements it.
type libvirtClient interface {
	// ConnectToURI runs the libvirt handshake (auth list, connect open).
	ConnectToURI(uri libvirt.ConnectURI) error
	// ConnectGetLibVersion is asked once per connection, for kvm_host_info.
	ConnectGetLibVersion() (uint64, error)
	// StoragePoolGetInfo is the one call of a steady check; the pool's
	// handle is looked up (StoragePoolLookupByName) once per connection,
	// and again only when libvirt says the pool it names is gone.
	StoragePoolLookupByName(name string) (libvirt.StoragePool, error)
	StoragePoolGetInfo(pool libvirt.StoragePool) (state uint8, capacity, allocation, available uint64, err error)
	// NodeGetFreeMemory is made only for a host with min_free_memory.
	NodeGetFreeMemory() (uint64, error)
	// StorageVolLookupByName is made only for a host with volume, and
	// NetworkIsActive only for one with network, whose handle is looked
	// up (NetworkLookupByName) as the pool's is.
	StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error)
	NetworkLookupByName(name string) (libvirt.Network, error)
	NetworkIsActive(network libvirt.Network) (int32, error)
	// ConnectClose says goodbye when a kept connection is closed on
	// purpose, so libvirtd does not log an error for a vanished client.
	ConnectClose() error
}

// newLibvirtClient speaks libvirt's RPC protocol over conn, the libvirt
// socket opened over SSH. The dialer hands go-libvirt that conn instead of
// letting it dial (its own SSH dialer neither bounds the handshake nor
// closes the client), behind a frameConn so that go-libvirt only ever reads
// frames that libvirt's protocol allows.
func newLibvirtClient(conn net.Conn) libvirtClient {
	fc := newFrameConn(conn)
	return checkedClient{next: libvirt.NewWithDialer(dialers.NewAlreadyConnected(fc)), frames: fc}
}

var _ libvirtClient = (*libvirt.Libvirt)(nil)

// checkedClient names the protocol violation behind a failed call: when
// frameConn refuses a frame, go-libvirt only sees its connection end and
// reports the call as interrupted.
type checkedClient struct {
	next   *libvirt.Libvirt
	frames *frameConn
}

var _ libvirtClient = checkedClient{}

func (c checkedClient) explain(err error) error {
	if err == nil {
		return nil
	}
	if v := c.frames.violation(); v != nil {
		return fmt.Errorf("%w (%w)", v, err)
	}
	return err
}

func (c checkedClient) ConnectToURI(uri libvirt.ConnectURI) error {
	return c.explain(c.next.ConnectToURI(uri))
}

func (c checkedClient) ConnectGetLibVersion() (uint64, error) {
	v, err := c.next.ConnectGetLibVersion()
	return v, c.explain(err)
}

func (c checkedClient) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	p, err := c.next.StoragePoolLookupByName(name)
	return p, c.explain(err)
}

func (c checkedClient) StoragePoolGetInfo(pool libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	state, capacity, allocation, available, err := c.next.StoragePoolGetInfo(pool)
	return state, capacity, allocation, available, c.explain(err)
}

func (c checkedClient) ConnectClose() error {
	return c.explain(c.next.ConnectClose())
}

// loggedClient logs every libvirt call at debug level to the logger of the
// check that makes it, so /probe?debug=true shows what went over the wire.
// It is made per check because the client outlives the check.
type loggedClient struct {
	next   libvirtClient
	logger *slog.Logger
}

var _ libvirtClient = loggedClient{}

// log writes one call's line. Typed attributes (LogAttrs) cost no
// conversion: a steady check logs one call per host and scrape into its
// debug log.
func (c loggedClient) log(call string, start time.Time, err error, attrs ...slog.Attr) {
	all := make([]slog.Attr, 0, 3+len(attrs))
	all = append(append(all, slog.String("call", call), slog.Duration("duration", time.Since(start))), attrs...)
	if err != nil {
		all = append(all, slog.Any("err", err))
	}
	c.logger.LogAttrs(context.Background(), slog.LevelDebug, "libvirt call", all...)
}

func (c loggedClient) ConnectToURI(uri libvirt.ConnectURI) error {
	start := time.Now()
	err := c.next.ConnectToURI(uri)
	c.log("ConnectToURI", start, err, slog.String("uri", string(uri)))
	return err
}

func (c loggedClient) ConnectGetLibVersion() (uint64, error) {
	start := time.Now()
	v, err := c.next.ConnectGetLibVersion()
	c.log("ConnectGetLibVersion", start, err, slog.String("version", formatVersion(v)))
	return v, err
}

func (c loggedClient) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	start := time.Now()
	p, err := c.next.StoragePoolLookupByName(name)
	c.log("StoragePoolLookupByName", start, err, slog.String("pool", name))
	return p, err
}

func (c loggedClient) StoragePoolGetInfo(pool libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	start := time.Now()
	state, capacity, allocation, available, err := c.next.StoragePoolGetInfo(pool)
	c.log("StoragePoolGetInfo", start, err, slog.String("pool", pool.Name), slog.String("state", poolStateWord(state)),
		slog.Uint64("capacity", capacity), slog.Uint64("allocation", allocation), slog.Uint64("available", available))
	return state, capacity, allocation, available, err
}

func (c loggedClient) ConnectClose() error {
	start := time.Now()
	err := c.next.ConnectClose()
	c.log("ConnectClose", start, err)
	return err
}

// formatVersion turns libvirt's packed version (major*1e6 + minor*1e3 +
// micro) into the "9.0.0" form of kvm_host_info.
func formatVersion(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
}

// poolStateWord is virsh's word for a pool state, "" for a state libvirt
// may add later and we do not know.
func poolStateWord(state uint8) string {
	switch libvirt.StoragePoolState(state) {
	case libvirt.StoragePoolInactive:
		return "inactive"
	case libvirt.StoragePoolBuilding:
		return "building"
	case libvirt.StoragePoolRunning:
		return "running"
	case libvirt.StoragePoolDegraded:
		return "degraded"
	case libvirt.StoragePoolInaccessible:
		return "inaccessible"
	}
	return ""
}
