package kubernetes

import (
	"fmt"
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// Kind is the kubernetes kind (a cluster's API server) as the exporter's table of kinds lists it.
func Kind() collector.Kind {
	return collector.Kind{
		Section: config.KubernetesSection(),
		Reasons: Reasons(),
		// QuotaExhausted and AdmissionDenied only where their keys are set (docs/configuration.md).
		EntryReasons: func(e config.Entry) collector.ReasonSet {
			k, _ := e.(*config.Kubernetes)
			return EntryReasons(k)
		},
		NewChecker: func(e config.Entry, logger *slog.Logger) (collector.Checker, error) {
			c, ok := e.(*config.Kubernetes)
			if !ok {
				return nil, fmt.Errorf("kubernetes entry of type %T", e)
			}
			return New(c, logger)
		},
		FileWarnings: func(e config.Entry) []string {
			c, ok := e.(*config.Kubernetes)
			if !ok {
				return nil
			}
			var out []string
			if err := CheckFiles(c); err != nil {
				out = append(out, err.Error())
			}
			return append(out, CheckPodTemplate(c)...)
		},
	}
}
