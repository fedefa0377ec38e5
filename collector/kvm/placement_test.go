package kvm

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// callsOf runs fn and returns the libvirt calls it made on the fake.
func callsOf(e *env, fn func()) map[string]int {
	before := e.fake.callCounts()
	fn()
	after := e.fake.callCounts()
	for k, v := range before {
		if after[k] -= v; after[k] == 0 {
			delete(after, k)
		}
	}
	return after
}

func wantCalls(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: calls %v, want %v", what, got, want)
		return
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: calls %v, want %v", what, got, want)
			return
		}
	}
}

// TestKeptHandles: a steady check is one call per key (the pool's info on
// its kept handle, the volume's lookup, the network's state on its kept
// handle); a pool or network defined again under the same name (a new
// UUID) is looked up again, once, without a false PoolMissing or
// NetworkMissing; one that is gone is PoolMissing or NetworkMissing, and
// the connection is kept through all of it.
func TestKeptHandles(t *testing.T) {
	e := newEnv(t)
	e.fake.volumes["proxy-base.qcow2"] = true
	e.fake.networks["proxies"] = &fakeNetwork{active: true}
	e.cfg.Hosts[0].Volume, e.cfg.Hosts[0].Network = "proxy-base.qcow2", "proxies"
	c := e.checker()
	checkWant := func(want provider.Reason) map[string]int {
		t.Helper()
		var v provider.Verdict
		calls := callsOf(e, func() { v = check(t, c, hostName, time.Minute) })
		if v.Reason != want {
			t.Fatalf("reason %s (%s), want %s", v.Reason, v.Message, want)
		}
		return calls
	}

	wantCalls(t, "first check", checkWant(provider.ReasonReady), map[string]int{
		"ConnectToURI": 1, "ConnectGetLibVersion": 1, "StoragePoolLookupByName": 1, "StoragePoolGetInfo": 1,
		"StorageVolLookupByName": 1, "NetworkLookupByName": 1, "NetworkIsActive": 1,
	})
	steady := map[string]int{"StoragePoolGetInfo": 1, "StorageVolLookupByName": 1, "NetworkIsActive": 1}
	for range 3 {
		wantCalls(t, "steady check", checkWant(provider.ReasonReady), steady)
	}

	e.fake.set(func(f *fakeLibvirt) { f.poolGen++ })
	wantCalls(t, "pool defined again", checkWant(provider.ReasonReady), map[string]int{
		"StoragePoolGetInfo": 2, "StoragePoolLookupByName": 1, "StorageVolLookupByName": 1, "NetworkIsActive": 1,
	})
	wantCalls(t, "steady check after the pool's new lookup", checkWant(provider.ReasonReady), steady)

	// The pool goes while its handle is used for the volume: the handle is
	// dropped, so the next check looks the pool up before asking for its
	// info instead of asking on the stale handle first.
	e.fake.set(func(f *fakeLibvirt) { f.poolGoneAtVolume = true })
	wantCalls(t, "pool gone at the volume lookup", checkWant(ReasonPoolMissing), map[string]int{
		"StoragePoolGetInfo": 1, "StorageVolLookupByName": 1,
	})
	wantCalls(t, "check after the pool went at the volume lookup", checkWant(provider.ReasonReady), map[string]int{
		"StoragePoolLookupByName": 1, "StoragePoolGetInfo": 1, "StorageVolLookupByName": 1, "NetworkIsActive": 1,
	})

	e.fake.set(func(f *fakeLibvirt) { f.networks["proxies"] = &fakeNetwork{gen: 1, active: true} })
	wantCalls(t, "network defined again", checkWant(provider.ReasonReady), map[string]int{
		"StoragePoolGetInfo": 1, "StorageVolLookupByName": 1, "NetworkIsActive": 2, "NetworkLookupByName": 1,
	})
	wantCalls(t, "steady check after the network's new lookup", checkWant(provider.ReasonReady), steady)

	e.fake.set(func(f *fakeLibvirt) { delete(f.networks, "proxies") })
	wantCalls(t, "network undefined", checkWant(ReasonNetworkMissing), map[string]int{
		"StoragePoolGetInfo": 1, "StorageVolLookupByName": 1, "NetworkIsActive": 1, "NetworkLookupByName": 1,
	})
	e.fake.set(func(f *fakeLibvirt) { f.networks["proxies"] = &fakeNetwork{gen: 2, active: true} })
	checkWant(provider.ReasonReady)

	e.fake.set(func(f *fakeLibvirt) {
		f.lookupErr = libvirt.Error{Code: uint32(libvirt.ErrNoStoragePool), Message: "Storage pool not found"}
	})
	wantCalls(t, "pool undefined", checkWant(ReasonPoolMissing), map[string]int{
		"StoragePoolGetInfo": 1, "StoragePoolLookupByName": 1,
	})
	wantCalls(t, "pool still undefined", checkWant(ReasonPoolMissing), map[string]int{"StoragePoolLookupByName": 1})
	e.fake.set(func(f *fakeLibvirt) { f.lookupErr = nil; f.poolGen++ })
	checkWant(provider.ReasonReady)

	if got := e.srv.accepted.Load(); got != 1 {
		t.Errorf("%d dials, want 1: every verdict above keeps the connection", got)
	}
}

// TestPlacementPrecedence: a pool-state reason, then PoolFull, then
// VolumeMissing, NetworkMissing, NetworkInactive and HostMemoryLow
// (docs/configuration.md: "KVM"); what an earlier one finds, the later
// ones are not asked about.
func TestPlacementPrecedence(t *testing.T) {
	type setup struct {
		state                          libvirt.StoragePoolState
		poolFull, memoryLow            bool
		volume, network, networkActive bool
	}
	allBad := setup{state: libvirt.StoragePoolRunning, poolFull: true, memoryLow: true}
	tests := []struct {
		name   string
		s      setup
		want   provider.Reason
		asked  []string // calls of the check after the pool's info
		absent []string
		// binding is what binds the capacity, 0 unless Ready: the
		// blocking reason itself, or the headroom short of its minimum.
		binding string
	}{
		{"pool inactive wins", setup{state: libvirt.StoragePoolInactive, poolFull: true, memoryLow: true}, ReasonPoolInactive,
			nil, []string{"StorageVolLookupByName", "NetworkIsActive", "NodeGetFreeMemory"}, "PoolInactive"},
		{"PoolFull before VolumeMissing", allBad, ReasonPoolFull,
			[]string{"NodeGetFreeMemory"}, []string{"StorageVolLookupByName", "NetworkIsActive"}, "pool default"},
		{"VolumeMissing before NetworkMissing", setup{state: libvirt.StoragePoolRunning, memoryLow: true}, ReasonVolumeMissing,
			[]string{"StorageVolLookupByName"}, []string{"NetworkIsActive"}, "VolumeMissing"},
		{"NetworkMissing before HostMemoryLow", setup{state: libvirt.StoragePoolRunning, memoryLow: true, volume: true}, ReasonNetworkMissing,
			[]string{"StorageVolLookupByName", "NetworkLookupByName"}, []string{"NetworkIsActive"}, "NetworkMissing"},
		{"NetworkInactive before HostMemoryLow", setup{state: libvirt.StoragePoolRunning, memoryLow: true, volume: true, network: true}, ReasonNetworkInactive,
			[]string{"StorageVolLookupByName", "NetworkIsActive"}, nil, "NetworkInactive"},
		{"HostMemoryLow last", setup{state: libvirt.StoragePoolRunning, memoryLow: true, volume: true, network: true, networkActive: true}, ReasonHostMemoryLow,
			[]string{"StorageVolLookupByName", "NetworkIsActive", "NodeGetFreeMemory"}, nil, "memory"},
		{"Ready", setup{state: libvirt.StoragePoolRunning, volume: true, network: true, networkActive: true}, provider.ReasonReady,
			[]string{"StorageVolLookupByName", "NetworkIsActive", "NodeGetFreeMemory"}, nil, "memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.fake.state = uint8(tt.s.state)
			e.fake.freeMemory = 8 << 30
			h := e.cfg.Hosts[0]
			h.Volume, h.Network, h.MinFreeMemoryBytes = "proxy-base.qcow2", "proxies", 4<<30
			if tt.s.poolFull {
				h.MinPoolAvailableBytes = e.fake.available + 1
			}
			if tt.s.memoryLow {
				h.MinFreeMemoryBytes = e.fake.freeMemory + 1
			}
			if tt.s.volume {
				e.fake.volumes["proxy-base.qcow2"] = true
			}
			if tt.s.network {
				e.fake.networks["proxies"] = &fakeNetwork{active: tt.s.networkActive}
			}
			c := e.checker()
			var v provider.Verdict
			calls := callsOf(e, func() { v = check(t, c, hostName, time.Minute) })
			if v.Reason != tt.want {
				t.Fatalf("reason %s (%s), want %s", v.Reason, v.Message, tt.want)
			}
			// Ready: 8 GiB free, 4 GiB a proxy; the pool has room for more.
			want := provider.Capacity{Known: true, Binding: tt.binding}
			if tt.want == provider.ReasonReady {
				want.Proxies = 2
			}
			if v.Capacity != want {
				t.Errorf("capacity %+v, want %+v", v.Capacity, want)
			}
			for _, call := range tt.asked {
				if calls[call] == 0 {
					t.Errorf("%s not called (calls %v)", call, calls)
				}
			}
			for _, call := range tt.absent {
				if calls[call] != 0 {
					t.Errorf("%s called after the verdict was known (calls %v)", call, calls)
				}
			}
		})
	}
}

// TestPlacementMessages: what a user reads for each placement reason.
func TestPlacementMessages(t *testing.T) {
	e := newEnv(t)
	e.cfg.Hosts[0].Volume, e.cfg.Hosts[0].Network = "proxy-base.qcow2", "proxies"
	c := e.checker()
	v := check(t, c, hostName, time.Minute)
	if v.Reason != ReasonVolumeMissing || !strings.HasPrefix(v.Message, `volume "proxy-base.qcow2" not found in pool "default": `) {
		t.Errorf("%s %q, want VolumeMissing naming the volume and the pool", v.Reason, v.Message)
	}
	e.fake.set(func(f *fakeLibvirt) { f.volumes["proxy-base.qcow2"] = true })
	v = check(t, c, hostName, time.Minute)
	if v.Reason != ReasonNetworkMissing || !strings.HasPrefix(v.Message, `network "proxies" not found: `) {
		t.Errorf("%s %q, want NetworkMissing naming the network", v.Reason, v.Message)
	}
	e.fake.set(func(f *fakeLibvirt) { f.networks["proxies"] = &fakeNetwork{} })
	v = check(t, c, hostName, time.Minute)
	if v.Reason != ReasonNetworkInactive || !strings.Contains(v.Message, "virsh net-start proxies") || !strings.Contains(v.Message, "virsh net-autostart proxies") {
		t.Errorf("%s %q, want NetworkInactive saying how to start the network", v.Reason, v.Message)
	}
	d := v.Facts.Details()
	if d["volume"] != "proxy-base.qcow2" || d["network"] != "proxies" {
		t.Errorf("details %v, want the volume and the network", d)
	}
	if d := newEnvFacts(t); d["volume"] != "" || d["network"] != "" {
		t.Errorf("details of a host without volume or network: %v", d)
	}
}

func newEnvFacts(t *testing.T) map[string]string {
	e := newEnv(t)
	return check(t, e.checker(), hostName, time.Minute).Facts.Details()
}

// TestPlacementOverTheWire makes the placement calls with the exporter's
// libvirt client, through the frame checker, to a libvirt peer that speaks the wire
// protocol: found, missing and inactive answers reach the verdict, and a
// steady check makes one call per key.
func TestPlacementOverTheWire(t *testing.T) {
	e := newEnv(t)
	fake := NewFakeLibvirtd(t)
	srv := newSSHServer(t, e.key.PublicKey(), fake.Path())
	e.writeKnownHosts(knownHostsLine(srv.addr, srv.hostKey.PublicKey()))
	for _, tt := range []struct {
		volume, network string
		want            provider.Reason
	}{
		{"proxy-base.qcow2", "proxies", provider.ReasonReady},
		{MissingVolume, "proxies", ReasonVolumeMissing},
		{"proxy-base.qcow2", MissingNetwork, ReasonNetworkMissing},
		{"proxy-base.qcow2", InactiveNetwork, ReasonNetworkInactive},
	} {
		t.Run(tt.volume+"/"+tt.network, func(t *testing.T) {
			cfg := *e.cfg
			cfg.LibvirtSocket = fake.Path()
			cfg.Hosts = []*Host{{
				Address:      srv.addr,
				Name:         hostName,
				HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile, Volume: tt.volume, Network: tt.network}}}
			c, err := New(&cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 3 {
				before := map[uint32]int{}
				for _, p := range []uint32{procStoragePoolLookupByName, procStoragePoolGetInfo, procStorageVolLookupByName, procNetworkLookupByName, procNetworkIsActive} {
					before[p] = fake.Calls(p)
				}
				if v := check(t, c, hostName, time.Minute); v.Reason != tt.want {
					t.Fatalf("check %d: %s (%s), want %s", i+1, v.Reason, v.Message, tt.want)
				}
				if i == 0 {
					continue
				}
				// A steady check: the pool's info, the volume's lookup, and
				// the network's state on its kept handle (looked up again
				// only while it is missing).
				want := map[uint32]int{procStoragePoolLookupByName: 0, procStoragePoolGetInfo: 1, procStorageVolLookupByName: 1, procNetworkIsActive: 1}
				switch tt.want {
				case ReasonVolumeMissing:
					want[procNetworkIsActive] = 0
				case ReasonNetworkMissing:
					want[procNetworkIsActive], want[procNetworkLookupByName] = 0, 1
				}
				for p, w := range want {
					if got := fake.Calls(p) - before[p]; got != w {
						t.Errorf("check %d: procedure %d called %d times, want %d", i+1, p, got, w)
					}
				}
			}
		})
	}
}

// TestLateAnswerKeepsConnection: a libvirtd that answers after the check's
// deadline, within the grace, gives Timeout and keeps its connection (no
// redial); one that has not answered when the grace runs out loses it.
func TestLateAnswerKeepsConnection(t *testing.T) {
	for _, tt := range []struct {
		name         string
		grace        time.Duration
		late         bool // answered once the deadline passed, else never
		wantConnects uint64
	}{
		{"answered late, within the grace", time.Hour, true, 1},
		{"not answered within the grace", time.Millisecond, false, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.checker()
			c.lateGrace = tt.grace
			if v := check(t, c, hostName, time.Minute); v.Reason != provider.ReasonReady {
				t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
			}
			gate, held := make(chan struct{}), make(chan struct{}, 1)
			if tt.late {
				e.fake.set(func(f *fakeLibvirt) { f.infoGate, f.infoHeld = gate, held })
			} else {
				e.stub.setMode(stubHang)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan provider.Verdict, 1)
			calls := e.fake.callCounts()["StoragePoolGetInfo"]
			go func() { done <- c.Check(ctx, testLogger(t), hostName) }()
			if tt.late {
				<-held // the call is under way
			} else {
				for e.fake.callCounts()["StoragePoolGetInfo"] == calls {
					time.Sleep(time.Millisecond)
				}
			}
			cancel()
			if tt.late {
				e.fake.set(func(f *fakeLibvirt) { f.infoGate = nil })
				close(gate)
			}
			v := <-done
			e.stub.setMode(stubEcho)
			if v.Reason != provider.ReasonTimeout {
				t.Fatalf("reason %s (%s), want Timeout", v.Reason, v.Message)
			}
			v = check(t, c, hostName, time.Minute)
			if v.Reason != provider.ReasonReady || factsOf(t, v).Connects != tt.wantConnects {
				t.Errorf("next check: %s (%s), connects %d; want Ready and %d", v.Reason, v.Message, factsOf(t, v).Connects, tt.wantConnects)
			}
		})
	}
}

// recordHandler keeps the records logged at info and above.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelDebug }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// drops are the levels and reasons of the dropped-connection lines.
func (h *recordHandler) drops() (out []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != dropLogged {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "why" {
				out = append(out, r.Level.String()+" "+a.Value.String())
			}
			return true
		})
	}
	return out
}

// TestDropsAreLogged: every connection the checker established and did not
// keep is logged with why, at info, and at debug when the host's last
// connection went the same way and none has outlived a check since.
func TestDropsAreLogged(t *testing.T) {
	e := newEnv(t)
	fake := NewFakeLibvirtd(t)
	srv := newSSHServer(t, e.key.PublicKey(), fake.Path())
	e.writeKnownHosts(knownHostsLine(srv.addr, srv.hostKey.PublicKey()))
	cfg := *e.cfg
	cfg.LibvirtSocket = fake.Path()
	cfg.Hosts = []*Host{{Address: srv.addr, Name: hostName, HostSettings: &HostSettings{User: "proxyops", Pool: DropPool, PrivateKeyFile: e.keyFile}}}
	rec := &recordHandler{}
	logger := slog.New(rec)
	c, err := New(&cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func(want provider.Reason) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if v := c.Check(ctx, logger, hostName); v.Reason != want {
			t.Fatalf("reason %s (%s), want %s", v.Reason, v.Message, want)
		}
	}
	// Every connection to this host drops during the pool's info.
	run(ReasonLibvirtConnectionLost)
	run(ReasonLibvirtConnectionLost)
	c.lookup(hostName).pool = "default"
	run(provider.ReasonReady)
	run(provider.ReasonReady) // the connection outlived a check
	srv.killConns()
	waitDead(t, c)
	run(provider.ReasonReady)
	want := []string{
		"INFO the connection broke during a libvirt call",
		"DEBUG the connection broke during a libvirt call",
		"INFO the connection ended since the last check (closed by the host, sshd or the network)",
	}
	if got := rec.drops(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("dropped connections logged as\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := srv.accepted.Load(); n != 4 {
		t.Errorf("%d dials, want 4: one per dropped connection, and the first", n)
	}
}
