package main

import (
	"context"
	"fmt"
	"log/slog"

	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kubernetes"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// buildSpecs builds one checker per configured entry. On error, the checkers
// built so far are closed and the caller keeps its running config.
func buildSpecs(ctx context.Context, cfg *config.Config, logger *slog.Logger) (specs []collector.Spec, err error) {
	defer func() {
		if err != nil {
			for _, s := range specs {
				if c, ok := s.Checker.(collector.Closer); ok {
					_ = c.Close()
				}
			}
			specs = nil
		}
	}()
	add := func(kind, name string, settings config.Check, entry any, c collector.Checker, err error) error {
		if err != nil {
			return fmt.Errorf("%s %q: %w", kind, name, err)
		}
		specs = append(specs, collector.Spec{
			Kind: kind, Name: name,
			Timeout: settings.TimeoutDuration(), MinInterval: settings.MinIntervalDuration(),
			Checker: c, Fingerprint: fingerprint(entry),
		})
		return nil
	}
	for _, k := range cfg.Kubernetes {
		c, err := kubernetes.New(k, logger.With("provider", collector.ProviderKubernetes, "name", k.Name))
		if err := add(collector.ProviderKubernetes, k.Name, k.Check, k, c, err); err != nil {
			return specs, err
		}
	}
	for _, g := range cfg.GCP {
		c, err := gcp.New(ctx, g, logger.With("provider", collector.ProviderGCP, "name", g.Name))
		if err := add(collector.ProviderGCP, g.Name, g.Check, g, c, err); err != nil {
			return specs, err
		}
	}
	for _, v := range cfg.KVM {
		c, err := kvm.New(v, logger.With("provider", collector.ProviderKVM, "name", v.Name))
		if err := add(collector.ProviderKVM, v.Name, v.Check, v, c, err); err != nil {
			return specs, err
		}
	}
	return specs, nil
}

// fingerprint identifies an entry's settings, so that a reload which leaves
// an entry alone keeps its cached verdicts.
func fingerprint(entry any) string {
	b, err := yaml.Marshal(entry)
	if err != nil {
		return fmt.Sprintf("unmarshalable-%p", entry)
	}
	return string(b)
}
