package gcp

import (
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Kind is the gcp kind (a project's Compute API) as the exporter's table of kinds lists it.
func Kind() provider.Kind {
	return provider.NewKind(provider.KindOf[*Entry, *Checker]{
		Section: Section(),
		Doc:     Doc(),
		Reasons: Reasons(),
		// Transport classifies what fails below the HTTP status.
		Classifiers: []provider.Classifier{provider.TransportErrors},
		// The opt-in checks' reasons only where they are set (docs/configuration.md).
		EntryReasons: EntryReasons,
		NewChecker:   New,
		FileWarnings: func(g *Entry) []string { return provider.Warnings(CheckFiles(g)) },
	})
}
