package kvm

import (
	"path/filepath"
	"testing"
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
