package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
)

// CanI is one can_i entry: what the operator must be allowed to do in the
// namespace, as `kubectl auth can-i` takes it.
type CanI struct {
	Verb     string
	Group    string // "" for the core group
	Resource string
}

func (c CanI) String() string { return c.Verb + " " + c.ResourceWord() }

// ResourceWord is the resource as kubectl names it: "pods",
// "deployments.apps".
func (c CanI) ResourceWord() string {
	if c.Group == "" {
		return c.Resource
	}
	return c.Resource + "." + c.Group
}

// canIWord is a verb, a resource or a group: lowercase DNS-ish words, as
// RBAC rules write them, or "*".
var canIWord = regexp.MustCompile(`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`)

// ParseCanI reads a can_i entry: "VERB RESOURCE", the resource in the core
// group ("create pods"), or with its group as kubectl writes it
// ("create deployments.apps") or as a prefix ("create apps/deployments").
// The group is not looked up: "pods" is the core group's.
func ParseCanI(s string) (CanI, error) {
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return CanI{}, fmt.Errorf("can_i entry %q: want a verb and a resource, like \"create pods\" or \"create deployments.apps\"", s)
	}
	ci := CanI{Verb: fields[0], Resource: fields[1]}
	grouped := false
	if g, r, ok := strings.Cut(ci.Resource, "/"); ok {
		if g == "" || strings.Contains(r, "/") {
			return CanI{}, fmt.Errorf("can_i entry %q: want GROUP/RESOURCE, like apps/deployments", s)
		}
		ci.Group, ci.Resource, grouped = g, r, true
	} else if r, g, ok := strings.Cut(ci.Resource, "."); ok {
		ci.Group, ci.Resource, grouped = g, r, true
	}
	for _, w := range []struct{ what, v string }{{"verb", ci.Verb}, {"resource", ci.Resource}, {"group", ci.Group}} {
		if w.what == "group" && !grouped {
			continue
		}
		if !canIWord.MatchString(w.v) || (w.what != "group" && strings.Contains(w.v, ".")) {
			return CanI{}, fmt.Errorf("can_i entry %q: %s %q is not a lowercase name", s, w.what, w.v)
		}
	}
	return ci, nil
}

// ParseQuotaMinimum reads one min_quota_headroom entry: a ResourceQuota
// resource name (pods, requests.cpu, requests.memory, ...) and the least
// hard − used a proxy needs, a Kubernetes quantity ("1", "2", "500m", "4Gi").
func ParseQuotaMinimum(name, value string) (resource.Quantity, error) {
	if name == "" {
		return resource.Quantity{}, errors.New("min_quota_headroom: empty resource name")
	}
	// The bounded parser first: resource.ParseQuantity never returns on
	// some values ("1e-1000000000"), and a minimum beyond what it clamps
	// to could never be met.
	m, err := quantity.Parse(strings.TrimSpace(value))
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("min_quota_headroom %s: %w", name, err)
	}
	if m == quantity.MaxMilli {
		return resource.Quantity{}, fmt.Errorf("min_quota_headroom %s: %q is larger than any quota can be", name, value)
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(value))
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("min_quota_headroom %s: %q: %w", name, value, err)
	}
	if q.Sign() < 0 {
		return resource.Quantity{}, fmt.Errorf("min_quota_headroom %s: %q is negative", name, value)
	}
	return q, nil
}
