//go:build toykind

package main

import "github.com/egress-proxies/provider_health_exporter/internal/toykind"

// The toy kind of docs/development.md's "Adding a provider", compiled in
// only with -tags toykind (make toykind): this file is all a kind adds
// outside its package.
func init() { taggedKinds = append(taggedKinds, toykind.Kind()) }
