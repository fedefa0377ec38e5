package kubernetes

import (
	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// Kind is the kubernetes kind (a cluster's API server) as the exporter's table of kinds lists it.
func Kind() collector.Kind {
	return collector.NewKind(collector.KindOf[*config.Kubernetes, *Checker]{
		Section: config.KubernetesSection(),
		Reasons: Reasons(),
		// Transport classifies what fails below the HTTP status.
		Classifiers: []collector.Classifier{collector.Transport},
		// QuotaExhausted and AdmissionDenied only where their keys are set (docs/configuration.md).
		EntryReasons: EntryReasons,
		NewChecker:   New,
		FileWarnings: func(k *config.Kubernetes) []string {
			return append(collector.Warnings(CheckFiles(k)), CheckPodTemplate(k)...)
		},
	})
}
