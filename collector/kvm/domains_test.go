package kvm

import (
	"slices"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestHostDomain: a host with a domain, or whose entry names its proxies
// with proxy_vm_name, carries one failure domain: named by its domain, else
// by itself; its capacity the host's; its proxies the defined domains
// (running or not) the glob matches, counted from the domain stats when
// the promised-resource keys read them and else with one
// ConnectListAllDomains; no after-loss, which the mixin computes across
// hosts. The fake host has 8 CPUs, a pool of 100 GiB with 70 GiB
// available, and four defined domains of 2 vCPUs: egress-a, egress-b,
// egress-c-old and monitoring; "egress-?" matches the first two.
func TestHostDomain(t *testing.T) {
	doms := []domainStat{
		{name: "egress-a", vcpus: 2, memoryKiB: 1 << 20, hasVCPUs: true, hasMemory: true},
		{name: "egress-b", vcpus: 2, memoryKiB: 1 << 20, hasVCPUs: true, hasMemory: true},
		{name: "egress-c-old", vcpus: 2, memoryKiB: 1 << 20, hasVCPUs: true, hasMemory: true},
		{name: "monitoring", vcpus: 2, memoryKiB: 1 << 20, hasVCPUs: true, hasMemory: true},
	}
	pool20 := Minimums{PoolAvailable: 20 * gib}
	for _, tt := range []struct {
		name         string
		domain, glob string
		mins         Minimums
		listErr      error
		want         provider.Reason
		domains      []provider.Domain
		calls        map[string]int // of the steady check
	}{
		{
			// 70 / 20 = 3; no glob: no proxies counted, no call.
			name: "a domain without proxy_vm_name", domain: "rack-a", mins: pool20, want: provider.ReasonReady,
			domains: []provider.Domain{{Name: "rack-a", Capacity: 3}},
			calls:   map[string]int{"StoragePoolGetInfo": 1},
		},
		{
			// 70 / 20 = 3; egress-a and egress-b by one ConnectListAllDomains.
			name: "proxy_vm_name without a domain: the host is its own", glob: "egress-?", mins: pool20, want: provider.ReasonReady,
			domains: []provider.Domain{{Name: hostName, Capacity: 3, Proxies: 2}},
			calls:   map[string]int{"StoragePoolGetInfo": 1, "ConnectListAllDomains": 1},
		},
		{
			// 8 × 4 − 8 = 24 vCPUs left / 2 = 12; "egress-*" matches three,
			// counted from the stats the vCPUs are read from: no call more.
			name: "counted from the domain stats", domain: "room-1", glob: "egress-*",
			mins: Minimums{Promised: &Promised{VCPUs: 2, CPURatio: 4}}, want: provider.ReasonReady,
			domains: []provider.Domain{{Name: "room-1", Capacity: 12, Proxies: 3}},
			calls:   map[string]int{"StoragePoolGetInfo": 1, "ConnectGetAllDomainStats": 1},
		},
		{
			// 70 GiB < 80 GiB: PoolFull, capacity 0, the proxies still counted.
			name: "a full host is a domain of capacity 0", domain: "rack-a", glob: "egress-?",
			mins: Minimums{PoolAvailable: 80 * gib}, want: ReasonPoolFull,
			domains: []provider.Domain{{Name: "rack-a", Capacity: 0, Proxies: 2}},
			calls:   map[string]int{"StoragePoolGetInfo": 1, "ConnectListAllDomains": 1},
		},
		{
			name: "neither domain nor proxy_vm_name: none", mins: pool20, want: provider.ReasonReady,
			calls: map[string]int{"StoragePoolGetInfo": 1},
		},
		{
			// No minimum: no capacity, and 0 would read as a full host.
			name: "no capacity: none, and no count", domain: "rack-a", glob: "egress-?", want: provider.ReasonReady,
			calls: map[string]int{"StoragePoolGetInfo": 1},
		},
		{
			name: "a domain without capacity: none", domain: "rack-a", want: provider.ReasonReady,
			calls: map[string]int{"StoragePoolGetInfo": 1},
		},
		{
			name: "a count libvirtd refuses: the verdict's, no domain", domain: "rack-a", glob: "egress-?", mins: pool20,
			listErr: libvirt.Error{Code: 1, Message: "internal error"}, want: provider.ReasonUnknown,
			calls: map[string]int{"StoragePoolGetInfo": 1, "ConnectListAllDomains": 1},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.fake.set(func(f *fakeLibvirt) { f.domains, f.listErr = doms, tt.listErr })
			h := e.cfg.Hosts[0]
			h.Domain, h.ProxyVMName = tt.domain, tt.glob
			h.MinPoolAvailableBytes, h.MinFreeMemoryBytes, h.Promised = tt.mins.PoolAvailable, tt.mins.FreeMemory, tt.mins.Promised
			c := e.checker()
			check(t, c, hostName, time.Minute) // dials
			first := e.fake.callCounts()
			v := check(t, c, hostName, time.Minute)
			steady := e.fake.callCounts()
			for k := range steady {
				if steady[k] -= first[k]; steady[k] == 0 {
					delete(steady, k)
				}
			}
			if v.Reason != tt.want || !slices.Equal(v.Domains, tt.domains) {
				t.Errorf("got %s (%s), domains %+v; want %s, domains %+v", v.Reason, v.Message, v.Domains, tt.want, tt.domains)
			}
			if !equalCalls(steady, tt.calls) {
				t.Errorf("steady check's calls %v, want exactly %v", steady, tt.calls)
			}
		})
	}
}

// TestProxyCountOverTheWire counts the proxies with the exporter's own
// libvirt client, through the frame checker, from a peer that speaks the
// wire protocol and defines FakeDomains domains proxy-0 … proxy-3.
func TestProxyCountOverTheWire(t *testing.T) {
	e := newEnv(t)
	fake := NewFakeLibvirtd(t)
	srv := newSSHServer(t, e.key.PublicKey(), fake.Path())
	e.writeKnownHosts(knownHostsLine(srv.addr, srv.hostKey.PublicKey()))
	for glob, want := range map[string]int64{"proxy-*": FakeDomains, "proxy-[02]": 2, "egress-*": 0} {
		t.Run(glob, func(t *testing.T) {
			cfg := *e.cfg
			cfg.LibvirtSocket = fake.Path()
			cfg.Hosts = []*Host{{Address: srv.addr, Name: hostName, Domain: "rack-a", HostSettings: &HostSettings{
				User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile, ProxyVMName: glob, MinPoolAvailableBytes: 10 * gib}}}
			c, err := New(&cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := fake.Calls(procConnectListAllDomains)
			// The fake's pool has 70 GiB available: 7 of 10 GiB.
			v := check(t, c, hostName, time.Minute)
			if wantD := []provider.Domain{{Name: "rack-a", Capacity: 7, Proxies: want}}; v.Reason != provider.ReasonReady || !slices.Equal(v.Domains, wantD) {
				t.Errorf("got %s (%s), domains %+v; want Ready, %+v", v.Reason, v.Message, v.Domains, wantD)
			}
			if got := fake.Calls(procConnectListAllDomains) - before; got != 1 {
				t.Errorf("ConnectListAllDomains called %d times, want 1", got)
			}
		})
	}
}
