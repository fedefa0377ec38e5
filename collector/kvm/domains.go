package kvm

import (
	"context"
	"fmt"
	"log/slog"
	"path"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// A host's failure domain (docs/configuration.md: "Failure domains
// (KVM)"): the rack, room or zone it shares with other hosts, and how
// many proxies it runs. A host knows nothing of the other hosts of its
// domain, which another replica may check, so its verdict carries one
// domain without an after-loss; the mixin's recording rule sums the
// hosts' series per domain and computes it.

// proxyName tells whether a libvirt domain's name matches the
// proxy_vm_name glob, validated at load (so path.Match has no error to
// give).
func proxyName(glob, name string) bool {
	ok, _ := path.Match(glob, name)
	return ok
}

// countProxies counts, where proxy_vm_name is set and the host's capacity
// is known (without it the host exports no domain), the defined domains
// whose names match: from the domain stats the promised-resource keys
// read, or else with one ConnectListAllDomains. A failed call is the
// verdict's only where it was still Ready: a reason found before it is
// the more basic thing to fix.
func (c *Checker) countProxies(ctx context.Context, logger *slog.Logger, h *host, s *session, r *result) {
	if h.proxyVMName == "" || !hostCapacity(r, h.mins).Known {
		return
	}
	if r.promised.domainsKnown {
		r.proxies, r.proxiesKnown = r.promised.proxies, true
		return
	}
	lv := loggedClient{next: s.lv, logger: logger}
	var names []string
	err := s.call(ctx, func() error {
		var err error
		if names, err = lv.ConnectListAllDomains(); err != nil {
			return fmt.Errorf("list the defined domains: %w", err)
		}
		return nil
	})
	if err != nil {
		reason, err := h.callFailed(ctx, logger, s, err)
		if r.reason == provider.ReasonReady {
			r.reason, r.err = reason, err
		}
		return
	}
	for _, name := range names {
		if proxyName(h.proxyVMName, name) {
			r.proxies++
		}
	}
	r.proxiesKnown = true
}

// domains is the host's failure domain for its verdict: named by its
// configured domain, else by the host itself; its capacity is the host's
// and its proxies those countProxies found (0 without proxy_vm_name).
// None where the host has neither domain nor proxy_vm_name, where its
// capacity is unknown (no minimum set, or nothing measured: 0 would read
// as a full host in the domain's sums), or where its proxies could not be
// counted.
func (h *host) domains(capacity provider.Capacity, r *result) []provider.Domain {
	if h.domain == "" && h.proxyVMName == "" || !capacity.Known || h.proxyVMName != "" && !r.proxiesKnown {
		return nil
	}
	name := h.domain
	if name == "" {
		name = h.name
	}
	return []provider.Domain{{Name: name, Capacity: capacity.Proxies, Proxies: r.proxies}}
}
