package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
)

// sdGroup is one target group of Prometheus's HTTP service discovery
// (http_sd_configs): the exporter itself as the address, with the labels
// that make Prometheus scrape /probe for one entry, or one target of it.
type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// multiTarget tells whether /probe of an entry of kind checks several
// targets unless given target= (provider.Kind's MultiTarget): only those
// get __param_target, so that each of their targets is its own scrape (and
// its own shard, docs/scaling.md: "Scaling out").
func (x *exporter) multiTarget(kind string) bool {
	for _, k := range x.kinds {
		if k.Name() == kind {
			return k.MultiTarget()
		}
	}
	return false
}

// serveSD lists one target group per (entry, target) that /probe serves,
// from the targets of the configuration in force, so that a reload shows
// at once and Prometheus's config names nothing but this URL
// (docs/configuration.md: "HTTP endpoints"). It reads the engine's last
// state and never starts a check.
func (x *exporter) serveSD(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	scheme, host, prefix := x.web.externalScheme, x.web.externalHost, x.web.linkPrefix
	if host == "" {
		// Without --web.external-url, Prometheus reaches the exporter where
		// it asked for this list: its Host, under the route prefix.
		scheme, host, prefix = "http", r.Host, x.web.routePrefix
		if r.TLS != nil {
			scheme = "https"
		}
	}
	if host == "" {
		http.Error(w, "no Host header in the request and no --web.external-url: the exporter does not know its own address", http.StatusBadRequest)
		return
	}
	if err := checkHost(host); err != nil && x.web.externalHost == "" {
		// Copied into every target group: only a valid, bounded host[:port].
		http.Error(w, "the request's Host cannot be the exporter's address (set --web.external-url): "+err.Error(), http.StatusBadRequest)
		return
	}
	results, err := x.engine.Status("")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := x.writeSD(x.stream(w, begin), results, scheme, host, prefix); err != nil {
		x.logger.Debug("writing service discovery", "err", err)
	}
}

// writeSD writes the target groups of results one at a time, byte for
// byte what a json.Encoder with SetIndent("", "  ") writes of the whole
// list: Prometheus needs every group, so the list is streamed, never cut,
// and a 5,000-host fleet's list is never held whole per request
// (docs/security.md: "Strings, labels and pages").
func (x *exporter) writeSD(w io.Writer, results []engine.ProviderResult, scheme, host, prefix string) error {
	out := &stickyWriter{w: w}
	out.WriteString("[")
	n := 0
	for _, p := range results {
		multi := x.multiTarget(p.Kind)
		for _, t := range p.Targets {
			labels := map[string]string{
				"__metrics_path__": prefix + "/probe",
				"__scheme__":       scheme,
				"__param_name":     p.Name,
				"provider":         p.Kind,
				"name":             p.Name,
				"target":           t.Target.Name,
			}
			if multi {
				labels["__param_target"] = t.Target.Name
			}
			b, err := json.MarshalIndent(sdGroup{Targets: []string{host}, Labels: labels}, "  ", "  ")
			if err != nil {
				return fmt.Errorf("encoding the group of %s/%s: %w", p.Name, t.Target.Name, err)
			}
			out.WriteString(separator(n) + "\n  ")
			out.Write(b)
			if out.err != nil {
				return out.err
			}
			n++
		}
	}
	if n > 0 {
		out.WriteString("\n")
	}
	out.WriteString("]\n")
	return out.err
}
