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

// buildSpecs builds one checker per configured entry. A kubernetes or gcp
// entry whose settings did not change keeps its checker across a reload (its
// client, and GCP's cached token); kvm entries get a new checker that adopts
// the kept connections of unchanged hosts, because a kvm entry's hosts can
// change one by one. On error, the checkers built here are closed and the
// caller keeps its running config.
func buildSpecs(ctx context.Context, cfg *config.Config, logger *slog.Logger, unchanged func(kind, name, fingerprint string) collector.Checker) (specs []collector.Spec, err error) {
	var built []collector.Checker
	defer func() {
		if err != nil {
			for _, c := range built {
				if cl, ok := c.(collector.Closer); ok {
					_ = cl.Close()
				}
			}
			specs = nil
		}
	}()
	add := func(kind, name string, settings config.Check, entry any, build func() (collector.Checker, error)) error {
		fp := fingerprint(entry)
		c := unchanged(kind, name, fp)
		if c == nil || kind == collector.ProviderKVM {
			var err error
			if c, err = build(); err != nil {
				return fmt.Errorf("%s %q: %w", kind, name, err)
			}
			built = append(built, c)
		}
		specs = append(specs, collector.Spec{
			Kind: kind, Name: name,
			Timeout: settings.TimeoutDuration(), MinInterval: settings.MinIntervalDuration(),
			Checker: c, Fingerprint: fp,
		})
		return nil
	}
	scoped := func(kind, name string) *slog.Logger { return logger.With("provider", kind, "name", name) }
	for _, k := range cfg.Kubernetes {
		err := add(collector.ProviderKubernetes, k.Name, k.Check, k, func() (collector.Checker, error) {
			return kubernetes.New(k, scoped(collector.ProviderKubernetes, k.Name))
		})
		if err != nil {
			return specs, err
		}
	}
	for _, g := range cfg.GCP {
		err := add(collector.ProviderGCP, g.Name, g.Check, g, func() (collector.Checker, error) {
			return gcp.New(ctx, g, scoped(collector.ProviderGCP, g.Name))
		})
		if err != nil {
			return specs, err
		}
	}
	for _, v := range cfg.KVM {
		err := add(collector.ProviderKVM, v.Name, v.Check, v, func() (collector.Checker, error) {
			return kvm.New(v, scoped(collector.ProviderKVM, v.Name))
		})
		if err != nil {
			return specs, err
		}
	}
	return specs, nil
}

// fingerprint identifies an entry's settings, so that a reload which leaves
// an entry alone keeps its checker and its cached verdicts.
func fingerprint(entry any) string {
	b, err := yaml.Marshal(entry)
	if err != nil {
		return fmt.Sprintf("unmarshalable-%p", entry)
	}
	return string(b)
}
