package kubernetes

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The fit's arithmetic never wraps (docs/security.md: "Strings, labels and
// pages"): a quantity beyond what int64 holds in the fit's unit
// (thousandths of a cpu, bytes, units) reads as math.MaxInt64, sums
// saturate there, and a node whose bound Pods' requests reach it takes no
// copy, with the request that could not be counted named as the cause.
// Quantity.MilliValue of 2^63−1 cpus would wrap to −1000, and the sum of
// three requests of 2^62 bytes to a negative number: room on a full node.

// maxMilli and maxUnits are the largest quantities the fit counts, in its
// units; they are only compared with, never changed.
var (
	maxMilli = resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)
	maxUnits = resource.NewQuantity(math.MaxInt64, resource.DecimalSI)
)

// satMilli is q in thousandths, saturated at ±math.MaxInt64.
func satMilli(q resource.Quantity) (v int64, saturated bool) {
	switch {
	case q.Cmp(*maxMilli) >= 0:
		return math.MaxInt64, true
	case q.Sign() < 0:
		neg := q.DeepCopy()
		neg.Neg()
		if neg.Cmp(*maxMilli) >= 0 {
			return -math.MaxInt64, true
		}
	}
	return q.MilliValue(), false
}

// satValue is q in units, rounded up, saturated at ±math.MaxInt64.
func satValue(q resource.Quantity) (v int64, saturated bool) {
	switch {
	case q.Cmp(*maxUnits) >= 0:
		return math.MaxInt64, true
	case q.Sign() < 0:
		neg := q.DeepCopy()
		neg.Neg()
		if neg.Cmp(*maxUnits) >= 0 {
			return -math.MaxInt64, true
		}
	}
	return q.Value(), false
}

// satAdd is a + b for a, b ≥ 0, saturated at math.MaxInt64.
func satAdd(a, b int64) (sum int64, saturated bool) {
	if a > math.MaxInt64-b {
		return math.MaxInt64, true
	}
	return a + b, false
}

// causeUnreadable is the cause of a node that takes no copy because a
// quantity of it, or of a Pod bound to it, could not be read
// (bounds_watch.go), or a Pod bound to it is over the watch's bounds
// (bounds_pod.go): why says which.
func causeUnreadable(node *corev1.Node, u *nodeUse) string {
	if why, ok := node.Annotations[unreadableAnnotation]; ok {
		return "node(s) with a quantity that cannot be read (" + why + ")"
	}
	if u != nil && u.unreadable != "" {
		return "node(s) with a bound Pod whose quantities cannot be read (" + u.unreadable + ")"
	}
	if u != nil && u.overBound != "" {
		// Its labels and terms were not kept: whether they repel or
		// attract the Pod is not judged.
		return "node(s) not judged: a bound Pod's labels or terms are over the exporter's bounds (" + u.overBound + ")"
	}
	return ""
}

// causeUncounted is the cause of a node whose bound Pods request more
// than the fit can count.
func causeUncounted(u *nodeUse) string {
	if u == nil || u.uncounted == "" {
		return ""
	}
	return "node(s) whose bound Pods' requests cannot be counted (" + u.uncounted + ")"
}

// noteUncounted says which request of p could not be counted.
func noteUncounted(p *corev1.Pod, name corev1.ResourceName) string {
	text := ""
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[name]; ok {
			text = " " + q.String()
			break
		}
	}
	return fmt.Sprintf("%s/%s requests %s%s, beyond 2^63−1 in all", boundedText(p.Namespace), boundedText(p.Name), name, boundedText(text))
}
