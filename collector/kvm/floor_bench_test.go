package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// BenchmarkFleetFloor splits the CPU of a steady scrape of BenchmarkFleet's
// fleet into layers (docs/scaling.md: "Where a steady scrape's CPU goes"):
// each row makes, for every host at once and on its kept connection, what
// one steady check makes of that layer, and nothing above it.
//
//   - transport: one libvirt call written and its reply read on the SSH
//     channel by a minimal client (rawClient) in a goroutine per host: the
//     SSH connection, the TCP syscalls and the goroutines that any design
//     with one SSH connection per host pays.
//   - client: the same call through the exporter's libvirt client
//     (rpcClient behind the frame checker).
//   - check: the kvm checker's Check, whose logger discards.
//
// BenchmarkFleet's steady scrape adds the engine (deadlines, the check's
// debug log, the verdict's state) and the answer's 3 MB.
func BenchmarkFleetFloor(b *testing.B) {
	for _, layer := range []string{"transport", "client", "check"} {
		b.Run("hosts=1000/layer="+layer, func(b *testing.B) { benchFloor(b, 1000, layer) })
	}
}

func benchFloor(b *testing.B, n int, layer string) {
	dir := b.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	knownHosts := filepath.Join(dir, "known_hosts")
	key := writeKey(b, keyFile)
	socket, hosts := startFleet(b, n, 0, key.PublicKey(), knownHosts, 0)
	cfg := &Entry{
		Name: "floor", User: "proxyops", PrivateKeyFile: keyFile, KnownHostsFile: knownHosts,
		LibvirtSocket: socket, LibvirtURI: DefaultLibvirtURI, Pool: DefaultPool,
		MaxConcurrentDials: DefaultMaxConcurrentDials, DialTimeout: DefaultDialTimeout,
	}
	for i, h := range hosts {
		cfg.Hosts = append(cfg.Hosts, &Host{
			Address:      h.addr,
			Name:         fmt.Sprintf("h%04d", i),
			HostSettings: &HostSettings{User: "proxyops", Pool: DefaultPool, PrivateKeyFile: keyFile},
		})
	}
	logger := slog.New(slog.DiscardHandler)
	c, err := New(cfg, logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if layer == "transport" {
		c.newClient = func(conn net.Conn) libvirtClient { return &rawClient{conn: conn} }
	}

	// Warm-up: every host's connection made, as the first checks make it,
	// and its pool looked up.
	each := func(f func(h *host) error) error {
		errs := make([]error, len(c.specs))
		var wg sync.WaitGroup
		for i := range c.specs {
			h := c.hostAt(i)
			wg.Go(func() { errs[i] = f(h) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	sessions := make(map[*host]*session, n)
	pools := make(map[*host]libvirt.StoragePool, n)
	var mu sync.Mutex
	warm, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := each(func(h *host) error {
		if layer == "check" {
			if v := c.Check(warm, logger, h.name); v.Reason != provider.ReasonReady {
				return fmt.Errorf("%s: %s: %s", h.name, v.Reason, v.Message)
			}
			return nil
		}
		s, _, _, err := c.session(warm, logger, h)
		if err != nil {
			return fmt.Errorf("%s: %w", h.name, err)
		}
		p, err := s.lv.StoragePoolLookupByName(h.pool)
		if err != nil {
			return fmt.Errorf("%s: %w", h.name, err)
		}
		mu.Lock()
		sessions[h], pools[h] = s, p
		mu.Unlock()
		return nil
	}); err != nil {
		b.Fatal(err)
	}

	scrape := func() error {
		// As the engine gives each check: the scrape's deadline.
		ctx, cancel := context.WithTimeout(context.Background(), fleetHeader-fleetOffset)
		defer cancel()
		return each(func(h *host) error {
			if layer == "check" {
				if v := c.Check(ctx, logger, h.name); v.Reason != provider.ReasonReady {
					return fmt.Errorf("%s: %s: %s", h.name, v.Reason, v.Message)
				}
				return nil
			}
			state, _, _, _, err := sessions[h].lv.StoragePoolGetInfo(pools[h])
			if err == nil && libvirt.StoragePoolState(state) != libvirt.StoragePoolRunning {
				err = fmt.Errorf("pool state %d", state)
			}
			return err
		})
	}
	for range 3 { // as BenchmarkFleet's steady scrapes, after a few
		if err := scrape(); err != nil {
			b.Fatal(err)
		}
	}
	walls := make([]time.Duration, 0, b.N)
	cpuBefore := cpuTime()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := scrape(); err != nil {
			b.Fatal(err)
		}
		walls = append(walls, time.Since(start))
	}
	b.StopTimer()
	cpu := cpuTime() - cpuBefore
	slices.Sort(walls)
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/scrape")
	b.ReportMetric(walls[len(walls)/2].Seconds()*1000, "median-ms")
}

// rawClient is the least a libvirt client can do on a kept connection: one
// call at a time, written as one frame and its reply read back by the
// caller, with no reader goroutine, no generic XDR and no frame checks. It
// knows the calls a dial and a steady check make, and is the transport
// layer of BenchmarkFleetFloor only.
type rawClient struct {
	conn   net.Conn
	mu     sync.Mutex
	serial int32
	out    []byte
}

var _ libvirtClient = (*rawClient)(nil)

var errNotRaw = errors.New("not a call of rawClient")

// call sends proc with its XDR arguments and returns the reply's payload.
func (c *rawClient) call(proc uint32, args []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.serial++
	w := xdrWriter{b: c.out[:0]}
	w.u32(uint32(minFrameLen+len(args)), remoteProgram, remoteProtocolVersion, proc, frameCall, uint32(c.serial), statusOK)
	w.b = append(w.b, args...)
	c.out = w.b
	if _, err := c.conn.Write(w.b); err != nil {
		return nil, fmt.Errorf("write call %d: %w", proc, err)
	}
	var hb [minFrameLen]byte
	if _, err := io.ReadFull(c.conn, hb[:]); err != nil {
		return nil, fmt.Errorf("read reply to %d: %w", proc, err)
	}
	h := parseHeader(hb[:])
	if err := checkLength(h.length); err != nil {
		return nil, err
	}
	payload := make([]byte, h.length-minFrameLen)
	if _, err := io.ReadFull(c.conn, payload); err != nil {
		return nil, fmt.Errorf("read reply to %d: %w", proc, err)
	}
	if h.status != statusOK || h.procedure != proc || h.serial != c.serial {
		return nil, fmt.Errorf("reply to %d: status %d, procedure %d, serial %d", proc, h.status, h.procedure, h.serial)
	}
	return payload, nil
}

func (c *rawClient) ConnectToURI(uri libvirt.ConnectURI) error {
	w := xdrWriter{}
	w.u32(1) // the optional name is present
	w.str(string(uri))
	w.u32(0) // flags
	_, err := c.call(procConnectOpen, w.b)
	return err
}

func (c *rawClient) ConnectGetLibVersion() (uint64, error) {
	p, err := c.call(procConnectGetLibVersion, nil)
	if err != nil {
		return 0, err
	}
	r := xdrReader{b: p}
	v := r.uint64()
	return v, r.err
}

func (c *rawClient) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	w := xdrWriter{}
	w.str(name)
	p, err := c.call(procStoragePoolLookupByName, w.b)
	if err != nil {
		return libvirt.StoragePool{}, err
	}
	pool := libvirt.StoragePool{Name: firstString(p)}
	if off := 4 + len(pool.Name) + (4-len(pool.Name)%4)%4; off+16 <= len(p) {
		copy(pool.UUID[:], p[off:])
	}
	return pool, nil
}

func (c *rawClient) StoragePoolGetInfo(pool libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	p, err := c.call(procStoragePoolGetInfo, xdrArgs(nil).string(pool.Name).uuid(pool.UUID))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	r := xdrReader{b: p}
	state := r.uint32s(1)
	capacity, allocation, available := r.uint64(), r.uint64(), r.uint64()
	return uint8(state), capacity, allocation, available, r.err
}

func (c *rawClient) ConnectClose() error {
	_, err := c.call(procConnectClose, nil)
	return err
}

func (c *rawClient) NodeGetFreeMemory() (uint64, error) { return 0, errNotRaw }

func (c *rawClient) StorageVolLookupByName(libvirt.StoragePool, string) (libvirt.StorageVol, error) {
	return libvirt.StorageVol{}, errNotRaw
}

func (c *rawClient) NetworkLookupByName(string) (libvirt.Network, error) {
	return libvirt.Network{}, errNotRaw
}

func (c *rawClient) NetworkIsActive(libvirt.Network) (int32, error) { return 0, errNotRaw }

func (c *rawClient) NodeGetInfo() (nodeInfo, error) { return nodeInfo{}, errNotRaw }

func (c *rawClient) ConnectGetAllDomainStats() ([]domainStat, error) { return nil, errNotRaw }

func (c *rawClient) StoragePoolListAllVolumes(libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	return nil, errNotRaw
}

func (c *rawClient) ConnectListAllDomains() ([]string, error) { return nil, errNotRaw }

func (c *rawClient) StorageVolGetInfo(libvirt.StorageVol) (uint64, error) { return 0, errNotRaw }
