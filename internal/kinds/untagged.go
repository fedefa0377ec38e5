//go:build !toykind

package kinds

import "github.com/egress-proxies/provider_health_exporter/provider"

// tagged are the rows that a build tag adds after the others: none
// without one (toykind.go).
func tagged() []provider.Kind { return nil }
