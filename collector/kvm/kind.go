package kvm

import (
	"fmt"
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// Kind is the kvm kind (a group of hypervisor hosts) as the exporter's table of kinds lists it.
func Kind() collector.Kind {
	return collector.Kind{
		Section:     config.KVMSection(),
		Reasons:     Reasons(),
		MultiTarget: true, // one target per host
		// PoolFull and HostMemoryLow only where their minimum is set, the
		// placement reasons only where volume or network is, on the entry
		// or one of its hosts (docs/configuration.md).
		EntryReasons: func(e config.Entry) collector.ReasonSet {
			k, ok := e.(*config.KVM)
			if !ok {
				return Reasons()
			}
			pool, memory := k.MinPoolAvailable != "", k.MinFreeMemory != ""
			volume, network := k.Volume != "", k.Network != ""
			for _, h := range k.Hosts {
				pool = pool || h.MinPoolAvailable != ""
				memory = memory || h.MinFreeMemory != ""
				volume, network = volume || h.Volume != "", network || h.Network != ""
			}
			set := Reasons()
			if !pool {
				set = set.Without(ReasonPoolFull)
			}
			if !memory {
				set = set.Without(ReasonHostMemoryLow)
			}
			if !volume {
				set = set.Without(ReasonVolumeMissing)
			}
			if !network {
				set = set.Without(ReasonNetworkMissing, ReasonNetworkInactive)
			}
			return set
		},
		NewChecker: func(e config.Entry, logger *slog.Logger) (collector.Checker, error) {
			c, ok := e.(*config.KVM)
			if !ok {
				return nil, fmt.Errorf("kvm entry of type %T", e)
			}
			return New(c, logger)
		},
		FileWarnings: func(e config.Entry) []string {
			var out []string
			v, ok := e.(*config.KVM)
			if !ok {
				return nil
			}
			for _, err := range CheckFiles(v) {
				out = append(out, err.Error())
			}
			if v.InsecureIgnoreHostKey {
				out = append(out, "insecure_ignore_host_key is true: host keys are not verified")
			}
			return out
		},
	}
}
