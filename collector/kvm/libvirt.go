package kvm

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// libvirtClient is the narrow seam in front of libvirt's RPC protocol:
// exactly the calls a check makes, so the unit tests can fake what libvirtd
// does and nothing more. rpcClient implements it.
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
	// The promised-resource keys' calls (docs/configuration.md: "Promised
	// resources (KVM)"), made only for a host with one of them: NodeGetInfo once
	// per connection (a host's cores and memory do not change while
	// libvirtd runs), ConnectGetAllDomainStats once per check for every
	// defined domain's vCPUs and maximum memory, and the pool's volumes'
	// capacities: the list, then one StorageVolGetInfo per volume whose
	// capacity the connection does not keep, and one to refresh
	// (volumeSizes).
	NodeGetInfo() (nodeInfo, error)
	ConnectGetAllDomainStats() ([]domainStat, error)
	StoragePoolListAllVolumes(pool libvirt.StoragePool) ([]libvirt.StorageVol, error)
	StorageVolGetInfo(vol libvirt.StorageVol) (capacity uint64, err error)
	// ConnectListAllDomains names every defined domain, running or not:
	// the proxies' count of a host with proxy_vm_name whose check does
	// not read the domain stats anyway.
	ConnectListAllDomains() ([]string, error)
	// ConnectClose says goodbye when a kept connection is closed on
	// purpose, so libvirtd does not log an error for a vanished client.
	ConnectClose() error
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

func (c loggedClient) NodeGetInfo() (nodeInfo, error) {
	start := time.Now()
	n, err := c.next.NodeGetInfo()
	c.log("NodeGetInfo", start, err, slog.Uint64("cpus", n.cpus), slog.Uint64("memoryKiB", n.memoryKiB))
	return n, err
}

func (c loggedClient) ConnectGetAllDomainStats() ([]domainStat, error) {
	start := time.Now()
	d, err := c.next.ConnectGetAllDomainStats()
	c.log("ConnectGetAllDomainStats", start, err, slog.Int("domains", len(d)))
	return d, err
}

func (c loggedClient) ConnectListAllDomains() ([]string, error) {
	start := time.Now()
	d, err := c.next.ConnectListAllDomains()
	c.log("ConnectListAllDomains", start, err, slog.Int("domains", len(d)))
	return d, err
}

func (c loggedClient) StoragePoolListAllVolumes(pool libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	start := time.Now()
	v, err := c.next.StoragePoolListAllVolumes(pool)
	c.log("StoragePoolListAllVolumes", start, err, slog.String("pool", pool.Name), slog.Int("volumes", len(v)))
	return v, err
}

func (c loggedClient) StorageVolGetInfo(vol libvirt.StorageVol) (uint64, error) {
	start := time.Now()
	n, err := c.next.StorageVolGetInfo(vol)
	c.log("StorageVolGetInfo", start, err, slog.String("volume", vol.Name), slog.Uint64("capacity", n))
	return n, err
}
