package main

import (
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/internal/kinds"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// builtinKinds is the table of kinds (internal/kinds: the one place a
// kind is added; docs/development.md: "Adding a provider"): main builds
// the engine's entries from it, the configuration file is read through
// its sections, --config.check reads files through it and collect[]
// accepts its names.
func builtinKinds() []provider.Kind { return kinds.Builtin() }

// kindTable is the table of kinds with every kind's contract checked
// (provider.NewTable), which main does first: a kind that breaks one
// stops the exporter with an error naming it.
func kindTable() ([]provider.Kind, error) { return kinds.Table() }

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
