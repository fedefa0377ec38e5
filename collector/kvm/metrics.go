package kvm

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The kvm families of the metrics table of docs/metrics.md: "Metrics". Only this package knows
// them: the framework hands each verdict's Facts the channel and the labels.
var (
	hostInfoDesc = prometheus.NewDesc("provider_health_kvm_host_info",
		"The SSH user and, once known, the libvirt version of a KVM host.",
		[]string{"name", "target", "user", "libvirt_version"}, nil)
	poolStateDesc = prometheus.NewDesc("provider_health_kvm_pool_state",
		"The storage pool's current state in virsh's words, always 1; absent when the pool is unknown.",
		[]string{"name", "target", "pool", "state"}, nil)
	poolLabels         = []string{"name", "target", "pool"}
	poolCapacityDesc   = prometheus.NewDesc("provider_health_kvm_pool_capacity_bytes", "Storage pool capacity.", poolLabels, nil)
	poolAllocationDesc = prometheus.NewDesc("provider_health_kvm_pool_allocation_bytes", "Storage pool allocation.", poolLabels, nil)
	poolAvailableDesc  = prometheus.NewDesc("provider_health_kvm_pool_available_bytes", "Storage pool available space.", poolLabels, nil)
	freeMemoryDesc     = prometheus.NewDesc("provider_health_kvm_host_free_memory_bytes",
		"Free memory of the host (NodeGetFreeMemory); only for hosts with min_free_memory.", []string{"name", "target"}, nil)
	hostCPUsDesc = prometheus.NewDesc("provider_health_kvm_host_cpus",
		"Active CPUs of the host (NodeGetInfo), against which vCPUs are promised; only for hosts with a promised-resource key.", []string{"name", "target"}, nil)
	hostMemoryDesc = prometheus.NewDesc("provider_health_kvm_host_memory_bytes",
		"Total memory of the host (NodeGetInfo), against which domains' memory is promised; only for hosts with a promised-resource key.", []string{"name", "target"}, nil)
	domainsVCPUsDesc = prometheus.NewDesc("provider_health_kvm_domains_vcpus",
		"vCPUs promised to the host's defined domains, running or not (their vcpu.maximum, summed); only for hosts with min_free_vcpus.", []string{"name", "target"}, nil)
	domainsMemoryDesc = prometheus.NewDesc("provider_health_kvm_domains_memory_bytes",
		"Memory promised to the host's defined domains, running or not (their maximum memory, summed); only for hosts with memory_allocation_ratio.", []string{"name", "target"}, nil)
	volumesCapacityDesc = prometheus.NewDesc("provider_health_kvm_pool_volumes_capacity_bytes",
		"Virtual sizes of the storage pool's volumes, summed: what they may grow to, not what they hold; only for hosts with disk_allocation_ratio.", poolLabels, nil)
	connectsDesc = prometheus.NewDesc("provider_health_kvm_connects_total",
		"SSH+libvirt sessions established to the host; flat in steady state.", []string{"name", "target"}, nil)
)

// PoolStates are the pool states in virsh's words, in libvirt's numbering
// (VIR_STORAGE_POOL_INACTIVE = 0 ...): the values kvm_pool_state's state
// label can take.
var PoolStates = []string{"inactive", "building", "running", "degraded", "inaccessible"}

// Facts are what a check knows of a KVM host beyond its reason: the kvm
// metrics and the status page's details are made of them.
type Facts struct {
	User           string
	LibvirtVersion string // "9.0.0" once known, else empty
	Pool           string
	// PoolState is virsh's word for the pool state; empty when the pool is
	// unknown, and then no pool metrics are exported.
	PoolState       string
	CapacityBytes   uint64
	AllocationBytes uint64
	AvailableBytes  uint64
	// Connects counts the SSH+libvirt sessions established to the host
	// since the exporter started.
	Connects uint64
	// Mins are the host's configured headroom minimums (0: not set).
	Mins Minimums
	// FreeMemoryBytes is what NodeGetFreeMemory said, when
	// FreeMemoryKnown: min_free_memory is set and the call answered.
	FreeMemoryBytes uint64
	FreeMemoryKnown bool
	// Volume and Network are the host's placement keys, "" when not set.
	Volume, Network string
	// What the promised-resource keys read, each part when known: the
	// host's CPUs and memory, the vCPUs and memory of its defined
	// domains, the virtual sizes of the pool's volumes.
	HostCPUs, HostMemoryBytes   uint64
	HostKnown                   bool
	DomainsVCPUs, DomainsMemory uint64
	DomainsKnown                bool
	VolumesCapacity             uint64
	VolumesKnown                bool
}

var _ provider.Facts = (*Facts)(nil)

// Collect sends the kvm metrics of one host.
func (f *Facts) Collect(ch chan<- prometheus.Metric, name, target string) {
	ch <- provider.ConstMetric(hostInfoDesc, prometheus.GaugeValue, 1, name, target, f.User, f.LibvirtVersion)
	ch <- provider.ConstMetric(connectsDesc, prometheus.CounterValue, float64(f.Connects), name, target)
	if f.FreeMemoryKnown {
		ch <- provider.ConstMetric(freeMemoryDesc, prometheus.GaugeValue, float64(f.FreeMemoryBytes), name, target)
	}
	if f.HostKnown {
		ch <- provider.ConstMetric(hostCPUsDesc, prometheus.GaugeValue, float64(f.HostCPUs), name, target)
		ch <- provider.ConstMetric(hostMemoryDesc, prometheus.GaugeValue, float64(f.HostMemoryBytes), name, target)
	}
	if f.DomainsKnown && f.Mins.promised().VCPUs > 0 {
		ch <- provider.ConstMetric(domainsVCPUsDesc, prometheus.GaugeValue, float64(f.DomainsVCPUs), name, target)
	}
	if f.DomainsKnown && f.Mins.promised().MemoryRatio > 0 {
		ch <- provider.ConstMetric(domainsMemoryDesc, prometheus.GaugeValue, float64(f.DomainsMemory), name, target)
	}
	if f.PoolState == "" {
		return
	}
	if f.VolumesKnown {
		ch <- provider.ConstMetric(volumesCapacityDesc, prometheus.GaugeValue, float64(f.VolumesCapacity), name, target, f.Pool)
	}
	// The current state only: the other states at 0 would be four series
	// more per host in every Prometheus that scrapes the exporter.
	ch <- provider.ConstMetric(poolStateDesc, prometheus.GaugeValue, 1, name, target, f.Pool, f.PoolState)
	for _, m := range []struct {
		d *prometheus.Desc
		v uint64
	}{
		{poolCapacityDesc, f.CapacityBytes},
		{poolAllocationDesc, f.AllocationBytes},
		{poolAvailableDesc, f.AvailableBytes},
	} {
		ch <- provider.ConstMetric(m.d, prometheus.GaugeValue, float64(m.v), name, target, f.Pool)
	}
}

// Details are the kvm facts of /api/v1/status. The headroom readings and
// minimums, the volume and the network are there only for a host that sets
// them, so that the status of one without is as before.
func (f *Facts) Details() map[string]string {
	d := map[string]string{
		"user":           f.User,
		"pool":           f.Pool,
		"poolState":      f.PoolState,
		"libvirtVersion": f.LibvirtVersion,
	}
	if f.Mins.PoolAvailable > 0 {
		d["minPoolAvailableBytes"] = strconv.FormatUint(f.Mins.PoolAvailable, 10)
		if f.PoolState != "" {
			d["poolAvailableBytes"] = strconv.FormatUint(f.AvailableBytes, 10)
		}
	}
	if f.Mins.FreeMemory > 0 {
		d["minFreeMemoryBytes"] = strconv.FormatUint(f.Mins.FreeMemory, 10)
		if f.FreeMemoryKnown {
			d["freeMemoryBytes"] = strconv.FormatUint(f.FreeMemoryBytes, 10)
		}
	}
	if f.HostKnown {
		d["hostCpus"] = strconv.FormatUint(f.HostCPUs, 10)
		d["hostMemoryBytes"] = strconv.FormatUint(f.HostMemoryBytes, 10)
	}
	if f.DomainsKnown && f.Mins.promised().VCPUs > 0 {
		d["domainsVcpus"] = strconv.FormatUint(f.DomainsVCPUs, 10)
	}
	if f.DomainsKnown && f.Mins.promised().MemoryRatio > 0 {
		d["domainsMemoryBytes"] = strconv.FormatUint(f.DomainsMemory, 10)
	}
	if f.VolumesKnown {
		d["poolVolumesCapacityBytes"] = strconv.FormatUint(f.VolumesCapacity, 10)
	}
	if f.Volume != "" {
		d["volume"] = f.Volume
	}
	if f.Network != "" {
		d["network"] = f.Network
	}
	return d
}

// Facts answers for a host whose verdict the framework had to make up (a
// check that never answered, a panic, a host not checked yet): the user and
// pool from the configuration, the libvirt version and connect counter
// this checker keeps across checks, and nothing of the pool state.
func (c *Checker) Facts(target string) provider.Facts {
	h, sp := c.peek(target)
	if sp == nil {
		return nil
	}
	if h == nil {
		// Not checked yet: its settings, and nothing it learnt.
		return &Facts{User: sp.own.user, Pool: sp.own.pool, Mins: sp.own.mins, Volume: sp.own.volume, Network: sp.own.network}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return &Facts{User: h.set.user, Pool: h.pool, LibvirtVersion: h.version, Connects: h.connects, Mins: h.mins,
		Volume: h.volume, Network: h.network}
}
