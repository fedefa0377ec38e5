package kubernetes

// The kubernetes section of the configuration file (docs/configuration.md:
// "Kubernetes"): an entry's keys, their defaults, how Load validates them
// and what the JSON Schema says of them.

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
)

// DefaultLabelSelector selects the operator's proxy Pods when an entry
// sets no label_selector.
const DefaultLabelSelector = "app.kubernetes.io/managed-by=egress-proxies-operator"

// Section is the kubernetes section of the configuration file: one entry a
// cluster.
func Section() config.Section {
	return config.Section{Kind: Name, New: func() config.Entry { return &Entry{LabelSelector: DefaultLabelSelector} }}
}

// Entry is one entry of the kubernetes section: one cluster.
type Entry struct {
	Name          string `yaml:"name"`
	Kubeconfig    string `yaml:"kubeconfig,omitempty"`
	Context       string `yaml:"context,omitempty"`
	LabelSelector string `yaml:"label_selector,omitempty"`
	// Namespace, CanI and MinQuotaHeadroom are the optional headroom
	// checks (docs/configuration.md: "Kubernetes"); the last two need the
	// first. MinQuotaHeadroom maps a ResourceQuota resource to a quantity.
	Namespace        string            `yaml:"namespace,omitempty"`
	CanI             []string          `yaml:"can_i,omitempty"`
	MinQuotaHeadroom map[string]string `yaml:"min_quota_headroom,omitempty"`
	// PodTemplate is the optional dry-run placement (docs/configuration.md:
	// "Placement: pod_template"); it needs Namespace.
	PodTemplate PodTemplate `yaml:"pod_template,omitempty"`
	// Schedule fits the Pod the dry run returns on the cluster's Nodes,
	// as kube-scheduler's filters would (docs/configuration.md:
	// "Scheduling: schedule"); it needs PodTemplate.
	Schedule bool `yaml:"schedule,omitempty"`
	// CapacityDomain is a Node label key (topology.kubernetes.io/zone, a
	// node pool's label): the fit also gives the capacity per value of it
	// and what still fits after losing one (docs/configuration.md:
	// "Capacity per failure domain: capacity_domain"); it needs Schedule.
	CapacityDomain string `yaml:"capacity_domain,omitempty"`
	config.Check   `yaml:",inline"`
}

// EntryName implements config.Entry.
func (k *Entry) EntryName() string { return k.Name }

// ResolvePaths implements config.Entry.
func (k *Entry) ResolvePaths(join func(*string)) {
	join(&k.Kubeconfig)
	join(&k.PodTemplate.Path)
}

// TargetCount implements config.Entry: one API server.
func (k *Entry) TargetCount() int { return 1 }

// Validate implements config.Entry.
func (k *Entry) Validate(where string) error {
	if k.Context != "" && k.Kubeconfig == "" {
		return fmt.Errorf("%s: context: set without kubeconfig (the in-cluster config has no contexts)", where)
	}
	if err := k.validateHeadroom(where); err != nil {
		return err
	}
	if err := k.validatePodTemplate(where); err != nil {
		return err
	}
	if k.Schedule && k.PodTemplate.Path == "" {
		// Without the Pod admission returns there is nothing to fit.
		return fmt.Errorf("%s: schedule: set without pod_template (the Pod fitted on the nodes is the one its dry run returns)", where)
	}
	if err := k.validateCapacityDomain(where); err != nil {
		return err
	}
	return config.Readable(where, "kubeconfig", boundedfile.Kubeconfig, k.Kubeconfig)
}

// validateCapacityDomain checks capacity_domain: a label key, as the API
// server validates a Node's, and only with schedule, whose fit it breaks
// down.
func (k *Entry) validateCapacityDomain(where string) error {
	if k.CapacityDomain == "" {
		return nil
	}
	if !k.Schedule {
		return fmt.Errorf("%s: capacity_domain: set without schedule: true (the capacity per domain is the fit's, broken down by the Nodes' label)", where)
	}
	if errs := validation.IsQualifiedName(k.CapacityDomain); len(errs) > 0 {
		return fmt.Errorf("%s: capacity_domain: %q is not a Node label key: %s", where, k.CapacityDomain, strings.Join(errs, "; "))
	}
	return nil
}

// validateHeadroom checks the optional headroom keys: each can_i entry
// and quantity must parse, and both need the namespace they are about.
func (k *Entry) validateHeadroom(where string) error {
	if k.Namespace == "" && (len(k.CanI) > 0 || len(k.MinQuotaHeadroom) > 0) {
		return fmt.Errorf("%s: namespace: missing (required by can_i and min_quota_headroom)", where)
	}
	if k.Namespace != "" && !namespaceName().MatchString(k.Namespace) {
		return fmt.Errorf("%s: namespace: %q is not a namespace name (lowercase letters, digits and '-', at most 63)", where, k.Namespace)
	}
	if len(k.CanI) > MaxCanI {
		return fmt.Errorf("%s: can_i: %d entries, at most %d are allowed (each is one access review at every check)", where, len(k.CanI), MaxCanI)
	}
	for i, s := range k.CanI {
		if _, err := ParseCanI(s); err != nil {
			return fmt.Errorf("%s: can_i[%d]: %w", where, i, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(k.MinQuotaHeadroom)) {
		if _, err := ParseQuotaMinimum(name, k.MinQuotaHeadroom[name]); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

// MaxCanI is the most can_i entries one kubernetes entry may list: each is
// an access review at every check, made at most a few at a time
// (docs/configuration.md: "Kubernetes").
const MaxCanI = 32

// namespaceName is a Kubernetes namespace name (an RFC 1123 label).
// Compiled when first used, as fieldPathRE: 44 KB that a replica without
// Kubernetes entries would otherwise keep.
var namespaceName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
})

// quantityPattern is a non-negative Kubernetes quantity ("1", "500m",
// "4Gi", "1e3") whose exponent has at most two digits (internal/quantity's
// bound is 10^±64).
const quantityPattern = `^\s*\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?\s*$`

// labelKeyPattern is a label key as the API server takes it: an optional
// DNS subdomain prefix and '/', then a name of letters, digits, '-', '_'
// and '.' that starts and ends alphanumeric (the lengths are checked by
// Validate).
const labelKeyPattern = `^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`

// SchemaKeywords implements config.SchemaKeywordser.
func (Entry) SchemaKeywords() map[string]config.Keywords {
	ns := []string{"namespace"}
	return map[string]config.Keywords{
		"": {"dependencies": map[string]any{
			"context":            []string{"kubeconfig"},
			"can_i":              ns,
			"min_quota_headroom": ns,
			"pod_template":       ns,
			"schedule":           []string{"pod_template"},
			"capacity_domain":    []string{"schedule"},
		}},
		"kubeconfig":     {"description": "Kubeconfig file of the cluster; empty: the in-cluster ServiceAccount."},
		"context":        {"description": "Context of the kubeconfig; default: its current context. Needs kubeconfig."},
		"label_selector": {"description": "Label selector of the operator's proxy Pods (default app.kubernetes.io/managed-by=egress-proxies-operator)."},
		"namespace": {
			"pattern":     namespaceName().String(),
			"description": "Namespace of the proxies, for can_i, min_quota_headroom and pod_template.",
		},
		"can_i": {
			"maxItems":    MaxCanI,
			"description": "What the exporter's identity must be allowed in namespace, as kubectl auth can-i takes it (\"create pods\").",
			"items":       config.Keywords{"type": "string", "pattern": `^\s*(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)\s+[a-z0-9*][-a-z0-9.*/]*\s*$`},
		},
		"min_quota_headroom": {
			"description":          "Least hard - used a proxy needs per ResourceQuota resource of namespace (pods: 1, requests.memory: 4Gi).",
			"propertyNames":        config.Keywords{"minLength": 1},
			"additionalProperties": config.Keywords{"type": []string{"string", "number"}, "pattern": quantityPattern, "minimum": 0},
		},
		"pod_template": {"description": "File of the Pod manifest the operator creates proxies from, dry-run in namespace. Needs namespace."},
		"schedule":     {"description": "Fit the Pod the dry run returns on the cluster's Nodes as kube-scheduler's filters would (Unschedulable, capacity); needs pod_template and list/watch on nodes and pods."},
		"capacity_domain": {
			"pattern":     labelKeyPattern,
			"maxLength":   317, // a 253-character prefix, '/', a 63-character name
			"description": "Node label key (topology.kubernetes.io/zone, a node pool's label) whose values are the failure domains: capacity, proxies and capacity after losing each, at most 64; needs schedule.",
		},
	}
}

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
