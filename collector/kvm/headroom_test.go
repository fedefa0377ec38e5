package kvm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

func (c *fakeClient) NodeGetFreeMemory() (uint64, error) {
	if err := c.roundTrip("NodeGetFreeMemory"); err != nil {
		return 0, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.freeMemory, nil
}

func TestParseBytes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		err  string // "" = parses
	}{
		{"1073741824", 1 << 30, ""},
		{"0", 0, ""},
		{"20GiB", 20 << 30, ""},
		{"20Gi", 20 << 30, ""},
		{"4Gi", 4 << 30, ""},
		{"512MiB", 512 << 20, ""},
		{"512Mi", 512 << 20, ""},
		{"64KiB", 64 << 10, ""},
		{"2TiB", 2 << 40, ""},
		{"1.5Gi", 3 << 29, ""},
		{" 4Gi ", 4 << 30, ""},
		{"", 0, "empty quantity"},
		{"-1", 0, `"-1" is negative`},
		{"-4Gi", 0, `"-4Gi" is negative`},
		{"20G", 0, "use a binary unit"},
		{"20GB", 0, `"20GB"`},
		{"1e9", 0, "use a binary unit"},
		{"100m", 0, "use a binary unit"},
		{"0.5", 0, "not a whole number of bytes"},
		{"lots", 0, `quantity "lots"`},
		{"20 GiB", 0, `quantity "20 GiB"`},
		{"GiB", 0, `quantity "GiB" has no number`},
		{"Gi", 0, `quantity "Gi" has no number`},
		{"1.4Ki", 0, "not a whole number of bytes"},
		{"4gi", 0, `quantity "4gi"`},
		{"99999999999Ei", 0, "too large"},
	} {
		got, err := ParseBytes(tt.in)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseBytes(%q) = %d, %v; want an error with %q", tt.in, got, err, tt.err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 300 << 20: "300 MiB", 3 << 29: "1.5 GiB",
		20 << 30: "20 GiB", 5 << 40: "5 TiB", 1 << 62: "4 EiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestHeadroomVerdict(t *testing.T) {
	const gib = 1 << 30
	for _, tt := range []struct {
		name       string
		pool       provider.Reason
		available  uint64
		mins       Minimums
		freeMemory uint64
		want       provider.Reason
		message    string
	}{
		{"nothing set", provider.ReasonReady, 0, Minimums{}, 0, provider.ReasonReady, ""},
		{"enough of both", provider.ReasonReady, 30 * gib, Minimums{PoolAvailable: 20 * gib, FreeMemory: 4 * gib}, 4 * gib, provider.ReasonReady, ""},
		{"pool full", provider.ReasonReady, 300 << 20, Minimums{PoolAvailable: 20 * gib}, 0,
			ReasonPoolFull, "pool default: 300 MiB available, 20 GiB required"},
		{"one byte short", provider.ReasonReady, 20*gib - 1, Minimums{PoolAvailable: 20 * gib}, 0,
			ReasonPoolFull, "pool default: 20 GiB (21474836479 bytes) available, 20 GiB (21474836480 bytes) required"},
		{"memory low", provider.ReasonReady, 30 * gib, Minimums{PoolAvailable: 20 * gib, FreeMemory: 4 * gib}, 200 << 20,
			ReasonHostMemoryLow, "host free memory: 200 MiB, 4 GiB required"},
		{"free memory not asked for", provider.ReasonReady, 30 * gib, Minimums{PoolAvailable: 20 * gib}, 0, provider.ReasonReady, ""},
		{"pool full wins over memory low", provider.ReasonReady, gib, Minimums{PoolAvailable: 20 * gib, FreeMemory: 4 * gib}, 0,
			ReasonPoolFull, "pool default: 1 GiB available, 20 GiB required"},
		{"pool state wins over pool full", ReasonPoolInactive, 0, Minimums{PoolAvailable: 20 * gib, FreeMemory: 4 * gib}, 0,
			ReasonPoolInactive, ""},
		{"pool missing wins", ReasonPoolMissing, 0, Minimums{PoolAvailable: 20 * gib, FreeMemory: 4 * gib}, 0, ReasonPoolMissing, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, msg := headroomVerdict(tt.pool, "default", tt.available, tt.mins, tt.freeMemory)
			if got != tt.want || msg != tt.message {
				t.Errorf("got %s %q, want %s %q", got, msg, tt.want, tt.message)
			}
		})
	}
}

// TestFreeMemoryOverTheWire makes the NodeGetFreeMemory call with the
// exporter's libvirt client, through the frame checker, on the kept
// connection of a check, to a libvirt peer that speaks the wire protocol; a
// reply of the wrong shape loses the connection instead of being decoded.
func TestFreeMemoryOverTheWire(t *testing.T) {
	e := newEnv(t)
	fake := NewFakeLibvirtd(t)
	srv := newSSHServer(t, e.key.PublicKey(), fake.Path())
	e.writeKnownHosts(knownHostsLine(srv.addr, srv.hostKey.PublicKey()))
	cfg := *e.cfg
	cfg.LibvirtSocket = fake.Path()
	cfg.Hosts = []*Host{{Address: srv.addr, Name: hostName, HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile}}}
	logger := testLogger(t)
	c, err := New(&cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if v := check(t, c, hostName, time.Minute); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	h := c.lookup(hostName)
	s := h.current(logger)
	if s == nil {
		t.Fatal("no kept connection after a Ready check")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	free, reason, err := c.checkFreeMemory(ctx, logger, h, s)
	if err != nil || reason != provider.ReasonReady || free != FakeFreeMemory {
		t.Fatalf("got %d, %s, %v; want %d, Ready", free, reason, err, FakeFreeMemory)
	}
	if n := fake.Calls(procNodeGetFreeMemory); n != 1 {
		t.Errorf("%d NodeGetFreeMemory calls, want 1", n)
	}
	if h.current(logger) != s {
		t.Error("the kept connection was not kept")
	}

	fake.SetFault(FaultGarbageXDR, procNodeGetFreeMemory)
	_, reason, err = c.checkFreeMemory(ctx, logger, h, s)
	if reason != ReasonLibvirtConnectionLost || err == nil || !strings.Contains(err.Error(), "malformed libvirt frame") {
		t.Fatalf("got %s, %v; want LibvirtConnectionLost naming the malformed frame", reason, err)
	}
	if h.current(logger) != nil {
		t.Error("the connection that broke the protocol was kept")
	}
}

// TestFreeMemoryTimeout: a call still unanswered when the check's context
// ends gives Timeout and drops the connection, whose state is then unknown.
func TestFreeMemoryTimeout(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	if v := check(t, c, hostName, time.Minute); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	h := c.lookup(hostName)
	logger := testLogger(t)
	s := h.current(logger)
	e.stub.setMode(stubHang)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel only once the call is under way, however slow the machine.
		for e.fake.callCounts()["NodeGetFreeMemory"] == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, reason, err := c.checkFreeMemory(ctx, logger, h, s)
	if reason != provider.ReasonTimeout || err == nil {
		t.Fatalf("got %s, %v; want Timeout", reason, err)
	}
	if h.current(logger) != nil {
		t.Error("the connection was kept after its call was abandoned")
	}
}

func (r *recordingClient) NodeGetFreeMemory() (uint64, error) {
	r.calls = append(r.calls, "NodeGetFreeMemory")
	return 0, nil
}

// TestCheckHeadroom: the wired check. Without minimums a check on the kept
// connection makes its one pool call and no more; min_free_memory adds the
// NodeGetFreeMemory call (2) and its series; the verdicts follow the
// minimums with PoolFull before HostMemoryLow, and a pool-state reason
// before both without the extra call.
func TestCheckHeadroom(t *testing.T) {
	e := newEnv(t)
	e.fake.set(func(f *fakeLibvirt) { f.freeMemory = 3 << 30 })
	run := func(mins Minimums) (provider.Verdict, map[string]int) {
		t.Helper()
		e.cfg.Hosts[0].MinPoolAvailableBytes, e.cfg.Hosts[0].MinFreeMemoryBytes = mins.PoolAvailable, mins.FreeMemory
		c := e.checker()
		check(t, c, hostName, time.Minute) // dials
		before := e.fake.callCounts()
		v := check(t, c, hostName, time.Minute)
		after := e.fake.callCounts()
		for k := range after {
			after[k] -= before[k]
		}
		return v, after
	}
	v, calls := run(Minimums{})
	if v.Reason != provider.ReasonReady || calls["NodeGetFreeMemory"] != 0 ||
		calls["StoragePoolLookupByName"] != 0 || calls["StoragePoolGetInfo"] != 1 {
		t.Errorf("no minimums: %s %q, calls %v; want Ready with the pool's info on its kept handle", v.Reason, v.Message, calls)
	}
	if v.Capacity.Known {
		t.Errorf("no minimums: capacity %s, want none", v.Capacity)
	}
	f := v.Facts.(*Facts)
	if _, ok := f.Details()["freeMemoryBytes"]; ok || f.FreeMemoryKnown {
		t.Errorf("no minimums: free memory in the facts %+v", f)
	}

	v, calls = run(Minimums{PoolAvailable: 1 << 30, FreeMemory: 1 << 30})
	if v.Reason != provider.ReasonReady || calls["NodeGetFreeMemory"] != 1 {
		t.Errorf("met minimums: %s %q, calls %v; want Ready with 1 NodeGetFreeMemory", v.Reason, v.Message, calls)
	}
	if want := (provider.Capacity{Known: true, Proxies: 3, Binding: "memory"}); v.Capacity != want {
		t.Errorf("met minimums: capacity %+v, want %+v: 3 GiB free / 1 GiB, less than 70 GiB / 1 GiB", v.Capacity, want)
	}
	d := v.Facts.Details()
	for k, want := range map[string]string{"freeMemoryBytes": "3221225472", "minFreeMemoryBytes": "1073741824",
		"poolAvailableBytes": "75161927680", "minPoolAvailableBytes": "1073741824"} {
		if d[k] != want {
			t.Errorf("details[%s] = %q, want %q", k, d[k], want)
		}
	}
	want := `
# HELP provider_health_kvm_host_free_memory_bytes Free memory of the host (NodeGetFreeMemory); only for hosts with min_free_memory.
# TYPE provider_health_kvm_host_free_memory_bytes gauge
provider_health_kvm_host_free_memory_bytes{name="lab",target="beelink"} 3.221225472e+09
`
	if err := testutil.CollectAndCompare(factsCollector{v.Facts}, strings.NewReader(want), "provider_health_kvm_host_free_memory_bytes"); err != nil {
		t.Error(err)
	}

	// The capacity of each key alone and of both, at and around the
	// boundary where the verdict changes: 70 GiB available, 3 GiB free.
	for _, tc := range []struct {
		mins Minimums
		want provider.Capacity
	}{
		{Minimums{PoolAvailable: 20 << 30}, provider.Capacity{Known: true, Proxies: 3, Binding: "pool default"}},
		{Minimums{PoolAvailable: 70 << 30}, provider.Capacity{Known: true, Proxies: 1, Binding: "pool default"}},
		{Minimums{PoolAvailable: 70<<30 + 1}, provider.Capacity{Known: true, Binding: "pool default"}},
		{Minimums{PoolAvailable: 7 << 30, FreeMemory: 256 << 20}, provider.Capacity{Known: true, Proxies: 10, Binding: "pool default"}},
		{Minimums{PoolAvailable: 7 << 30, FreeMemory: 310 << 20}, provider.Capacity{Known: true, Proxies: 9, Binding: "memory"}},
		{Minimums{FreeMemory: 3 << 30}, provider.Capacity{Known: true, Proxies: 1, Binding: "memory"}},
		{Minimums{FreeMemory: 3<<30 + 1}, provider.Capacity{Known: true, Binding: "memory"}},
	} {
		if v, _ = run(tc.mins); v.Capacity != tc.want {
			t.Errorf("%+v: capacity %+v (%s), want %+v", tc.mins, v.Capacity, v.Reason, tc.want)
		}
	}

	if v, _ = run(Minimums{FreeMemory: 4 << 30}); v.Reason != ReasonHostMemoryLow || v.Message != "host free memory: 3 GiB, 4 GiB required" {
		t.Errorf("min_free_memory 4GiB: %s %q, want HostMemoryLow", v.Reason, v.Message)
	}
	if v, _ = run(Minimums{PoolAvailable: 80 << 30, FreeMemory: 4 << 30}); v.Reason != ReasonPoolFull ||
		v.Message != "pool default: 70 GiB available, 80 GiB required" {
		t.Errorf("both short: %s %q, want PoolFull", v.Reason, v.Message)
	}
	e.fake.set(func(f *fakeLibvirt) { f.state = 0 })
	if v, calls = run(Minimums{PoolAvailable: 80 << 30, FreeMemory: 4 << 30}); v.Reason != ReasonPoolInactive || calls["NodeGetFreeMemory"] != 0 {
		t.Errorf("inactive pool: %s, calls %v; want PoolInactive without NodeGetFreeMemory", v.Reason, calls)
	}
	if want := (provider.Capacity{Known: true, Binding: "PoolInactive"}); v.Capacity != want {
		t.Errorf("inactive pool: capacity %+v, want %+v", v.Capacity, want)
	}
}
