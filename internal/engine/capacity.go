package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// settleCapacity makes a verdict's capacity agree with its reason
// (provider.Capacity: the engine holds the rest). It returns the capacity to keep and, for a
// provider bug, what to log.
func settleCapacity(c provider.Capacity, r provider.Reason) (provider.Capacity, string) {
	if !c.Known {
		return provider.Capacity{}, ""
	}
	c.Proxies = min(max(c.Proxies, 0), provider.MaxCapacity)
	c.Binding = provider.BoundLabelString(c.Binding)
	switch {
	case r == provider.ReasonTimeout || r == provider.ReasonUnknown:
		return provider.Capacity{}, ""
	case r.Ready() && c.Proxies < 1:
		return provider.Capacity{}, fmt.Sprintf("checker returned Ready with a capacity of %s; the capacity is dropped", c)
	}
	return c.Blocked(r), ""
}

// settleDomains makes a verdict's capacity per failure domain fit to
// export (provider.Domain): none for a Timeout or Unknown verdict, which
// measured nothing; names bounded as label values; each figure within
// its documented range. What contradicts the contract (an empty or
// repeated name, more than provider.MaxDomains domains) is a provider
// bug: those domains are dropped and problem says what to log.
//
// A verdict that is not Ready for another reason keeps its domains as the
// kind measured them, although provider_health_capacity then reads 0:
// the entry's capacity says what fits now, through whatever blocks it,
// while a domain's figures plan for the loss of a domain, which is most
// wanted when the entry is already in trouble (one region down, a zone's
// Nodes cordoned). A kind that knows its reason blocks every domain says
// so in the figures it sets (docs/metrics.md: "Capacity per failure
// domain").
//
// The slice returned is the verdict's own: the provider's is never
// written to, since a kind may hand the same domains to several verdicts.
func settleDomains(ds []provider.Domain, r provider.Reason) (kept []provider.Domain, problem string) {
	if len(ds) == 0 || r == provider.ReasonTimeout || r == provider.ReasonUnknown {
		return nil, ""
	}
	if len(ds) > provider.MaxDomains {
		return nil, fmt.Sprintf("checker returned %d domains, more than the %d an entry may export; they are dropped (the kind should say the count in its message instead)", len(ds), provider.MaxDomains)
	}
	kept = make([]provider.Domain, 0, len(ds))
	var problems []string
	empty := 0
	// A name cut to the same bound as another is the same label value:
	// repeats are counted after bounding, and every domain of a repeated
	// name is dropped, since which of them is right is not known.
	seen := make(map[string]int, len(ds))
	for _, d := range ds {
		if d.Name == "" {
			empty++
			continue
		}
		d.Name = provider.BoundLabelString(d.Name)
		d.Capacity = min(max(d.Capacity, 0), provider.MaxCapacity)
		d.Proxies = min(max(d.Proxies, 0), provider.MaxCapacity)
		if d.HasAfterLoss {
			d.AfterLoss = min(max(d.AfterLoss, -provider.MaxCapacity), provider.MaxCapacity)
		} else {
			d.AfterLoss = 0
		}
		seen[d.Name]++
		kept = append(kept, d)
	}
	if empty > 0 {
		problems = append(problems, fmt.Sprintf("%d domains without a name dropped", empty))
	}
	var repeated []string
	kept = slices.DeleteFunc(kept, func(d provider.Domain) bool {
		n := seen[d.Name]
		if n > 1 {
			seen[d.Name] = 0
			repeated = append(repeated, strconv.Quote(d.Name))
		}
		return n != 1
	})
	if len(repeated) > 0 {
		problems = append(problems, "domains named more than once dropped: "+strings.Join(repeated, ", "))
	}
	if len(kept) == 0 {
		kept = nil
	}
	return kept, provider.BoundString(strings.Join(problems, "; "))
}
