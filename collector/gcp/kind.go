package gcp

import (
	"fmt"
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// Kind is the gcp kind (a project's Compute API) as the exporter's table of kinds lists it.
func Kind() collector.Kind {
	return collector.Kind{
		Section: config.GCPSection(),
		Reasons: Reasons(),
		// The opt-in checks' reasons only where they are set (docs/configuration.md).
		EntryReasons: func(e config.Entry) collector.ReasonSet {
			if g, ok := e.(*config.GCP); ok {
				return EntryReasons(g)
			}
			return Reasons().Without(ReasonQuotaExhausted, ReasonRegionDown, ReasonImageUnavailable)
		},
		NewChecker: func(e config.Entry, logger *slog.Logger) (collector.Checker, error) {
			c, ok := e.(*config.GCP)
			if !ok {
				return nil, fmt.Errorf("gcp entry of type %T", e)
			}
			return New(c, logger)
		},
		FileWarnings: func(e config.Entry) []string {
			c, ok := e.(*config.GCP)
			if !ok {
				return nil
			}
			if err := CheckFiles(c); err != nil {
				return []string{err.Error()}
			}
			return nil
		},
	}
}
