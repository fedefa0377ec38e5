package main

import (
	"fmt"
	"log/slog"

	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kubernetes"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// providerKind is everything the exporter knows of one kind of provider.
// kinds is the only list of them: main builds the engine's entries from it,
// --config.check reads files through it, and collect[] accepts its names.
// Adding a provider is a row here and its package.
type providerKind struct {
	name string
	// reasons is the kind's closed reason set, emitted as a state set.
	reasons func() collector.ReasonSet
	// entries are the kind's configured entries, each with how to build
	// its checker.
	entries func(cfg *config.Config, logger *slog.Logger) []collector.Entry
	// fileWarnings reads the files the entries reference the way a check
	// does, for --config.check.
	fileWarnings func(cfg *config.Config) []string
}

var kinds = []providerKind{
	{
		name:    kubernetes.Name,
		reasons: kubernetes.Reasons,
		entries: func(cfg *config.Config, logger *slog.Logger) []collector.Entry {
			var out []collector.Entry
			for _, k := range cfg.Kubernetes {
				out = append(out, newEntry(kubernetes.Name, k.Name, k.Check, k, logger, func(l *slog.Logger) (collector.Checker, error) {
					return kubernetes.New(k, l)
				}))
			}
			return out
		},
		fileWarnings: func(cfg *config.Config) []string {
			var out []string
			for _, k := range cfg.Kubernetes {
				if err := kubernetes.CheckFiles(k); err != nil {
					out = append(out, fmt.Sprintf("kubernetes %q: %v", k.Name, err))
				}
			}
			return out
		},
	},
	{
		name:    gcp.Name,
		reasons: gcp.Reasons,
		entries: func(cfg *config.Config, logger *slog.Logger) []collector.Entry {
			var out []collector.Entry
			for _, g := range cfg.GCP {
				out = append(out, newEntry(gcp.Name, g.Name, g.Check, g, logger, func(l *slog.Logger) (collector.Checker, error) {
					return gcp.New(g, l)
				}))
			}
			return out
		},
		fileWarnings: func(cfg *config.Config) []string {
			var out []string
			for _, g := range cfg.GCP {
				if err := gcp.CheckFiles(g); err != nil {
					out = append(out, fmt.Sprintf("gcp %q: %v", g.Name, err))
				}
			}
			return out
		},
	},
	{
		name:    kvm.Name,
		reasons: kvm.Reasons,
		entries: func(cfg *config.Config, logger *slog.Logger) []collector.Entry {
			var out []collector.Entry
			for _, v := range cfg.KVM {
				out = append(out, newEntry(kvm.Name, v.Name, v.Check, v, logger, func(l *slog.Logger) (collector.Checker, error) {
					return kvm.New(v, l)
				}))
			}
			return out
		},
		fileWarnings: func(cfg *config.Config) []string {
			var out []string
			for _, v := range cfg.KVM {
				for _, err := range kvm.CheckFiles(v) {
					out = append(out, fmt.Sprintf("kvm %q: %v", v.Name, err))
				}
				if v.InsecureIgnoreHostKey {
					out = append(out, fmt.Sprintf("kvm %q: insecure_ignore_host_key is true: host keys are not verified", v.Name))
				}
			}
			return out
		},
	},
}

// entries lists every configured entry, kind by kind, in the order of kinds.
func entries(cfg *config.Config, logger *slog.Logger) []collector.Entry {
	var out []collector.Entry
	for _, k := range kinds {
		for _, e := range k.entries(cfg, logger) {
			e.Reasons = k.reasons()
			out = append(out, e)
		}
	}
	return out
}

// newEntry describes one configured entry to the engine. The fingerprint
// is the entry's settings: a reload that leaves them alone keeps the
// checker, its clients, tokens, connections and cached verdicts.
func newEntry(kind, name string, check config.Check, settings any, logger *slog.Logger, build func(*slog.Logger) (collector.Checker, error)) collector.Entry {
	return collector.Entry{
		Kind: kind, Name: name,
		Timeout: check.TimeoutDuration(), MinInterval: check.MinIntervalDuration(),
		Fingerprint: fingerprint(settings),
		Build:       func() (collector.Checker, error) { return build(logger.With("provider", kind, "name", name)) },
	}
}

// fingerprint identifies an entry's settings.
func fingerprint(entry any) string {
	b, err := yaml.Marshal(entry)
	if err != nil {
		return fmt.Sprintf("unmarshalable-%p", entry)
	}
	return string(b)
}

// collectValues are the values collect[] accepts: a kind, or exporter for
// the exporter's own metrics alone.
func collectValues() []string {
	out := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		out = append(out, k.name)
	}
	return append(out, "exporter")
}

func validCollect(v string) bool {
	for _, c := range collectValues() {
		if c == v {
			return true
		}
	}
	return false
}
