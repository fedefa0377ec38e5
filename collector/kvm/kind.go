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
		Section: config.KVMSection(),
		Reasons: Reasons(),
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
