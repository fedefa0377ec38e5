package gcp

import (
	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// Kind is the gcp kind (a project's Compute API) as the exporter's table of kinds lists it.
func Kind() collector.Kind {
	return collector.NewKind(collector.KindOf[*config.GCP, *Checker]{
		Section: config.GCPSection(),
		Reasons: Reasons(),
		// Transport classifies what fails below the HTTP status.
		Classifiers: []collector.Classifier{collector.Transport},
		// QuotaExhausted only where regions are checked (docs/configuration.md).
		EntryReasons: func(g *config.GCP) collector.ReasonSet {
			if len(g.Regions) > 0 {
				return Reasons()
			}
			return Reasons().Without(ReasonQuotaExhausted)
		},
		NewChecker:   New,
		FileWarnings: func(g *config.GCP) []string { return collector.Warnings(CheckFiles(g)) },
	})
}
