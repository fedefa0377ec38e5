package kubernetes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// needsNamespaces says whether a term of the fit reads namespaces'
// labels: a required pod affinity or anti-affinity term of the Pod with a
// namespaceSelector that is not empty (an empty one is every namespace),
// or a bound Pod's anti-affinity term with one (matched against the Pod's
// namespace). Only then are namespaces listed: no watch of namespaces for
// the many entries without such terms, and no grant needed for them.
func needsNamespaces(pod *corev1.Pod, pods []*corev1.Pod) bool {
	if termsSelectNamespaces(pod) {
		return true
	}
	for _, p := range pods {
		if p.Spec.Affinity != nil && termsSelectNamespaces(p) {
			return true
		}
	}
	return false
}

func termsSelectNamespaces(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	if a == nil {
		return false
	}
	var terms []corev1.PodAffinityTerm
	if a.PodAffinity != nil {
		terms = append(terms, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
	}
	if a.PodAntiAffinity != nil {
		terms = append(terms, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
	}
	for _, t := range terms {
		if s := t.NamespaceSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
			return true
		}
	}
	return false
}

// namespaceList lists the cluster's namespaces (their names and labels)
// with the watches' client.
func (ws *watchSet) namespaceList(ctx context.Context) ([]*corev1.Namespace, error) {
	if ws.core == nil {
		return nil, fmt.Errorf("no client to list namespaces with")
	}
	l, err := ws.core.Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces, which a namespaceSelector term needs: %w", err)
	}
	out := make([]*corev1.Namespace, 0, len(l.Items))
	for i := range l.Items {
		n := &l.Items[i]
		out = append(out, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}})
	}
	return out, nil
}
