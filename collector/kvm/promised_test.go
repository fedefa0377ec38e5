package kvm

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

const gib = 1 << 30

// domains makes defined domains of the given vCPUs, each of memGiB GiB.
func domains(memGiB uint64, vcpus ...uint64) []domainStat {
	var out []domainStat
	for i, n := range vcpus {
		out = append(out, domainStat{name: string(rune('a' + i)), vcpus: n, memoryKiB: memGiB << 20, hasVCPUs: true, hasMemory: true})
	}
	return out
}

// TestCheckPromised: each promised resource's capacity and reason are the
// arithmetic on what the host says is defined, the least of every
// constraint binds, the reasons come in the documented order, and only
// the keys that are set make calls. The fake host has 8 CPUs and 32 GiB,
// a pool of 100 GiB with 70 GiB available, and 16 GiB free.
func TestCheckPromised(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mins      Minimums
		doms      []domainStat
		vols      map[string]uint64
		want      provider.Reason
		proxies   int64
		binding   string
		message   string // of a reason other than Ready
		calls     map[string]int
		gauges    []string // the promised series the host has
		noGauges  []string // and those it has not
		firstCall map[string]int
	}{
		{
			name: "no keys: the steady check is the pool's info alone",
			want: provider.ReasonReady, calls: map[string]int{"StoragePoolGetInfo": 1},
			noGauges: []string{"host_cpus", "host_memory_bytes", "domains_vcpus", "domains_memory_bytes", "pool_volumes_capacity_bytes"},
		},
		{
			// 8 CPUs × 4 = 32; 10 promised; (32 − 10) / 2 = 11.
			name: "vCPUs", mins: Minimums{Promised: &Promised{VCPUs: 2, CPURatio: 4}}, doms: domains(4, 4, 4, 2),
			want: provider.ReasonReady, proxies: 11, binding: "vCPUs: 10 of 32 at ratio 4",
			calls:     map[string]int{"StoragePoolGetInfo": 1, "ConnectGetAllDomainStats": 1},
			firstCall: map[string]int{"NodeGetInfo": 1, "ConnectGetAllDomainStats": 1},
			gauges:    []string{"host_cpus 8", "host_memory_bytes 3.4359738368e+10", "domains_vcpus 10"},
			noGauges:  []string{"domains_memory_bytes", "pool_volumes_capacity_bytes"},
		},
		{
			// 32 − 31 = 1 vCPU left, 2 needed.
			name: "vCPUs short", mins: Minimums{Promised: &Promised{VCPUs: 2, CPURatio: 4}}, doms: domains(1, 16, 15),
			want: ReasonHostCPULow, binding: "vCPUs: 31 of 32 at ratio 4",
			message: "vCPUs: 31 of 32 at ratio 4; one proxy needs 2 vCPUs",
		},
		{
			// (32 GiB − 512 MiB) × 1 = 31.5 GiB; 28 promised; 3.5 < 4.
			// The free memory (16 GiB) alone would take 4.
			name: "memory promised short, free memory plenty",
			mins: Minimums{FreeMemory: 4 * gib, Promised: &Promised{MemoryRatio: 1, ReservedMemory: 512 << 20}},
			doms: domains(7, 2, 2, 2, 2),
			want: ReasonHostMemoryLow, binding: "memory promised: 28 of 31.5 GiB",
			message: "memory promised: 28 of 31.5 GiB; one proxy needs 4 GiB",
			calls:   map[string]int{"StoragePoolGetInfo": 1, "NodeGetFreeMemory": 1, "ConnectGetAllDomainStats": 1},
			gauges:  []string{"domains_memory_bytes 3.0064771072e+10", "host_memory_bytes"},
		},
		{
			// 32 GiB × 1.5 = 48; (48 − 28) / 4 = 5; free 16 / 4 = 4: the
			// used-now memory binds.
			name: "least of: free memory binds over memory promised",
			mins: Minimums{FreeMemory: 4 * gib, Promised: &Promised{MemoryRatio: 1.5}},
			doms: domains(7, 2, 2, 2, 2),
			want: provider.ReasonReady, proxies: 4, binding: "memory",
		},
		{
			// 100 GiB × 1 − 90 GiB of virtual sizes = 10 < 20; 70 GiB
			// available alone would take 3.
			name: "pool promised short, available plenty",
			mins: Minimums{PoolAvailable: 20 * gib, Promised: &Promised{DiskRatio: 1}},
			vols: map[string]uint64{"a.qcow2": 30 * gib, "b.qcow2": 30 * gib, "c.qcow2": 30 * gib},
			want: ReasonPoolFull, binding: "pool default promised: 90 of 100 GiB",
			message: "pool default promised: 90 of 100 GiB; one proxy needs 20 GiB",
			// The volumes' sizes are kept: a steady check refreshes one.
			calls:     map[string]int{"StoragePoolGetInfo": 1, "StoragePoolListAllVolumes": 1, "StorageVolGetInfo": 1},
			firstCall: map[string]int{"StoragePoolListAllVolumes": 1, "StorageVolGetInfo": 3},
			gauges:    []string{"pool_volumes_capacity_bytes 9.663676416e+10"},
		},
		{
			// 200 − 90 = 110 / 20 = 5; 70 / 20 = 3: available binds.
			name: "least of: pool available binds over pool promised at ratio 2",
			mins: Minimums{PoolAvailable: 20 * gib, Promised: &Promised{DiskRatio: 2}},
			vols: map[string]uint64{"a.qcow2": 30 * gib, "b.qcow2": 30 * gib, "c.qcow2": 30 * gib},
			want: provider.ReasonReady, proxies: 3, binding: "pool default",
		},
		{
			// vCPUs (32 − 26) / 2 = 3; memory (48 − 8) / 4 = 10, free
			// 16 / 4 = 4; pool (200 − 90) / 10 = 11, available 7.
			name: "least of everything: vCPUs bind",
			mins: Minimums{PoolAvailable: 10 * gib, FreeMemory: 4 * gib,
				Promised: &Promised{VCPUs: 2, CPURatio: 4, MemoryRatio: 1.5, DiskRatio: 2}},
			doms: domains(2, 8, 8, 8, 2),
			vols: map[string]uint64{"a.qcow2": 30 * gib, "b.qcow2": 30 * gib, "c.qcow2": 30 * gib},
			want: provider.ReasonReady, proxies: 3, binding: "vCPUs: 26 of 32 at ratio 4",
			calls: map[string]int{"StoragePoolGetInfo": 1, "NodeGetFreeMemory": 1, "ConnectGetAllDomainStats": 1,
				"StoragePoolListAllVolumes": 1, "StorageVolGetInfo": 1},
			firstCall: map[string]int{"NodeGetInfo": 1, "StorageVolGetInfo": 3},
		},
		{
			// Every resource short: PoolFull first, as the order says.
			name: "pool promised before memory and vCPUs",
			mins: Minimums{PoolAvailable: 20 * gib, FreeMemory: 4 * gib,
				Promised: &Promised{VCPUs: 2, CPURatio: 1, MemoryRatio: 1, DiskRatio: 1}},
			doms: domains(8, 4, 4),
			vols: map[string]uint64{"a.qcow2": 100 * gib},
			want: ReasonPoolFull, binding: "pool default promised: 100 of 100 GiB",
		},
		// Room for exactly one proxy is Ready with capacity 1, and one
		// byte or vCPU less is the reason: ready ⇔ capacity ≥ 1.
		{
			// 8 × 1 − 6 = 2 vCPUs left, 2 needed.
			name: "vCPUs: room for exactly one", mins: Minimums{Promised: &Promised{VCPUs: 2, CPURatio: 1}}, doms: domains(1, 4, 2),
			want: provider.ReasonReady, proxies: 1, binding: "vCPUs: 6 of 8 at ratio 1",
		},
		{
			name: "vCPUs: one short of one", mins: Minimums{Promised: &Promised{VCPUs: 2, CPURatio: 1}}, doms: domains(1, 4, 3),
			want: ReasonHostCPULow, binding: "vCPUs: 7 of 8 at ratio 1",
		},
		{
			// 32 GiB × 1 − 28 GiB = 4 GiB left, 4 GiB needed; free 16 / 4 = 4.
			name: "memory promised: room for exactly one", mins: Minimums{FreeMemory: 4 * gib, Promised: &Promised{MemoryRatio: 1}},
			doms: domains(7, 1, 1, 1, 1),
			want: provider.ReasonReady, proxies: 1, binding: "memory promised: 28 of 32 GiB",
		},
		{
			name: "memory promised: one byte short of one", mins: Minimums{FreeMemory: 4 * gib, Promised: &Promised{MemoryRatio: 1, ReservedMemory: 1}},
			doms: domains(7, 1, 1, 1, 1),
			want: ReasonHostMemoryLow, binding: "memory promised: 28 of 32 GiB",
		},
		{
			// 100 GiB × 1 − 80 GiB = 20 GiB left, 20 GiB needed; 70 / 20 = 3.
			name: "pool promised: room for exactly one", mins: Minimums{PoolAvailable: 20 * gib, Promised: &Promised{DiskRatio: 1}},
			vols: map[string]uint64{"a.qcow2": 40 * gib, "b.qcow2": 40 * gib},
			want: provider.ReasonReady, proxies: 1, binding: "pool default promised: 80 of 100 GiB",
		},
		{
			name: "pool promised: one byte short of one", mins: Minimums{PoolAvailable: 20 * gib, Promised: &Promised{DiskRatio: 1}},
			vols: map[string]uint64{"a.qcow2": 40 * gib, "b.qcow2": 40*gib + 1},
			want: ReasonPoolFull, binding: "pool default promised: 80 of 100 GiB",
		},
		// What a peer reports cannot wrap a sum into room: each of these
		// wraps to little or nothing without saturation, and would read
		// Ready with the used-now capacity.
		{
			// 2 × (2^63 − 1) + 2 = 2^64: 0 when wrapped, whether the
			// sizes are read (the first check) or kept (the steady
			// check reads a.qcow2 again and keeps the others').
			name: "volumes' sizes past 2^64 saturate", mins: Minimums{PoolAvailable: 20 * gib, Promised: &Promised{DiskRatio: 1}},
			vols: map[string]uint64{"a.qcow2": 10 * gib, "b.qcow2": math.MaxInt64, "c.qcow2": math.MaxInt64, "d.qcow2": 2},
			want: ReasonPoolFull, binding: "pool default promised: 16 EiB of 100 GiB",
			message: "pool default promised: 16 EiB of 100 GiB; one proxy needs 20 GiB",
			gauges:  []string{"pool_volumes_capacity_bytes 1.8446744073709552e+19"},
		},
		{
			// 2 × 2^53 KiB = 2^64 bytes: 0 when wrapped.
			name: "domains' maximum memory past 2^64 saturates",
			mins: Minimums{FreeMemory: 4 * gib, Promised: &Promised{MemoryRatio: 1, ReservedMemory: 512 << 20}},
			doms: domains(1<<33, 1, 1),
			want: ReasonHostMemoryLow, binding: "memory promised: 16 EiB of 31.5 GiB",
			message: "memory promised: 16 EiB of 31.5 GiB; one proxy needs 4 GiB",
		},
		{
			// (2^54 + 1) KiB × 1024 = 2^64 + 1024 bytes: 1 KiB when wrapped.
			name: "a domain's memory in KiB × 1024 saturates",
			mins: Minimums{FreeMemory: 4 * gib, Promised: &Promised{MemoryRatio: 1, ReservedMemory: 512 << 20}},
			doms: []domainStat{{name: "huge", vcpus: 1, memoryKiB: 1<<54 + 1, hasVCPUs: true, hasMemory: true}},
			want: ReasonHostMemoryLow, binding: "memory promised: 16 EiB of 31.5 GiB",
		},
		{
			// 2 × 2^63 vCPUs: 0 when wrapped.
			name: "domains' vCPUs past 2^64 saturate", mins: Minimums{Promised: &Promised{VCPUs: 2, CPURatio: 4}},
			doms: domains(1, 1<<63, 1<<63),
			want: ReasonHostCPULow, binding: "vCPUs: 18446744073709551615 of 32 at ratio 4",
		},
		{
			name: "memory promised before vCPUs",
			mins: Minimums{FreeMemory: 4 * gib, Promised: &Promised{VCPUs: 2, CPURatio: 1, MemoryRatio: 1}},
			doms: domains(16, 4, 4),
			want: ReasonHostMemoryLow, binding: "memory promised: 32 of 32 GiB",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.fake.set(func(f *fakeLibvirt) {
				f.freeMemory = 16 * gib
				f.domains = tt.doms
				for k, v := range tt.vols {
					f.volCaps[k] = v
				}
			})
			h := e.cfg.Hosts[0]
			h.MinPoolAvailableBytes, h.MinFreeMemoryBytes, h.Promised = tt.mins.PoolAvailable, tt.mins.FreeMemory, tt.mins.Promised
			c := e.checker()
			check(t, c, hostName, time.Minute) // dials
			first := e.fake.callCounts()
			v := check(t, c, hostName, time.Minute)
			steady := e.fake.callCounts()
			for k := range steady {
				steady[k] -= first[k]
				if steady[k] == 0 {
					delete(steady, k)
				}
			}
			if v.Reason != tt.want {
				t.Fatalf("reason %s (%s), want %s", v.Reason, v.Message, tt.want)
			}
			if tt.want != provider.ReasonReady && v.Message != tt.message && tt.message != "" {
				t.Errorf("message %q, want %q", v.Message, tt.message)
			}
			if tt.binding != "" {
				if want := (provider.Capacity{Known: true, Proxies: tt.proxies, Binding: tt.binding}); v.Capacity != want {
					t.Errorf("capacity %s, want %s", v.Capacity, want)
				}
			}
			if tt.calls != nil && !equalCalls(steady, tt.calls) {
				t.Errorf("steady check's calls %v, want exactly %v", steady, tt.calls)
			}
			for k, n := range tt.firstCall {
				if first[k] != n {
					t.Errorf("first check: %d %s calls, want %d (all calls %v)", first[k], k, n, first)
				}
			}
			if tt.firstCall["NodeGetInfo"] > 0 && steady["NodeGetInfo"] != 0 {
				t.Errorf("NodeGetInfo asked again on the kept connection: %v", steady)
			}
			text := collectText(t, v.Facts.(*Facts))
			for _, g := range tt.gauges {
				if !hasSeries(text, g) {
					t.Errorf("no %q in\n%s", g, text)
				}
			}
			for _, g := range tt.noGauges {
				if strings.Contains(text, "provider_health_kvm_"+g) {
					t.Errorf("%q exported for a host without its key:\n%s", g, text)
				}
			}
		})
	}
}

func equalCalls(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, n := range want {
		if got[k] != n {
			return false
		}
	}
	return true
}

// TestPromisedMoves: a domain defined or undefined between two checks
// moves the capacity at the next check, on the same connection.
func TestPromisedMoves(t *testing.T) {
	e := newEnv(t)
	e.fake.set(func(f *fakeLibvirt) { f.domains = domains(1, 4, 4) })
	e.cfg.Hosts[0].Promised = &Promised{VCPUs: 2, CPURatio: 2}
	c := e.checker()
	// 8 × 2 = 16; 8 promised; 4.
	if v := check(t, c, hostName, time.Minute); v.Capacity.Proxies != 4 || v.Reason != provider.ReasonReady {
		t.Fatalf("%s %s, want Ready with 4", v.Reason, v.Capacity)
	}
	e.fake.set(func(f *fakeLibvirt) { f.domains = append(f.domains, domains(1, 7)...) })
	if v := check(t, c, hostName, time.Minute); v.Capacity.Proxies != 0 || v.Reason != ReasonHostCPULow {
		t.Fatalf("after defining a domain of 7 vCPUs: %s %s, want HostCPULow with 0", v.Reason, v.Capacity)
	}
	e.fake.set(func(f *fakeLibvirt) { f.domains = f.domains[:1] })
	if v := check(t, c, hostName, time.Minute); v.Capacity.Proxies != 6 || v.Reason != provider.ReasonReady {
		t.Fatalf("after undefining two: %s %s, want Ready with 6", v.Reason, v.Capacity)
	}
	if n := e.fake.callCounts()["NodeGetInfo"]; n != 1 {
		t.Errorf("%d NodeGetInfo calls over three checks on one connection, want 1", n)
	}
}

// TestPromisedDomainWithoutStats: a driver that reports no vcpu.maximum
// is an answer the capacity cannot be made of: Unknown, saying why, and
// the connection is kept.
func TestPromisedDomainWithoutStats(t *testing.T) {
	e := newEnv(t)
	e.fake.set(func(f *fakeLibvirt) { f.domains = []domainStat{{name: "odd", memoryKiB: 1 << 20, hasMemory: true}} })
	e.cfg.Hosts[0].Promised = &Promised{VCPUs: 2, CPURatio: 2}
	c := e.checker()
	v := check(t, c, hostName, time.Minute)
	if v.Reason != provider.ReasonUnknown || !strings.Contains(v.Message, `domain "odd"`) {
		t.Fatalf("%s %q, want Unknown naming the domain", v.Reason, v.Message)
	}
	check(t, c, hostName, time.Minute)
	if n := e.fake.callCounts()["ConnectToURI"]; n != 1 {
		t.Errorf("%d connects, want the connection kept", n)
	}
}

// TestResolvePromised: the keys' defaults, the per-host override and the
// errors of the file.
func TestResolvePromised(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tt := range []struct {
		name  string
		entry Entry
		host  HostSettings
		want  Promised
		err   string
	}{
		{name: "nothing set"},
		{name: "min_free_vcpus alone: ratio 4", entry: Entry{MinFreeVCPUs: 2}, want: Promised{VCPUs: 2, CPURatio: 4}},
		{name: "ratio from the entry, vCPUs from the host", entry: Entry{CPUAllocationRatio: f(8)}, host: HostSettings{MinFreeVCPUs: 1},
			want: Promised{VCPUs: 1, CPURatio: 8}},
		{name: "the host's ratio wins", entry: Entry{MinFreeVCPUs: 2, CPUAllocationRatio: f(8)}, host: HostSettings{CPUAllocationRatio: f(2)},
			want: Promised{VCPUs: 2, CPURatio: 2}},
		{name: "memory ratio: 512 MiB reserved", entry: Entry{MinFreeMemory: "4GiB", MemoryAllocationRatio: f(1)},
			want: Promised{MemoryRatio: 1, ReservedMemory: 512 << 20}},
		{name: "memory ratio, reserved set", entry: Entry{MinFreeMemory: "4GiB", MemoryAllocationRatio: f(1), ReservedMemory: "0"},
			want: Promised{MemoryRatio: 1}},
		{name: "host's reserved", entry: Entry{MinFreeMemory: "4GiB", MemoryAllocationRatio: f(1.5)}, host: HostSettings{ReservedMemory: "2GiB"},
			want: Promised{MemoryRatio: 1.5, ReservedMemory: 2 << 30}},
		{name: "disk ratio", entry: Entry{MinPoolAvailable: "20GiB", DiskAllocationRatio: f(1)}, want: Promised{DiskRatio: 1}},
		{name: "memory ratio without min_free_memory", entry: Entry{MemoryAllocationRatio: f(1)},
			err: "memory_allocation_ratio: set without min_free_memory"},
		{name: "disk ratio without min_pool_available", host: HostSettings{DiskAllocationRatio: f(1)},
			err: "disk_allocation_ratio: set without min_pool_available"},
		{name: "ratio 0", entry: Entry{MinFreeVCPUs: 1, CPUAllocationRatio: f(0)}, err: "cpu_allocation_ratio: must be above 0"},
		{name: "negative ratio", host: HostSettings{DiskAllocationRatio: f(-1)}, err: "disk_allocation_ratio: must be above 0"},
		{name: "huge ratio", entry: Entry{MemoryAllocationRatio: f(1e9)}, err: "memory_allocation_ratio: must be above 0 and at most 1000"},
		{name: "negative vCPUs", host: HostSettings{MinFreeVCPUs: -1}, err: "min_free_vcpus: must not be negative"},
		{name: "bad reserved", entry: Entry{ReservedMemory: "lots"}, err: "reserved_memory:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.host
			err := h.resolveMinimums(&tt.entry, "kvm[0]: hosts[0]")
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			case (Minimums{Promised: h.Promised}).promised() != tt.want:
				t.Errorf("%+v, want %+v", h.Promised, tt.want)
			case h.Promised != nil && tt.want == Promised{}:
				// Nothing counted: no policy held per host (a large
				// file's hosts are held twice during a reload).
				t.Errorf("a policy held that counts nothing: %+v", *h.Promised)
			}
		})
	}
}

// collectText is the text exposition of one host's facts.
func collectText(t *testing.T, f *Facts) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(factsCollector{f})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// hasSeries tells whether text has a series of the kvm family and value
// ("host_cpus 8"), or of the family alone ("host_cpus").
func hasSeries(text, spec string) bool {
	family, value, _ := strings.Cut(spec, " ")
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != "provider_health_kvm_"+family {
			continue
		}
		if value == "" || strings.HasSuffix(rest, "} "+value) {
			return true
		}
	}
	return false
}

// TestPromisedReplies: the client decodes the promised-resource replies of
// a wire-level libvirtd, every typed parameter type among them, into the
// numbers the capacity reads.
func TestPromisedReplies(t *testing.T) {
	fake := NewFakeLibvirtd(t)
	conn, err := net.Dial("unix", fake.Path())
	if err != nil {
		t.Fatal(err)
	}
	lv := newLibvirtClient(conn)
	defer lv.ConnectClose()
	if err := lv.ConnectToURI(libvirt.QEMUSystem); err != nil {
		t.Fatal(err)
	}
	n, err := lv.NodeGetInfo()
	if err != nil || n != (nodeInfo{cpus: FakeHostCPUs, memoryKiB: FakeHostMemoryKiB}) {
		t.Errorf("NodeGetInfo: %+v, %v", n, err)
	}
	doms, err := lv.ConnectGetAllDomainStats()
	if err != nil || len(doms) != FakeDomains {
		t.Fatalf("ConnectGetAllDomainStats: %d domains, %v; want %d", len(doms), err, FakeDomains)
	}
	for i, d := range doms {
		if want := (domainStat{fmt.Sprintf("proxy-%d", i), FakeDomainVCPUs, FakeDomainMemoryKiB, true, true}); d != want {
			t.Errorf("domain %d: %+v, want %+v", i, d, want)
		}
	}
	p, err := lv.StoragePoolLookupByName("default")
	if err != nil {
		t.Fatal(err)
	}
	vols, err := lv.StoragePoolListAllVolumes(p)
	if err != nil || len(vols) != FakeVolumes || vols[2].Name != "proxy-2.qcow2" || vols[2].Key != "/var/lib/libvirt/images/proxy-2.qcow2" {
		t.Fatalf("StoragePoolListAllVolumes: %+v, %v", vols, err)
	}
	if c, err := lv.StorageVolGetInfo(vols[0]); err != nil || c != FakeVolumeCapacity {
		t.Errorf("StorageVolGetInfo: %d, %v; want %d", c, err, uint64(FakeVolumeCapacity))
	}
}

// TestDecodePromisedBounds: lists longer than libvirt sends, and a typed
// parameter of a type libvirt does not have, are broken frames.
func TestDecodePromisedBounds(t *testing.T) {
	for _, tt := range []struct {
		name string
		proc uint32
		body func(w *xdrWriter)
		want string
	}{
		{"volumes", procStoragePoolListAllVolumes, func(w *xdrWriter) { w.u32(storageVolListMax + 1) }, "16385 volumes"},
		{"domains", procConnectGetAllDomainStats, func(w *xdrWriter) { w.u32(domainListMax + 1) }, "16385 domains"},
		{"parameters", procConnectGetAllDomainStats, func(w *xdrWriter) {
			w.u32(1)
			w.str("d")
			w.b = append(w.b, make([]byte, 16)...)
			w.u32(1, domainStatsParamsMax+1)
		}, "4097 parameters"},
		{"parameter type", procConnectGetAllDomainStats, func(w *xdrWriter) {
			w.u32(1)
			w.str("d")
			w.b = append(w.b, make([]byte, 16)...)
			w.u32(1, 1)
			w.str("vcpu.maximum")
			w.u32(8, 2)
		}, "type 8"},
		{"domain names", procConnectListAllDomains, func(w *xdrWriter) { w.u32(domainListMax + 1) }, "16385 domains"},
		{"domain name cut off", procConnectListAllDomains, func(w *xdrWriter) { w.u32(1); w.str("egress-a") }, "reply to ConnectListAllDomains"},
		{"model cut off", procNodeGetInfo, func(w *xdrWriter) { w.u32(1, 2, 3) }, "reply to NodeGetInfo"},
		{"trailing bytes", procStorageVolGetInfo, func(w *xdrWriter) { w.u32(0); w.u64(1, 2); w.u32(0) }, "4 bytes after its value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := xdrWriter{}
			tt.body(&w)
			_, err := decodeReply(tt.proc, w.b)
			var fe *frameError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want a frame error with %q", err, tt.want)
			}
		})
	}
}

// FormatBytesForTest is formatBytes, for the integration tests' checks of
// the status's words.
func FormatBytesForTest(n uint64) string { return formatBytes(n) }
