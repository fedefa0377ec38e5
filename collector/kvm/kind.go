package kvm

import (
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Kind is the kvm kind (a group of hypervisor hosts) as the exporter's table of kinds lists it.
func Kind() provider.Kind {
	return provider.NewKind(provider.KindOf[*Entry, *Checker]{
		Section:     Section(),
		Doc:         Doc(),
		Reasons:     Reasons(),
		MultiTarget: true, // one target per host
		// PoolFull, HostMemoryLow and HostCPULow only where their minimum
		// is set (min_pool_available, min_free_memory, min_free_vcpus), the
		// placement reasons only where volume or network is, on the entry
		// or one of its hosts (docs/configuration.md).
		EntryReasons: func(k *Entry) provider.ReasonSet {
			pool, memory, cpu := k.MinPoolAvailable != "", k.MinFreeMemory != "", k.MinFreeVCPUs > 0
			volume, network := k.Volume != "", k.Network != ""
			for _, h := range k.Hosts {
				if h == nil || h.HostSettings == nil { // before Load: nothing of its own
					continue
				}
				pool = pool || h.MinPoolAvailable != ""
				memory = memory || h.MinFreeMemory != ""
				cpu = cpu || h.MinFreeVCPUs > 0
				volume, network = volume || h.Volume != "", network || h.Network != ""
			}
			set := Reasons()
			if !pool {
				set = set.Without(ReasonPoolFull)
			}
			if !memory {
				set = set.Without(ReasonHostMemoryLow)
			}
			if !cpu {
				set = set.Without(ReasonHostCPULow)
			}
			if !volume {
				set = set.Without(ReasonVolumeMissing)
			}
			if !network {
				set = set.Without(ReasonNetworkMissing, ReasonNetworkInactive)
			}
			return set
		},
		NewChecker: New,
		FileWarnings: func(v *Entry) []string {
			out := provider.Warnings(CheckFiles(v)...)
			if v.InsecureIgnoreHostKey {
				out = append(out, "insecure_ignore_host_key is true: host keys are not verified")
			}
			return out
		},
	})
}
