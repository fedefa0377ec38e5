package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// needsNamespaces says whether a term of the fit reads namespaces'
// labels: a required pod affinity or anti-affinity term of the Pod with a
// namespaceSelector that is not empty (an empty one is every namespace),
// or a bound Pod's anti-affinity term with one (matched against the Pod's
// namespace). Only then are namespaces watched: no watch of namespaces
// for the many entries without such terms, and no grant needed for them.
// The bound Pods' are counted by the cluster cache as their events arrive
// (clusterCache.nsTerms), not looked for in every Pod at every check.
func needsNamespaces(pod *corev1.Pod, cc *clusterCache) bool {
	return termsSelectNamespaces(pod) || cc.nsTerms.Load() > 0
}

func termsSelectNamespaces(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	if a == nil {
		return false
	}
	selects := func(terms []corev1.PodAffinityTerm) bool {
		for _, t := range terms {
			if s := t.NamespaceSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
				return true
			}
		}
		return false
	}
	return a.PodAffinity != nil && selects(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) ||
		a.PodAntiAffinity != nil && selects(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
}

// keepNamespace is what the namespaces' watch stores of a Namespace: its
// name and labels, within the bounds of a Pod's labels (bounds_pod.go);
// over them, a stub naming the bound.
func keepNamespace(n *corev1.Namespace) *corev1.Namespace {
	meta := metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}
	if _, ok := n.Annotations[overBoundAnnotation]; ok {
		return n // already kept: the transform may run twice
	}
	if why := labelsOverBound(n.Labels); why != "" {
		meta.Annotations = map[string]string{overBoundAnnotation: why}
	} else {
		meta.Labels = n.Labels
	}
	return &corev1.Namespace{ObjectMeta: meta}
}

// namespaceList is the cluster's namespaces (their names and labels) from
// the watch of namespaces, which the first call starts; it waits, at most
// until ctx ends, for its cache to fill. A namespace whose labels are over
// the bound is an error naming it: no namespaceSelector is judged on a
// namespace whose labels were not kept.
func (ws *watchSet) namespaceList(ctx context.Context) ([]*corev1.Namespace, error) {
	ws.nsOnce.Do(func() { close(ws.nsStart) })
	w := ws.namespaces
	for w.informer == nil || !w.informer.HasSynced() {
		if _, err := w.state(); err != nil {
			return nil, fmt.Errorf("watch namespaces, which a namespaceSelector term needs: %w", err)
		}
		if w.informer == nil {
			return nil, errors.New("watch namespaces: no watch")
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("the watch cache of namespaces, which a namespaceSelector term needs, is still filling: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
	if since, err := w.state(); err != nil {
		return nil, fmt.Errorf("the watch of namespaces has been failing for %s, so its cache may be stale: %w", time.Since(since).Round(time.Second), err)
	}
	l := w.informer.GetStore().List()
	out := make([]*corev1.Namespace, 0, len(l))
	for _, o := range l {
		n, ok := o.(*corev1.Namespace)
		if !ok {
			continue
		}
		if why, over := n.Annotations[overBoundAnnotation]; over {
			return nil, fmt.Errorf("namespace %s has labels over the exporter's bounds (%s): no namespaceSelector term is judged", boundedText(n.Name), why)
		}
		out = append(out, n)
	}
	return out, nil
}
