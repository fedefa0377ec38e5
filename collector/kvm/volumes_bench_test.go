package kvm

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// benchVolumeCapacity is each benchmark volume's capacity: 16,384 of them
// hold 16 GiB of a 100 GiB pool, so the host stays Ready.
const benchVolumeCapacity = 1 << 20

// benchVolumes are n volumes with short names, so that libvirt's maximum
// of one list reply (16,384) fits the reply bound (maxListReplyLen).
func benchVolumes(n int) []FakeVolume {
	vols := make([]FakeVolume, n)
	for i := range vols {
		vols[i] = FakeVolume{Name: fmt.Sprintf("v%05d", i), Capacity: benchVolumeCapacity}
	}
	return vols
}

// BenchmarkPoolVolumes is the steady check of a host with
// disk_allocation_ratio whose pool holds libvirt's maximum of one list
// reply, 16,384 volumes (docs/scaling.md: "Performance"): the libvirt
// calls (rpcs/op) and the exporter's CPU (cpu-ms/op) of one check on the
// kept connection, and those of the first check (cold-rpcs, cold-cpu-ms).
// The stand-in libvirtd and SSH server run in a process of their own
// (serveFleet), without latency, so the CPU is the exporter's alone.
func BenchmarkPoolVolumes(b *testing.B) {
	dir := b.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	knownHosts := filepath.Join(dir, "known_hosts")
	key := writeKey(b, keyFile)
	socket, hosts, lines := startFleetProcess(b, 0, 1, 0, key.PublicKey(), "",
		fleetLatencyEnv+"=0s", fleetVolumesEnv+"="+strconv.Itoa(storageVolListMax))
	if err := os.WriteFile(knownHosts, []byte(lines), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := &Entry{
		Name: "pool", User: "proxyops", PrivateKeyFile: keyFile, KnownHostsFile: knownHosts,
		LibvirtSocket: socket, LibvirtURI: DefaultLibvirtURI, Pool: DefaultPool,
		MaxConcurrentDials: DefaultMaxConcurrentDials, DialTimeout: DefaultDialTimeout,
		Hosts: []*Host{{Address: hosts[0].addr, Name: hostName, HostSettings: &HostSettings{
			User: "proxyops", Pool: DefaultPool, PrivateKeyFile: keyFile,
			MinPoolAvailable: "20GiB", MinPoolAvailableBytes: 20 << 30, Promised: &Promised{DiskRatio: 1},
		}}},
	}
	logger := slog.New(slog.DiscardHandler)
	c, err := New(cfg, logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var rpcs atomic.Int64
	c.newClient = func(conn net.Conn) libvirtClient {
		rpc := newLibvirtClient(conn).(*rpcClient)
		return countingRPC{countingClient{rpc, &rpcs}, rpc}
	}
	// The pool's 100 GiB less the volumes' 16 GiB leave 4 proxies of
	// 20 GiB; its 70 GiB available, 3.
	want := provider.Capacity{Known: true, Proxies: 3, Binding: "pool default"}
	checkOnce := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if v := c.Check(ctx, logger, hostName); v.Reason != provider.ReasonReady || v.Capacity != want {
			b.Fatalf("%s %s (%s), want Ready with %s", v.Reason, v.Capacity, v.Message, want)
		}
	}
	cpu := cpuTime()
	checkOnce() // dials, and reads every volume's size
	coldRPCs, coldCPU := rpcs.Swap(0), cpuTime()-cpu
	b.ReportAllocs()
	cpu = cpuTime()
	for b.Loop() {
		checkOnce()
	}
	b.ReportMetric(float64(coldRPCs), "cold-rpcs")
	b.ReportMetric(coldCPU.Seconds()*1000, "cold-cpu-ms")
	b.ReportMetric(float64(rpcs.Load())/float64(b.N), "rpcs/op")
	b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
}

// countingRPC counts the calls of an rpcClient and, unlike countingClient,
// lets the drain allow a list reply's size while a list call is in flight
// (frameConn.unreadLimit): 16,384 volumes are a reply of 640 KiB.
type countingRPC struct {
	countingClient
	rpc *rpcClient
}

func (c countingRPC) unreadLimit() int { return c.rpc.unreadLimit() }
