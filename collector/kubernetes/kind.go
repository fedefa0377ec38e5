package kubernetes

import (
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Kind is the kubernetes kind (a cluster's API server) as the exporter's table of kinds lists it.
func Kind() provider.Kind {
	// One hub for every checker of the table: entries on one cluster
	// share its watch caches (watchhub.go).
	hub := newWatchHub()
	return provider.NewKind(provider.KindOf[*Entry, *Checker]{
		Section: Section(),
		Doc:     Doc(),
		Reasons: Reasons(),
		// Transport classifies what fails below the HTTP status.
		Classifiers: []provider.Classifier{provider.TransportErrors},
		// QuotaExhausted and AdmissionDenied only where their keys are set (docs/configuration.md).
		EntryReasons: EntryReasons,
		NewChecker: func(e *Entry, logger *slog.Logger, opts ...provider.Option) (*Checker, error) {
			return newChecker(e, logger, hub, opts...)
		},
		FileWarnings: func(k *Entry) []string {
			return append(provider.Warnings(CheckFiles(k)), CheckPodTemplate(k)...)
		},
	})
}
