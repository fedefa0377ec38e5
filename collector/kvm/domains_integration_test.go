//go:build integration

package kvm_test

import (
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestIntegrationProxyCount: against the real libvirtd, with two domains
// named egress-* and one other defined (shut off: a defined proxy is
// counted whether it runs or not), a host with proxy_vm_name egress-*
// counts 2 proxies more than before, with one ConnectListAllDomains when
// nothing else reads the domains and from the domain stats (no call more)
// when min_free_vcpus reads them; a host with a domain is named by it,
// one without by itself; the capacity is the host's.
func TestIntegrationProxyCount(t *testing.T) {
	e := promisedEnv{loadEnv(t), t}
	entry := func(vcpus int) *kvm.Checker {
		return e.entry(func(cfg *kvm.Entry) {
			cfg.ProxyVMName, cfg.MinPoolAvailable, cfg.MinFreeVCPUs = "egress-*", "1MiB", vcpus
			cfg.Hosts[0].Domain = "rack-a"
		})
	}
	proxies := func(c *kvm.Checker, host string, want string) provider.Domain {
		t.Helper()
		v, _, calls := checkHost(t, c, host)
		if v.Reason != provider.ReasonReady || len(v.Domains) != 1 {
			t.Fatalf("host %s: %s (%s), domains %+v; want Ready with one domain", host, v.Reason, v.Message, v.Domains)
		}
		if d := v.Domains[0]; d.Capacity != v.Capacity.Proxies || d.HasAfterLoss {
			t.Errorf("host %s: domain %+v, want the host's capacity %s and no after-loss", host, d, v.Capacity)
		}
		if !strings.Contains(calls, want) || want == "ConnectGetAllDomainStats" && strings.Contains(calls, "ConnectListAllDomains") {
			t.Errorf("host %s: calls %q, want %s (and not both)", host, calls, want)
		}
		t.Logf("host %s: %+v, calls %q", host, v.Domains[0], calls)
		return v.Domains[0]
	}
	list, stats := entry(0), entry(1)
	before := proxies(list, "a", "ConnectListAllDomains")

	e.define("egress-it-1", 1, 64)
	e.define("egress-it-2", 1, 64)
	e.define("other-it-1", 1, 64)

	for _, tc := range []struct {
		name, host, call, domain string
		c                        *kvm.Checker
	}{
		{"listed", "a", "ConnectListAllDomains", "rack-a", list},
		{"listed, no domain: the host's name", "b", "ConnectListAllDomains", "b", list},
		{"from the domain stats", "a", "ConnectGetAllDomainStats", "rack-a", stats},
	} {
		d := proxies(tc.c, tc.host, tc.call)
		if d.Name != tc.domain || d.Proxies != before.Proxies+2 {
			t.Errorf("%s: domain %q with %d proxies, want %q with %d + 2 (egress-it-1, egress-it-2; not other-it-1)",
				tc.name, d.Name, d.Proxies, tc.domain, before.Proxies)
		}
	}
	if before.Proxies != 0 {
		t.Logf("the host already had %d egress-* domains", before.Proxies)
	}
}
