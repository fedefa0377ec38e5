package provider

import "fmt"

// Domain is one failure domain of a target's capacity (docs/metrics.md:
// "Capacity per failure domain"): a zone or node pool of a cluster, a
// region of a project, the rack or room a KVM host shares with others.
// Operators spread proxies over such domains so that losing one leaves the
// rest serving; these figures say whether it would.
//
// A provider sets them on its Verdict only when the entry asks for domains
// (capacity_domain, a GCP entry's regions, a KVM host's domain), from the
// same facts as the verdict's Capacity. The engine exports each as
// provider_health_domain_capacity, provider_health_domain_proxies and
// provider_health_capacity_after_loss with a domain label, and drops them
// with the capacity: a Timeout or Unknown verdict measured nothing.
type Domain struct {
	// Name is the domain label's value: a Node label's value, a region, a
	// host's configured domain. Bounded like every label value.
	Name string
	// Capacity is how many more copies fit in this domain alone:
	// 0 ≤ Capacity ≤ MaxCapacity.
	Capacity int64
	// Proxies is how many proxies run in this domain now.
	Proxies int64
	// AfterLoss is how many more copies fit once this domain is lost and
	// its proxies are created again elsewhere; negative is the number of
	// those proxies left without a place. Meaningful only with HasAfterLoss.
	AfterLoss int64
	// HasAfterLoss is false where the target alone cannot say it: a KVM
	// host knows nothing of the other hosts of its domain (which another
	// replica may check), so the mixin's recording rule of the same name
	// computes it from the hosts' series.
	HasAfterLoss bool
}

// MaxDomains is the most domains one entry exports. More is a verdict
// whose message names the count, with no domain series: a label key
// with thousands of values (a hostname label named by mistake) must not
// become thousands of series per entry.
const MaxDomains = 64

// WorstLoss names the domain whose loss leaves the most proxies without a
// place, the first in ds among equals, in the words a verdict's message
// carries ("losing zone-a leaves 2 proxies without a place"); "" when
// every loss leaves room or no after-loss is known.
func WorstLoss(ds []Domain) string {
	worst := -1
	for k, d := range ds {
		if d.HasAfterLoss && d.AfterLoss < 0 && (worst < 0 || d.AfterLoss < ds[worst].AfterLoss) {
			worst = k
		}
	}
	if worst < 0 {
		return ""
	}
	n := -ds[worst].AfterLoss
	what := "proxies"
	if n == 1 {
		what = "proxy"
	}
	return fmt.Sprintf("losing %s leaves %d %s without a place", BoundString(ds[worst].Name), n, what)
}
