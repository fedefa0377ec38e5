package kvm

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// TestHostsWithoutSettingsTakeTheEntrys: a host that sets none of its own
// keys is checked with the entry's (user, pool, key, minimums, ratios),
// even after a host that overrides them; the hosts that set none share one
// resolved copy, and a host that sets some keeps its own.
func TestHostsWithoutSettingsTakeTheEntrys(t *testing.T) {
	dir := t.TempDir()
	key, own := filepath.Join(dir, "entry_ed25519"), filepath.Join(dir, "own_ed25519")
	writeKey(t, key)
	writeKey(t, own)
	ratio := 2.0
	v := Section().New().(*Entry)
	v.Name, v.User, v.PrivateKeyFile, v.InsecureIgnoreHostKey = "lab", "proxyops", key, true
	v.MinPoolAvailable, v.MinFreeVCPUs, v.Volume = "20GiB", 2, "base.qcow2"
	v.Hosts = []*Host{
		{Address: "192.0.2.10", HostSettings: &HostSettings{User: "other", Pool: "fast", PrivateKeyFile: own,
			MinPoolAvailable: "40GiB", MinFreeVCPUs: 4, CPUAllocationRatio: &ratio, DiskAllocationRatio: &ratio, Volume: "other.qcow2"}},
		{Address: "192.0.2.11"},
		{Address: "192.0.2.12"},
	}
	if err := v.Validate("kvm[0]"); err != nil {
		t.Fatal(err)
	}
	entrys := HostSettings{User: "proxyops", Pool: DefaultPool, PrivateKeyFile: key, MinPoolAvailable: "20GiB", MinPoolAvailableBytes: 20 << 30,
		MinFreeVCPUs: 2, Volume: "base.qcow2"}
	for i, h := range v.Hosts[1:] {
		got := *h.HostSettings
		if got.Promised == nil || *got.Promised != (Promised{VCPUs: 2, CPURatio: DefaultCPUAllocationRatio}) {
			t.Errorf("hosts[%d]: promised %+v, want the entry's 2 vCPUs at ratio 4", i+1, got.Promised)
		}
		if got.CPUAllocationRatio != nil || got.DiskAllocationRatio != nil {
			t.Errorf("hosts[%d]: ratios %v, %v: want the entry's, none", i+1, got.CPUAllocationRatio, got.DiskAllocationRatio)
		}
		got.Promised = nil
		if got != entrys {
			t.Errorf("hosts[%d]: %+v, want the entry's %+v", i+1, got, entrys)
		}
	}
	if v.Hosts[1].HostSettings != v.Hosts[2].HostSettings || v.Hosts[0].HostSettings == v.Hosts[1].HostSettings {
		t.Error("the hosts without settings do not share one copy, or share the overriding host's")
	}
	if h := v.Hosts[0]; h.User != "other" || h.Pool != "fast" || h.PrivateKeyFile != own || h.MinPoolAvailableBytes != 40<<30 ||
		h.Promised == nil || *h.Promised != (Promised{VCPUs: 4, CPURatio: 2, DiskRatio: 2}) || h.Volume != "other.qcow2" {
		t.Errorf("hosts[0]: %+v (promised %+v), want its own settings", *h.HostSettings, h.Promised)
	}
}

// TestFailureDomainKeys: a host's domain is its own, never inherited;
// proxy_vm_name is the entry's unless a host sets its own, as volume is;
// a bad glob, a control character or an overlong value is a load error
// naming the key.
func TestFailureDomainKeys(t *testing.T) {
	const head = "kvm:\n  - name: lab\n    user: u\n    private_key_file: ../../testdata/files/placeholder\n    insecure_ignore_host_key: true\n"
	cfg, err := config.Parse([]byte(head+`    proxy_vm_name: egress-*
    hosts:
      - address: a.lab
        domain: rack-a
      - address: b.lab
      - address: c.lab
        domain: rack-b
        proxy_vm_name: proxy-[0-9]*
`), []config.Section{Section()})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ domain, glob string }{{"rack-a", "egress-*"}, {"", "egress-*"}, {"rack-b", "proxy-[0-9]*"}} {
		h := config.EntriesOf[*Entry](cfg, "kvm")[0].Hosts[i]
		if h.Domain != want.domain || h.ProxyVMName != want.glob {
			t.Errorf("hosts[%d]: domain %q, proxy_vm_name %q; want %q, %q", i, h.Domain, h.ProxyVMName, want.domain, want.glob)
		}
	}
	for _, tt := range []struct{ yaml, want string }{
		{"    proxy_vm_name: egress-[\n    hosts:\n      - address: h\n", `kvm[0] "lab": proxy_vm_name: "egress-[" is not a glob`},
		{"    hosts:\n      - address: h\n        proxy_vm_name: \"a\\\\\"\n", `kvm[0] "lab": hosts[0]: proxy_vm_name: "a\\" is not a glob`},
		{"    hosts:\n      - address: h\n        proxy_vm_name: \"a\\tb\"\n", `kvm[0] "lab": hosts[0]: proxy_vm_name: "a\tb" contains a control character`},
		{"    proxy_vm_name: " + strings.Repeat("p", 1025) + "\n    hosts:\n      - address: h\n", `kvm[0] "lab": proxy_vm_name: 1025 bytes, at most 1024`},
		{"    hosts:\n      - address: h\n        domain: \"rack\\na\"\n", `kvm[0] "lab": hosts[0]: domain: "rack\na" contains a control character`},
		{"    hosts:\n      - address: h\n        domain: " + strings.Repeat("r", 257) + "\n", `kvm[0] "lab": hosts[0]: domain: 257 bytes, at most 256`},
		{"    domain: rack-a\n    hosts:\n      - address: h\n", `kvm[0] "lab": unknown field "domain"`},
	} {
		_, err := config.Parse([]byte(head+tt.yaml), []config.Section{Section()})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want one containing %q", err, tt.want)
		}
	}
}
