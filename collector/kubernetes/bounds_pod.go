package kubernetes

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// What the Pod watch keeps of each Pod is bounded (docs/security.md:
// "Strings, labels and pages"):
//
//   - only Pods bound to a node are listed and watched (the field
//     selector boundPods): a Pending Pod occupies nothing the fit counts,
//     and the API server does not even send it. One that comes all the
//     same (a server that ignores the selector) is kept as its name only;
//   - a bound Pod keeps its labels, required pod affinity terms and host
//     ports (what the scheduler's plugins read) only within the bounds
//     below. The API server bounds none of them but by the object's size
//     (1.5 MiB in etcd): 16,000 labels are a valid Pod. One over a bound is
//     kept as a stub naming the bound (overBoundAnnotation), and its node
//     is not judged, as a node with a quantity that cannot be read.
//
// The bounds are far above what real Pods carry: a Deployment's Pod has
// 3-10 labels of some 30-60 bytes each (Helm's and Kustomize's standard
// labels, pod-template-hash, a service mesh's few), a proxy a term or two
// and a host port or two.
const (
	// maxPodLabels and maxLabelBytes bound a Pod's labels: their number
	// and their keys' and values' bytes (a label key is at most 316
	// bytes, a value 63: 32 labels of the longest keys fit).
	maxPodLabels  = 128
	maxLabelBytes = 16 << 10
	// maxPodTerms and maxTermBytes bound its required pod affinity and
	// anti-affinity terms together: their number and the bytes of their
	// selectors, namespaces, topology keys and label keys.
	maxPodTerms  = 32
	maxTermBytes = 16 << 10
	// maxHostPorts bounds its host ports (hostNetwork's included).
	maxHostPorts = 256
)

// overBoundAnnotation marks the stub of a bound Pod over a bound; its
// value says which. The stub keeps the Pod's name, namespace, node and
// phase, never its labels, terms, ports or requests.
const overBoundAnnotation = "provider-health-exporter.internal/over-bound"

// boundPods is the Pod watch's field selector: bound to a node and not
// terminal, as kube-scheduler's cache holds Pods (a Succeeded or Failed
// Pod holds nothing on its node). A Pod only nominated to a node
// (status.nominatedNodeName, set while preemption makes room for it)
// comes from a watch of its own (nominated.go).
var boundPods = "spec.nodeName!=," + nonTerminalPods

// keepPod is what the Pod watch stores of p: stripPod's copy, or a stub
// when p is not bound or is over a bound.
func keepPod(p *corev1.Pod) *corev1.Pod {
	if p.Spec.NodeName == "" {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
			Status: corev1.PodStatus{Phase: p.Status.Phase}}
	}
	if _, ok := p.Annotations[overBoundAnnotation]; ok {
		// The transform may run twice on one object (a watch-list's
		// initial events): a stub stays one.
		return p
	}
	if _, ok := p.Annotations[unreadableAnnotation]; ok {
		// Already a stub (a quantity that cannot be read), without labels
		// or terms.
		return stripPod(p)
	}
	why := podOverBound(p)
	if why == "" {
		return stripPod(p)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Annotations: map[string]string{overBoundAnnotation: why}},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
}

// podOverBound says which bound p's labels, terms or host ports are
// over; "" when none.
func podOverBound(p *corev1.Pod) string {
	if why := labelsOverBound(p.Labels); why != "" {
		return why
	}
	terms, size := termsSize(p)
	if terms > maxPodTerms {
		return fmt.Sprintf("%d required pod affinity and anti-affinity terms, over the bound of %d", terms, maxPodTerms)
	}
	if size > maxTermBytes {
		return fmt.Sprintf("required pod affinity and anti-affinity terms of %d bytes, over the bound of %d KiB", size, maxTermBytes>>10)
	}
	if ports := len(schedutil.GetHostPorts(p)); ports > maxHostPorts {
		return fmt.Sprintf("%d host ports, over the bound of %d", ports, maxHostPorts)
	}
	return ""
}

// labelsOverBound says which bound of labels l is over; "" when none.
func labelsOverBound(l map[string]string) string {
	if len(l) > maxPodLabels {
		return fmt.Sprintf("%d labels, over the bound of %d", len(l), maxPodLabels)
	}
	n := 0
	for k, v := range l {
		n += len(k) + len(v)
	}
	if n > maxLabelBytes {
		return fmt.Sprintf("labels of %d bytes, over the bound of %d KiB", n, maxLabelBytes>>10)
	}
	return ""
}

// termsSize is the number of p's required pod affinity and anti-affinity
// terms and the bytes of their strings.
func termsSize(p *corev1.Pod) (terms, size int) {
	a := p.Spec.Affinity
	if a == nil {
		return 0, 0
	}
	var all []corev1.PodAffinityTerm
	if a.PodAffinity != nil {
		all = append(all, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
	}
	if a.PodAntiAffinity != nil {
		all = append(all, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
	}
	for _, t := range all {
		size += len(t.TopologyKey) + selectorSize(t.LabelSelector) + selectorSize(t.NamespaceSelector)
		for _, s := range [][]string{t.Namespaces, t.MatchLabelKeys, t.MismatchLabelKeys} {
			for _, v := range s {
				size += len(v)
			}
		}
	}
	return len(all), size
}

func selectorSize(s *metav1.LabelSelector) int {
	if s == nil {
		return 0
	}
	n := 0
	for k, v := range s.MatchLabels {
		n += len(k) + len(v)
	}
	for _, e := range s.MatchExpressions {
		n += len(e.Key) + len(e.Operator)
		for _, v := range e.Values {
			n += len(v)
		}
	}
	return n
}
