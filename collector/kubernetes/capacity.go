package kubernetes

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The capacity of a cluster entry (docs/metrics.md: "Capacity"): the
// least over the namespace's ResourceQuotas of floor((hard − used) /
// need), where need is a min_quota_headroom entry (one proxy's need, as
// the key says), and, with pod_template, what one more copy of the Pod the
// dry run returned adds to the quota's usage: its requests and limits as
// admission left them (LimitRange defaults included), summed over its
// containers as the ResourceQuota admission sums them
// (k8s.io/component-helpers/resource: init containers, sidecars, overhead,
// pod-level resources), and 1 for pods and count/pods.

// quotaNeeds is what one copy of the dry run's Pod adds to a quota, in
// thousandths of each resource's unit, by quota resource name
// ("requests.cpu", "cpu", "limits.memory", "pods"). What the same Pod asks
// of a node, as kube-scheduler counts it, is nodeNeed (fit.go): the two
// read the same PodRequests sum, by other names and units.
type quotaNeeds map[string]quantity.Milli

// errProtobufPod: an API server that answered the dry run in protobuf,
// which the exporter does not ask for; the Pod's requests are then not
// read and the capacity from them is unknown.
var errProtobufPod = errors.New("the dry run's answer is protobuf: its requests are not read")

// jsonResources are a container's (or the Pod's) requests and limits as
// the text the API server wrote.
type jsonResources struct {
	Requests map[string]jsonQuantity `json:"requests"`
	Limits   map[string]jsonQuantity `json:"limits"`
}

type jsonContainer struct {
	Name          string                         `json:"name"`
	RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy"`
	Resources     jsonResources                  `json:"resources"`
}

// decodeQuotaNeeds reads the requests and limits of the Pod the dry run
// returned. Every quantity is read by internal/quantity first, so one no
// cluster could mean is an error before resource.ParseQuantity, which is
// exact and so unbounded, sees it (decode.go).
func decodeQuotaNeeds(body []byte, protobuf bool) (quotaNeeds, error) {
	if protobuf {
		return nil, errProtobufPod
	}
	var pod struct {
		Spec struct {
			Containers     []jsonContainer         `json:"containers"`
			InitContainers []jsonContainer         `json:"initContainers"`
			Overhead       map[string]jsonQuantity `json:"overhead"`
			Resources      *jsonResources          `json:"resources"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &pod); err != nil {
		return nil, fmt.Errorf("the dry run's Pod: %w", err)
	}
	var p corev1.Pod
	var err error
	conv := func(cs []jsonContainer) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
			out[i].Resources.Requests, err = resourceList(c.Resources.Requests, err)
			out[i].Resources.Limits, err = resourceList(c.Resources.Limits, err)
		}
		return out
	}
	p.Spec.Containers, p.Spec.InitContainers = conv(pod.Spec.Containers), conv(pod.Spec.InitContainers)
	p.Spec.Overhead, err = resourceList(pod.Spec.Overhead, err)
	if r := pod.Spec.Resources; r != nil {
		p.Spec.Resources = &corev1.ResourceRequirements{}
		p.Spec.Resources.Requests, err = resourceList(r.Requests, err)
		p.Spec.Resources.Limits, err = resourceList(r.Limits, err)
	}
	if err != nil {
		return nil, err
	}
	needs := quotaNeeds{"pods": 1000, "count/pods": 1000}
	for prefix, list := range map[string]corev1.ResourceList{
		"requests.": resourcehelper.PodRequests(&p, resourcehelper.PodResourcesOptions{}),
		"limits.":   resourcehelper.PodLimits(&p, resourcehelper.PodResourcesOptions{}),
	} {
		for name, q := range list {
			m, err := quantity.Parse(q.String())
			if err != nil {
				return nil, fmt.Errorf("the dry run's Pod: %s%s: %w", prefix, name, err)
			}
			needs[prefix+string(name)] = m
			if prefix == "requests." {
				// A quota's "cpu" or "hugepages-2Mi" is its request.
				needs[string(name)] = m
			}
		}
	}
	return needs, nil
}

// resourceList reads a map of quantity texts, unless an earlier one failed.
func resourceList(m map[string]jsonQuantity, err error) (corev1.ResourceList, error) {
	if err != nil || len(m) == 0 {
		return nil, err
	}
	out := make(corev1.ResourceList, len(m))
	for name, text := range m {
		if err := quantity.Check(string(text)); err != nil {
			return nil, fmt.Errorf("the dry run's Pod: %s: %w", boundedText(name), err)
		}
		q, err := resource.ParseQuantity(string(text))
		if err != nil {
			return nil, fmt.Errorf("the dry run's Pod: %s: %w", boundedText(name), err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// quotaBinding names a quota's resource as the status page shows what
// binds a capacity.
func quotaBinding(u QuotaUsage) string { return "quota " + u.Quota + " " + string(u.Resource) }

// quotaCapacity is the capacity of what a check read: for each quota of a
// configured resource, floor((hard − used) / its min_quota_headroom), and
// with needs (a dry run's Pod) for each resource of each quota the Pod
// adds to, floor((hard − used) / what it adds). A quota whose usage is not
// counted yet is not judged, as evaluateHeadroom does not judge it; a
// resource the Pod does not add to (services, a PVC's requests.storage,
// a request of 0) does not bound it. The arithmetic is in clamped
// thousandths (internal/quantity), and a constraint is 0 exactly when hard − used
// < need, evaluateHeadroom's comparison: QuotaExhausted ⇔ capacity 0.
// Unknown when no quota bounds anything.
func quotaCapacity(h Headroom, mins map[corev1.ResourceName]Quantity, needs quotaNeeds) provider.Capacity {
	var c provider.Capacity
	for _, u := range h.Quotas {
		if u.NoUsage {
			continue
		}
		c = c.Min(provider.Constraint(int64(u.Hard.Milli.Sub(u.Used.Milli)), int64(mins[u.Resource].Milli), quotaBinding(u)))
	}
	if needs == nil {
		return c
	}
	for _, u := range h.PodQuotas {
		need, ok := needs[string(u.Resource)]
		if !ok || need <= 0 || u.NoUsage {
			continue
		}
		c = c.Min(provider.Constraint(int64(u.Hard.Milli.Sub(u.Used.Milli)), int64(need), quotaBinding(u)))
	}
	return c
}

// podQuotaUsages are the resources of the quotas the capacity of a
// pod_template weighs: every resource of every quota without scopes
// (rawQuota.Scoped), by quota and resource name. A quantity that cannot
// be read leaves that resource out, with a line in the check's log: it
// only bounds the capacity, and the configured resources' verdict is
// listQuotas' business.
func podQuotaUsages(list []rawQuota, warn func(msg string, args ...any)) []QuotaUsage {
	var out []QuotaUsage
	for _, q := range list {
		if q.Scoped {
			warn("resource quota with scopes is left out of the capacity", "quota", provider.BoundString(q.Name))
			continue
		}
		hard := q.StatusHard
		if len(hard) == 0 {
			hard = q.SpecHard
		}
		for _, res := range slices.Sorted(maps.Keys(hard)) {
			h, err := parseQuantity(hard[res])
			if err != nil {
				warn("quota quantity unreadable: left out of the capacity", "quota", provider.BoundString(q.Name), "resource", provider.BoundString(res), "err", err)
				continue
			}
			u := QuotaUsage{Quota: provider.BoundString(q.Name), Resource: corev1.ResourceName(res), Hard: h, NoSeries: true}
			if usedText, ok := q.Used[res]; ok {
				if u.Used, err = parseQuantity(usedText); err != nil {
					warn("quota quantity unreadable: left out of the capacity", "quota", provider.BoundString(q.Name), "resource", provider.BoundString(res), "err", err)
					continue
				}
			} else {
				u.NoUsage = true
			}
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b QuotaUsage) int {
		return strings.Compare(a.Quota+"\x00"+string(a.Resource), b.Quota+"\x00"+string(b.Resource))
	})
	return out
}
