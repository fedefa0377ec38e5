package kvm

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

func factsOf(t *testing.T, v provider.Verdict) *Facts {
	t.Helper()
	f, ok := v.Facts.(*Facts)
	if !ok {
		t.Fatalf("verdict %s has facts %T, want *kvm.Facts", v.Reason, v.Facts)
	}
	return f
}

// factsCollector emits one host's facts, as the framework does.
type factsCollector struct{ f provider.Facts }

func (c factsCollector) Describe(chan<- *prometheus.Desc) {}
func (c factsCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.Collect(ch, "lab", "beelink")
}

var kvmFamilies = []string{"provider_health_kvm_host_info", "provider_health_kvm_pool_available_bytes",
	"provider_health_kvm_pool_capacity_bytes", "provider_health_kvm_pool_allocation_bytes",
	"provider_health_kvm_pool_state", "provider_health_kvm_connects_total"}

func TestFactsMetrics(t *testing.T) {
	t.Parallel()
	f := &Facts{User: "proxyops", LibvirtVersion: "9.0.0", Pool: "default", PoolState: "running",
		CapacityBytes: 100, AllocationBytes: 40, AvailableBytes: 60, Connects: 1}
	want := `
# HELP provider_health_kvm_host_info The SSH user and, once known, the libvirt version of a KVM host.
# TYPE provider_health_kvm_host_info gauge
provider_health_kvm_host_info{libvirt_version="9.0.0",name="lab",target="beelink",user="proxyops"} 1
# HELP provider_health_kvm_pool_allocation_bytes Storage pool allocation.
# TYPE provider_health_kvm_pool_allocation_bytes gauge
provider_health_kvm_pool_allocation_bytes{name="lab",pool="default",target="beelink"} 40
# HELP provider_health_kvm_pool_available_bytes Storage pool available space.
# TYPE provider_health_kvm_pool_available_bytes gauge
provider_health_kvm_pool_available_bytes{name="lab",pool="default",target="beelink"} 60
# HELP provider_health_kvm_pool_capacity_bytes Storage pool capacity.
# TYPE provider_health_kvm_pool_capacity_bytes gauge
provider_health_kvm_pool_capacity_bytes{name="lab",pool="default",target="beelink"} 100
# HELP provider_health_kvm_pool_state The storage pool's current state in virsh's words, always 1; absent when the pool is unknown.
# TYPE provider_health_kvm_pool_state gauge
provider_health_kvm_pool_state{name="lab",pool="default",state="running",target="beelink"} 1
# HELP provider_health_kvm_connects_total SSH+libvirt sessions established to the host; flat in steady state.
# TYPE provider_health_kvm_connects_total counter
provider_health_kvm_connects_total{name="lab",target="beelink"} 1
`
	if err := testutil.CollectAndCompare(factsCollector{f}, strings.NewReader(want), kvmFamilies...); err != nil {
		t.Error(err)
	}
	wantDetails := map[string]string{"user": "proxyops", "pool": "default", "poolState": "running", "libvirtVersion": "9.0.0"}
	if got := f.Details(); len(got) != len(wantDetails) {
		t.Errorf("details %v, want %v", got, wantDetails)
	} else {
		for k, w := range wantDetails {
			if got[k] != w {
				t.Errorf("details[%s] = %q, want %q", k, got[k], w)
			}
		}
	}
}

// A host that was never checked, or whose check never answered, still has
// its SSH user in host_info and keeps its version and counter; it has no
// pool series, since nothing is known of the pool.
func TestKeptFactsWithoutAVerdict(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	f := c.Facts(hostName)
	want := `
# HELP provider_health_kvm_host_info The SSH user and, once known, the libvirt version of a KVM host.
# TYPE provider_health_kvm_host_info gauge
provider_health_kvm_host_info{libvirt_version="",name="lab",target="beelink",user="proxyops"} 1
# HELP provider_health_kvm_connects_total SSH+libvirt sessions established to the host; flat in steady state.
# TYPE provider_health_kvm_connects_total counter
provider_health_kvm_connects_total{name="lab",target="beelink"} 0
`
	if err := testutil.CollectAndCompare(factsCollector{f}, strings.NewReader(want), kvmFamilies...); err != nil {
		t.Error(err)
	}
	if d := f.Details(); d["pool"] != "default" || d["user"] != "proxyops" || d["poolState"] != "" {
		t.Errorf("details of an unchecked host = %v, want the configured user and pool", d)
	}
	if v := check(t, c, hostName, 5*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	want = strings.ReplaceAll(want, `libvirt_version=""`, `libvirt_version="9.0.0"`)
	want = strings.ReplaceAll(want, `target="beelink"} 0`, `target="beelink"} 1`)
	if err := testutil.CollectAndCompare(factsCollector{c.Facts(hostName)}, strings.NewReader(want), kvmFamilies...); err != nil {
		t.Error(err)
	}
	if c.Facts("nope") != nil {
		t.Error("facts of an unknown host are not nil")
	}
}
