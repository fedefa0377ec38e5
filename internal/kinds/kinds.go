// Package kinds is the exporter's table of kinds: one row a kind, the one
// place a kind is added besides its own package and its section of
// docs/configuration.md (docs/development.md: "Adding a provider"). The command builds everything from it (the
// engine's entries, the configuration file's sections, collect[]), and so
// does `make generate` (internal/generate), which writes the docs and the
// configuration's schema from the same rows.
package kinds

import (
	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kubernetes"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Builtin lists the rows of the table. Each row is the kind's own
// description of itself. The order is the order of the summary, of
// /api/v1/config and of every list of kinds in the docs.
func Builtin() []provider.Kind {
	return append([]provider.Kind{
		kubernetes.Kind(),
		gcp.Kind(),
		kvm.Kind(),
	}, tagged()...)
}

// Table is the table with every kind's contract checked
// (provider.NewTable), which the command does first: a kind that breaks
// one stops the exporter with an error naming it.
func Table() ([]provider.Kind, error) {
	return provider.NewTable(Builtin()...)
}
