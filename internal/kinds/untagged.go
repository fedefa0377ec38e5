//go:build !toykind

package kinds

import "github.com/egress-proxies/provider_health_exporter/collector"

// tagged are the rows that a build tag adds after the others: none
// without one (toykind.go).
func tagged() []collector.Kind { return nil }
