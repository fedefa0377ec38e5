//go:build toykind

package kinds

import (
	"github.com/egress-proxies/provider_health_exporter/internal/toykind"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// tagged adds the toy kind of docs/development.md's "Adding a provider",
// compiled in only with -tags toykind (make toykind): this row is all a
// kind adds outside its package and its section of docs/configuration.md.
func tagged() []provider.Kind { return []provider.Kind{toykind.Kind()} }
