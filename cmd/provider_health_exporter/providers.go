package main

import (
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kubernetes"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// builtinKinds is the table of kinds: the one place a kind is added, one
// line a kind (docs/development.md: "Adding a provider"), but for a kind
// compiled in only by a build tag, whose row is a file of its own
// (taggedKinds). Each row is the kind's own description of itself;
// main builds the engine's entries from it, the configuration file is read
// through its sections, --config.check reads files through it and
// collect[] accepts its names. The order is the order of the summary and
// of /api/v1/config.
func builtinKinds() []provider.Kind {
	return append([]provider.Kind{
		kubernetes.Kind(),
		gcp.Kind(),
		kvm.Kind(),
	}, taggedKinds...)
}

// taggedKinds are the rows that files compiled in by a build tag add to
// the table, after the others (kind_toykind.go).
var taggedKinds []provider.Kind

// kindTable is the table of kinds with every kind's contract checked
// (provider.NewTable), which main does first: a kind that breaks one
// stops the exporter with an error naming it.
func kindTable() ([]provider.Kind, error) {
	return provider.NewTable(builtinKinds()...)
}

// entries lists every configured entry of the built-in kinds.
func entries(cfg *config.Config, logger *slog.Logger) []engine.Entry {
	return engine.Entries(builtinKinds(), cfg, logger)
}

// collectValues are the values collect[] accepts: a kind, or exporter for
// the exporter's own metrics alone.
func collectValues(kinds []provider.Kind) []string {
	out := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		out = append(out, k.Name())
	}
	return append(out, "exporter")
}

func validCollect(kinds []provider.Kind, v string) bool {
	for _, c := range collectValues(kinds) {
		if c == v {
			return true
		}
	}
	return false
}
