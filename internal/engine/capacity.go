package engine

import (
	"fmt"

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
